// Acting on waste in a real Chromium (issue 24, docs/ACTIONS.md), logged in with a real
// session: the Jobs page (runs per owner and per team, filters in the address), a job's report
// card (every figure of GET /api/v1/jobs/{id}/report, the advice with its numbers, ending a
// running job from the page), the fleet page's collocation plan and its saving, and the Reclaim
// page (report routes, a policy created in the form and its dry run, a live reclaim's logged
// steps and its snooze), each page checked with axe-core. The data is real: the agent replays
// traces whose processes carry owners (a Slurm job, a lone process, a notebook pod) into the
// server started by scripts/browser-test.sh (FLEETLENS_URL, FLEETLENS_TOKEN,
// FLEETLENS_ADMIN_EMAIL, FLEETLENS_ADMIN_PASSWORD, SCREENSHOT_DIR); the webhook channel is a
// real HTTP receiver.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import {
  EMAIL, PASSWORD, T, TOKEN, URL, api as fetchApi, launchChromium, logIn, seriousViolations, shot, startReceiver,
  waitForText,
} from './helpers.mjs';

assert.ok(URL && TOKEN && EMAIL && PASSWORD, 'run scripts/browser-test.sh');

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const AGENT = path.join(ROOT, 'target/debug/fleetlens-agent');
const H100 = 'NVIDIA H100 80GB HBM3';
const MINUTE = 60_000;
// Names of this file's own: the other browser tests share the server.
const HOST = 'act-node';
const SLURM_KEY = 'slurm:94242';
const POD_KEY = 'pod:act/nb-bob';
const LIVE_HOST = 'reclaim-node';
const LIVE_GPU = 'GPU-act-idle';

let browser;
let context;
let page;
let receiver;
let receiverUrl;
let tmp;
let liveAgent;
const received = [];
const consoleErrors = [];

async function api(pathAndQuery, init = {}) {
  const r = await fetchApi(pathAndQuery, init);
  const text = await r.text();
  let body = null;
  try {
    body = JSON.parse(text);
  } catch {
    body = text;
  }
  return { status: r.status, body };
}

async function until(what, fn, timeout = 60_000) {
  const end = Date.now() + timeout;
  let last;
  while (Date.now() < end) {
    last = await fn();
    if (last) return last;
    await new Promise((r) => setTimeout(r, 250));
  }
  assert.fail(`${what}: timed out`);
}

/** Every data table of the page has a caption (its text equivalent's name) and column headers. */
async function tablesAreNamed(p) {
  const bad = await p.evaluate(() => [...document.querySelectorAll('main table')]
    .filter((t) => !t.querySelector('caption')?.textContent.trim() || !t.querySelector('thead th'))
    .map((t) => t.className));
  assert.deepEqual(bad, [], 'tables without a caption or headers');
}

/** One 1-Hz sample line of a GPU. */
function sample(host, uuid, ts, util, smact, tensor, procs) {
  const held = procs.length > 0;
  return JSON.stringify({
    host, ts_ms: ts, uuid, gpu_index: 0, name: H100,
    gpu_util_pct: util, sm_active_pct: smact, sm_occupancy_pct: smact / 2, tensor_active_pct: tensor,
    dram_active_pct: 12, mem_used_bytes: held ? 40 * 2 ** 30 : 0, mem_total_bytes: 85899345920,
    power_w: 100 + util * 5, power_limit_w: 700, processes: procs,
  });
}

function trace(host, uuid, start, minutes, util, smact, tensor, procs) {
  const out = [];
  for (let i = 0; i < minutes * 60; i++) out.push({ ts: start + i * 1000, line: sample(host, uuid, start + i * 1000, util, smact, tensor, procs) });
  return out;
}

function writeTrace(name, parts) {
  const lines = parts.flat().sort((a, b) => a.ts - b.ts).map((l) => l.line);
  const file = path.join(tmp, name);
  fs.writeFileSync(file, lines.join('\n') + '\n');
  return file;
}

function agent(file, extra) {
  return spawn(AGENT, ['--server', URL, '--api-key', TOKEN, '--source', `replay:${file}`,
    '--spool-dir', path.join(tmp, `spool-${path.basename(file)}`), ...extra], { stdio: ['ignore', 'ignore', 'inherit'] });
}

async function replayOnce(file) {
  const child = agent(file, ['--once']);
  const code = await new Promise((r) => child.on('exit', r));
  assert.equal(code, 0, `agent replay of ${file}`);
}

const enc = (key) => encodeURIComponent(key);
/** Dollars as the dashboard writes them (`$0.46`, `$1,234`), read back. */
const dollars = (text) => Number(text.trim().replace(/^\$/, '').replace(/,/g, ''));
/** The text holds `$x` within a cent of `v` (the page and JavaScript may round a half cent apart). */
function hasDollars(text, v) {
  return [...text.matchAll(/\$([\d,]+\.\d\d)/g)].some((m) => Math.abs(dollars(m[0]) - v) <= 0.011);
}

before(async () => {
  tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'fleetlens-actions-'));
  receiver = await startReceiver(received);
  receiverUrl = `http://127.0.0.1:${receiver.address().port}`;

  // Three GPUs of one host, 13 minutes, 2 h ago (as tests/tests/actions_api.rs): dave's Slurm
  // job hollow (util 61 %, SM activity 9 %) for 10 min then gone; alice's lone process busy for
  // 10 min then gone; bob's notebook pod holding 30 GiB with no kernels all along.
  const start = (Math.floor(Date.now() / MINUTE) - 120) * MINUTE;
  const slurm = [{ pid: 31337, used_bytes: 38 * 2 ** 30, sm_pct: 9, owner: { user: 'dave', job_id: '94242', job_user: 'dave', job_partition: 'gpu' } }];
  const alice = [{ pid: 777, used_bytes: 70 * 2 ** 30, sm_pct: 90, owner: { user: 'alice' } }];
  const bob = [{ pid: 4040, used_bytes: 30 * 2 ** 30, sm_pct: 0, owner: { user: 'bob', pod_uid: 'act-0b6f', pod_name: 'nb-bob', namespace: 'act' } }];
  await replayOnce(writeTrace('jobs-1.jsonl', [
    trace(HOST, 'GPU-act-A', start, 10, 61, 9, 0, slurm),
    trace(HOST, 'GPU-act-B', start, 10, 98, 90, 60, alice),
    trace(HOST, 'GPU-act-C', start, 10, 0, 0, 0, bob),
  ]));
  // The Slurm job's throughput (its GPU is registered now): 120 TFLOP/s of bf16.
  const mfu = await api('/api/v1/jobs', { method: 'POST', body: JSON.stringify({
    name: 'train-94242', gpus: ['GPU-act-A'], from: start, to: start + 10 * MINUTE, precision: 'bf16', achieved_flops_per_s: 1.2e14,
  }) });
  assert.equal(mfu.status, 201, JSON.stringify(mfu.body));
  await replayOnce(writeTrace('jobs-2.jsonl', [
    trace(HOST, 'GPU-act-A', start + 10 * MINUTE, 3, 0, 0, 0, []),
    trace(HOST, 'GPU-act-B', start + 10 * MINUTE, 3, 0, 0, 0, []),
    trace(HOST, 'GPU-act-C', start + 10 * MINUTE, 3, 0, 0, 0, bob),
  ]));
  // Dave's and alice's runs end at the leader's next scans (their GPUs listed their processes
  // without them for more than --job-end-after).
  for (const key of [SLURM_KEY, `pid:${HOST}/777`]) {
    await until(`${key} ended`, async () => {
      const r = await api(`/api/v1/job-runs/${enc(key)}`);
      return r.status === 200 && r.body.status === 'ended';
    }, 90_000);
  }

  browser = await launchChromium();
  // axe is injected as a script of its own: the dashboard's Content-Security-Policy would refuse it.
  context = await browser.newContext({ viewport: { width: 1280, height: 900 }, bypassCSP: true });
  page = await context.newPage();
  page.on('console', (msg) => {
    if (msg.type() === 'error' && !/Failed to load resource/.test(msg.text())) consoleErrors.push(msg.text());
  });
  page.on('pageerror', (err) => consoleErrors.push(`uncaught: ${err.message}`));
  await logIn(page);
});

after(async () => {
  liveAgent?.kill('SIGTERM');
  await browser?.close();
  receiver?.close();
  if (tmp) fs.rmSync(tmp, { recursive: true, force: true });
});

test('Jobs: the runs of an owner from the address, summed per owner and per team, each with its card figures', async () => {
  await page.goto(`${URL}/jobs?range=24h&owner=dave`);
  const row = page.locator(`tr[data-run-key="${SLURM_KEY}"]`);
  await row.waitFor({ timeout: T });
  const card = (await api(`/api/v1/jobs/${enc(SLURM_KEY)}/report`)).body;
  const text = await row.textContent();
  assert.match(text, /dave · Slurm job 94242/);
  assert.match(text, /hollow/);
  assert.match(text, new RegExp(`${Math.round(card.efficiency)}%`), text);
  assert.equal(card.currency, 'USD');
  assert.ok(hasDollars(text, card.cost) && hasDollars(text, card.wasted_cost), `${text} vs ${card.cost}, ${card.wasted_cost}`);
  // The owner filter is the server's: only dave's runs are listed (the simulated fleet has a
  // dave too), alice's and bob's are not.
  const owners = await page.locator('table.run-table tbody tr td:nth-of-type(1)').allTextContents();
  assert.ok(owners.length >= 1 && owners.every((o) => /^dave\b/.test(o)), JSON.stringify(owners));
  const now = Date.now();
  const davesRuns = (await api(`/api/v1/job-runs?owner=dave&from=${now - 86_400_000}&to=${now}&limit=500`)).body;
  assert.equal(owners.length, davesRuns.length);
  assert.equal(await page.locator(`tr[data-run-key="${POD_KEY}"], tr[data-run-key="pid:${HOST}/777"]`).count(), 0);
  assert.equal(await page.locator('#job-owner').inputValue(), 'dave');
  const group = page.locator('table.job-group-table tr[data-group="dave"]');
  assert.match(await group.textContent(), new RegExp(`^dave${davesRuns.length}`));
  await shot(page, 'jobs-dave');
  assert.deepEqual(await seriousViolations(page), []);
  await tablesAreNamed(page);

  // Another owner typed in the filter: the address follows.
  await page.fill('#job-owner', 'alice');
  await page.locator('#job-owner').press('Enter');
  await page.locator(`tr[data-run-key="pid:${HOST}/777"]`).waitFor({ timeout: T });
  assert.match(page.url(), /owner=alice/);
  // Per team: the runs' GPUs have no team, summed under "(none)".
  await page.selectOption('#job-by', 'team');
  await waitForText(page.locator('#job-groups-title'), /Per team/);
  assert.match(page.url(), /by=team/);
  await page.locator('table.job-group-table tr[data-group="(none)"]').waitFor({ timeout: T });
});

test('a report card shows every figure of GET /jobs/{id}/report, with the advice and its numbers', async () => {
  await page.goto(`${URL}/jobs?range=24h&owner=dave`);
  await page.locator(`tr[data-run-key="${SLURM_KEY}"] a`).click();
  await page.waitForURL(/\/jobs\/\d+$/, { timeout: T });
  await waitForText(page.locator('h1'), new RegExp(`Job ${SLURM_KEY}`));
  const card = (await api(`/api/v1/jobs/${enc(SLURM_KEY)}/report`)).body;
  await page.locator('[data-testid=card-kpis]').waitFor({ timeout: T });
  assert.equal(await page.textContent('[data-testid=card-sm]'), '9.0%');
  assert.equal(await page.textContent('[data-testid=card-efficiency]'), `${Math.round(card.efficiency)}%`);
  assert.equal(await page.textContent('[data-testid=card-peak]'), '38 GiB');
  assert.ok(hasDollars(await page.textContent('[data-testid=card-cost]'), card.cost), `cost ${card.cost}`);
  assert.ok(hasDollars(await page.textContent('[data-testid=card-wasted]'), card.wasted_cost), `wasted ${card.wasted_cost}`);
  assert.equal(await page.textContent('[data-testid=card-mfu]'), `${(card.mfu * 100).toFixed(card.mfu * 100 < 10 ? 1 : 0)}%`);
  const advice = await page.textContent('[data-testid=advice] li[data-advice=hollow]');
  assert.match(advice, /SM activity 9 % with util 61 %/);
  assert.ok(advice.includes(card.advice[0].text), advice);
  // Hours per state: a table (the card's text equivalent of the bars).
  assert.match(await page.textContent('table.card-state-table tr[data-state-row=hollow]'), /10 min\s*100%/);
  assert.match(await page.textContent('table.card-gpu-table'), /GPU-act-A/);
  assert.equal(await page.locator('[data-testid=end-run]').count(), 0, 'an ended run has no end button');
  await shot(page, 'job-card');
  assert.deepEqual(await seriousViolations(page), []);
  await tablesAreNamed(page);
});

test('a running job is ended from its page; its card follows', async () => {
  const run = (await api(`/api/v1/job-runs/${enc(POD_KEY)}`)).body;
  assert.equal(run.status, 'running', JSON.stringify(run));
  await page.goto(`${URL}/jobs/${run.id}`);
  await page.locator('[data-testid=no-card]').waitFor({ timeout: T });
  await page.click('[data-testid=end-run]');
  await waitForText(page.locator('.banner-ok'), /ends now/);
  // The leader computes the card 15 s after the end, at its next scan; the page polls.
  await page.locator('[data-testid=card-kpis]').waitFor({ timeout: 60_000 });
  await waitForText(page.locator('[data-testid=run-status]'), /a client ended it/);
  assert.match(await page.textContent('[data-testid=advice]'), /idle held/);
  const ended = (await api(`/api/v1/job-runs/${run.id}`)).body;
  assert.equal(ended.end_reason, 'requested');
  assert.ok(ended.card.hours_by_state.idle_held > 0, JSON.stringify(ended.card));
});

test('fleet page: the collocation plan with its evidence and saving, and the summary\'s plan saving', async () => {
  await page.goto(`${URL}/?range=24h`);
  const plan = page.locator('article[data-plan=collocation]', { hasText: SLURM_KEY });
  await plan.waitFor({ timeout: 30_000 });
  const text = await plan.textContent();
  assert.match(text, /pod:act\/nb-bob/, text);
  assert.match(text, /\/month/);
  assert.match(text, /38 GiB/);
  // The summary's figure, as the API gives it for the page's window.
  const shown = await page.textContent('[data-testid=plan-saving]');
  assert.match(shown, /^\$[\d,.]+\/month$/, shown);
  const now = Date.now();
  const summary = (await api(`/api/v1/fleet/summary?from=${now - 86_400_000}&to=${now}`)).body;
  assert.ok(summary.plan_saving_per_month > 0, JSON.stringify(summary.plan_saving_per_month));
  const figure = Number(shown.replace(/[$,]|\/month/g, ''));
  assert.ok(Math.abs(figure - summary.plan_saving_per_month) <= Math.max(1, summary.plan_saving_per_month * 0.05),
    `${shown} vs ${summary.plan_saving_per_month}`);
  await shot(page, 'fleet-plans');
  assert.deepEqual(await seriousViolations(page), []);
});

test('Reclaim: a report route and a policy made in the forms; the dry run; a live reclaim logged and snoozed', async () => {
  const hook = await api('/api/v1/notification-channels', { method: 'POST', body: JSON.stringify({ name: 'act-automation', kind: 'webhook', url: `${receiverUrl}/reclaim` }) });
  assert.equal(hook.status, 201, JSON.stringify(hook.body));
  const channel = hook.body.id;

  await page.goto(`${URL}/reclaim`);
  await page.locator('#routes-title').waitFor({ timeout: T });
  // A route for dave's cards, from the form.
  await page.fill('#route-owner', 'dave');
  await page.selectOption('#route-channel', String(channel));
  await page.fill('#route-hours', '0.1');
  await page.click('form[aria-label="New report route"] button[type=submit]');
  await waitForText(page.locator('#routes-title ~ .banner-ok, section:has(#routes-title) .banner-ok'), /Cards of dave/);
  const routes = (await api('/api/v1/report-routes')).body;
  const route = routes.find((r) => r.owner === 'dave' && r.channel_id === channel);
  assert.ok(route && route.min_gpu_hours === 0.1 && route.min_waste_pct === 20, JSON.stringify(routes));
  await page.locator(`tr[data-route-id="${route.id}"]`).waitFor({ timeout: T });
  // A bad number is refused at its field, nothing stored.
  await page.fill('#route-hours', 'lots');
  await page.click('form[aria-label="New report route"] button[type=submit]');
  await page.locator('.field-error[data-field=min_gpu_hours]').waitFor({ timeout: T });
  assert.equal((await api('/api/v1/report-routes')).body.length, routes.length);

  // A policy from the form: idle held for 5 minutes, 5 minutes' grace, to the webhook.
  await page.fill('#policy-name', 'act: idle notebooks');
  await page.fill('#policy-for', '5');
  await page.fill('#policy-grace', '5');
  await page.selectOption('#policy-action-channel', String(channel));
  await page.click('form[aria-label="New reclaim policy"] button[type=submit]');
  await waitForText(page.locator('section:has(#policies-title) .banner-ok'), /act: idle notebooks/);
  const policy = (await api('/api/v1/reclaim-policies')).body.find((p) => p.name === 'act: idle notebooks');
  assert.ok(policy, 'policy stored');
  assert.deepEqual([policy.state, policy.for_s, policy.grace_s, policy.action, policy.action_channel_id], ['idle_held', 300, 300, 'webhook', channel]);
  // Its dry run over the past week: bob's 13 idle-held minutes would have been acted on after
  // 10, freeing the last 3.
  const row = page.locator(`tr[data-policy-id="${policy.id}"]`);
  await row.locator('button', { hasText: 'Dry run' }).click();
  const summary = await waitForText(page.locator('[data-testid=dry-run-summary]'), /actions?, .* of idle held GPU-time freed/);
  const dry = (await api(`/api/v1/reclaim-policies/${policy.id}/dry-run`)).body;
  assert.ok(dry.actions >= 1, JSON.stringify(dry));
  assert.ok(summary.startsWith(`${dry.actions} action`), `${summary} vs ${dry.summary}`);
  assert.ok(dry.items.some((i) => i.gpu === 'GPU-act-C'), JSON.stringify(dry.items));
  assert.match(await page.textContent('table.dry-run-table'), /GPU-act-C/);
  await shot(page, 'reclaim-dry-run');

  // A live reclaim: a quick policy, and a GPU held idle by carol's notebook, replayed as live data.
  const quick = await api('/api/v1/reclaim-policies', { method: 'POST', body: JSON.stringify({
    name: 'act: quick', state: 'idle_held', for_s: 2, grace_s: 3600, action: 'webhook', action_channel_id: channel,
  }) });
  assert.equal(quick.status, 201, JSON.stringify(quick.body));
  const procs = [{ pid: 5151, used_bytes: 20 * 2 ** 30, sm_pct: 0, owner: { user: 'carol', namespace: 'act', pod_name: 'nb-carol', pod_uid: 'act-carol' } }];
  const live = writeTrace('live.jsonl', [trace(LIVE_HOST, LIVE_GPU, 1_000_000, 4, 0, 0, 0, procs)]);
  liveAgent = agent(live, ['--rebase-ts']);
  const reclaim = await until('the live reclaim noticed', async () => {
    const list = (await api('/api/v1/reclaims')).body;
    return list.find((r) => r.policy_id === quick.body.id && r.gpu === LIVE_GPU);
  }, 90_000);
  const item = page.locator(`article[data-reclaim-id="${reclaim.id}"]`);
  await item.waitFor({ timeout: 30_000 });
  assert.match(await item.textContent(), /carol/);
  const notice = item.locator('tr[data-step=notice]');
  // The money held by the notice: the GPU's price × its seconds in the state (under a cent here).
  assert.match(await notice.textContent(), /notice sent\s*fleetlens\s*(under )?\$\d+\.\d\d/);
  await item.locator('button', { hasText: 'Snooze 1 h' }).click();
  await waitForText(page.locator('section:has(#reclaims-title) .banner-ok'), /snoozed until/);
  await item.locator('tr[data-step=snooze]').waitFor({ timeout: T });
  assert.match(await item.locator('[data-testid=reclaim-status]').textContent(), /snoozed until/);
  const after = (await api(`/api/v1/reclaims/${reclaim.id}`)).body;
  assert.ok(after.snoozed_until_ms > Date.now() + 50 * MINUTE, JSON.stringify(after));
  assert.deepEqual(after.log.map((s) => s.step).slice(0, 2), ['notice', 'snooze']);
  await shot(page, 'reclaim-live');
  assert.deepEqual(await seriousViolations(page), []);
  await tablesAreNamed(page);

  // The policies leave the shared server as they were: deleted from the page and the API.
  await row.locator('button', { hasText: 'Delete' }).click();
  await page.click('[data-confirm]');
  await row.waitFor({ state: 'detached', timeout: T });
  assert.equal((await api(`/api/v1/reclaim-policies/${quick.body.id}`, { method: 'DELETE' })).status, 204);
  liveAgent.kill('SIGTERM');
  liveAgent = null;
});

test('a viewer reads jobs, cards and reclaims, and gets no admin forms and no end button', async () => {
  const viewer = { email: 'act-viewer@example.com', password: 'act-viewer-password-1' };
  const made = await api('/api/v1/users', { method: 'POST', body: JSON.stringify({ ...viewer, name: 'Act Viewer', role: 'viewer' }) });
  assert.ok([200, 201, 409].includes(made.status), JSON.stringify(made.body));
  const ctx = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  const p = await ctx.newPage();
  try {
    await logIn(p, viewer.email, viewer.password);
    // A running run (the simulated fleet's processes keep theirs open): no end button for a viewer.
    const running = (await api('/api/v1/job-runs?status=running&limit=1')).body;
    assert.ok(running.length === 1, 'a running run');
    await p.goto(`${URL}/jobs/${running[0].id}`);
    await p.locator('[data-testid=no-card]').waitFor({ timeout: T });
    assert.equal(await p.locator('[data-testid=end-run]').count(), 0);
    await p.goto(`${URL}/reclaim`);
    await p.locator('table.route-table').waitFor({ timeout: T });
    assert.equal(await p.locator('form[aria-label="New reclaim policy"], form[aria-label="New report route"]').count(), 0);
    assert.equal(await p.locator('table.route-table button', { hasText: 'Delete' }).count(), 0);
  } finally {
    await ctx.close();
  }
});

test('no uncaught errors on the console', () => {
  assert.deepEqual(consoleErrors, []);
});
