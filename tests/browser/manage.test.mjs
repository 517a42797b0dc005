// Managing Fleetlens from the dashboard in a real Chromium, logged in with a real session:
// alert rules (the server's condition errors shown at the field), silences, notification
// channels with a test message to a real local receiver, classifier thresholds, jobs and their
// MFU, and what a viewer may not see. Started by scripts/browser-test.sh (after
// dashboard.test.mjs, on the same server): FLEETLENS_URL, FLEETLENS_TOKEN,
// FLEETLENS_ADMIN_EMAIL, FLEETLENS_ADMIN_PASSWORD, SCREENSHOT_DIR.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import {
  EMAIL, PASSWORD, SHOTS, T, TOKEN, URL, api, launchChromium, logIn, shot, startReceiver, waitForText, watchConsole,
} from './helpers.mjs';

assert.ok(URL && TOKEN && EMAIL && PASSWORD, 'run scripts/browser-test.sh');

const FIXTURE_UUID = 'GPU-b8c24ac0-038a-26bb-9696-7e629bc4f276';
const VIEWER = { email: 'viewer@example.com', password: 'viewer-password-1' };
const RULE = 'Browser: any GPU reporting';

let browser;
let context;
let page;
let receiver;
let receiverUrl;
/** Requests the webhook receiver got. */
const received = [];
const consoleErrors = [];
/** API paths whose 4xx answers a step provokes on purpose. */
// `/api/v1/stream`: the dashboard's probe for the live stream (`?once=true`); a server without
// it answers 404 and the dashboard polls instead.
const expectedFailures = new Set(['/api/v1/auth/me', '/api/v1/stream']);

const watch = (p) => watchConsole(p, consoleErrors, expectedFailures);

/** The card section whose heading has this id. */
const section = (p, id) => p.locator('section', { has: p.locator(`#${id}`) });

/** Runs `fn` with the 4xx answers of `paths` expected. */
async function expecting(paths, fn) {
  for (const p of paths) expectedFailures.add(p);
  try {
    await fn();
  } finally {
    // Chromium reports a failed request on the console a moment after the page has seen it.
    await new Promise((r) => setTimeout(r, 500));
    for (const p of paths) if (p !== '/api/v1/auth/me') expectedFailures.delete(p);
  }
}

before(async () => {
  receiver = await startReceiver(received);
  receiverUrl = `http://127.0.0.1:${receiver.address().port}/hook`;

  const r = await api('/api/v1/users', { method: 'POST', body: JSON.stringify({ ...VIEWER, name: 'Vera Viewer', role: 'viewer' }) });
  assert.ok([201, 200, 409].includes(r.status), `viewer user: ${r.status} ${await r.text()}`);

  browser = await launchChromium();
  context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  page = await context.newPage();
  watch(page);
  await logIn(page, EMAIL, PASSWORD);
});

after(async () => {
  await browser?.close();
  receiver?.close();
});

test('state-changing requests carry the CSRF token; without it the server refuses', async () => {
  await expecting(['/api/v1/alert-rules/check'], async () => {
    const status = await page.evaluate(async () => {
      const r = await fetch('/api/v1/alert-rules/check', {
        method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ condition: 'gpu_util_pct > 1' }),
      });
      return [r.status, (await r.json()).error?.code];
    });
    assert.deepEqual(status, [403, 'csrf_failed']);
  });
});

test('alert rules: a bad condition is shown at its column; a rule is created, checked and alerts fire', async () => {
  await page.goto(URL + '/alerts');
  await page.getByRole('button', { name: 'New rule' }).click();
  await page.locator('#rule-name').waitFor({ timeout: T });
  assert.equal(await page.evaluate(() => document.activeElement?.id), 'rule-name', 'the editor takes focus');
  await page.fill('#rule-name', RULE);
  await page.fill('#rule-condition', 'gpu_util_pct >= 0 && sm_actve_pct >= 0');
  await page.fill('#rule-for', '0');
  await expecting(['/api/v1/alert-rules', '/api/v1/alert-rules/check'], async () => {
    await page.getByRole('button', { name: 'Create rule' }).click();
    const err = await waitForText(page.locator('pre.field-error[data-field="condition"]'), /unknown field `sm_actve_pct`/);
    assert.match(err, /did you mean `sm_active_pct`/);
    assert.match(err, /\n\s+\^/, 'a caret under the column at fault');
    assert.equal(await page.locator('#rule-condition').getAttribute('aria-invalid'), 'true');
    await shot(page, '11-rule-condition-error');
    // The same through "Check condition", without saving.
    await page.fill('#rule-condition', 'gpu_util_pct >= ');
    await page.getByRole('button', { name: 'Check condition' }).click();
    await waitForText(page.locator('pre.field-error[data-field="condition"]'), /column/);
  });
  await page.fill('#rule-condition', 'gpu_util_pct >= 0');
  await page.getByRole('button', { name: 'Check condition' }).click();
  await waitForText(page.locator('.field-ok'), /The condition is valid/);
  assert.equal(await page.locator('pre.field-error').count(), 0);
  await page.selectOption('#rule-severity', 'info');
  await page.getByRole('button', { name: 'Create rule' }).click();
  await waitForText(section(page, 'rules-title').locator('.banner-ok'), new RegExp(`Rule “${RULE}” created`));
  const row = page.locator('table.rule-table tr', { hasText: RULE });
  await row.waitFor({ timeout: T });
  assert.match(await row.textContent(), /gpu_util_pct >= 0/);
  const rules = await (await api('/api/v1/alert-rules')).json();
  const stored = rules.rules.find((r) => r.name === RULE);
  assert.equal(stored.for_s, 0);
  assert.equal(stored.severity, 'info');

  // for 0 s: every reporting GPU fires at its next sample; the page shows them without a reload.
  await waitForText(page.locator('table.alert-table tbody'), new RegExp(RULE), 20_000);
  await shot(page, '12-alerts-firing');
});

test('silence a firing alert for a chosen duration', async () => {
  const row = page.locator('table.alert-table tbody tr', { hasText: RULE }).filter({ hasNotText: 'silenced' }).first();
  const id = await row.getAttribute('data-alert-id');
  await row.locator('select').selectOption({ label: '4 hours' });
  const before = Date.now();
  await row.getByRole('button', { name: 'Silence' }).click();
  const same = page.locator(`table.alert-table tr[data-alert-id="${id}"]`);
  await waitForText(same, /silenced/, 20_000);
  const silences = (await (await api('/api/v1/silences')).json()).silences;
  const s = silences.find((x) => x.matchers.rule === RULE);
  assert.ok(s, 'the silence is stored');
  assert.ok(Math.abs(s.ends_at_ms - before - 4 * 3_600_000) < 60_000, 'for 4 hours');
  await waitForText(page.locator('table.silence-table'), new RegExp(`rule=${RULE}`));
  assert.equal(await same.locator('.pill', { hasText: 'silenced' }).getAttribute('title'), `by silence ${s.id}`);
  // Its labels are what the silence matched.
  const alert = (await (await api(`/api/v1/alerts/${id}`)).json());
  assert.equal(alert.labels.alertname, RULE);
  assert.equal(alert.labels.gpu, s.matchers.gpu);
});

test('GPU detail lists the GPU\'s alerts', async () => {
  const alerts = (await (await api('/api/v1/alerts?status=firing')).json()).alerts;
  const a = alerts.find((x) => x.rule_name === RULE);
  assert.ok(a, 'a firing alert of the new rule');
  await page.goto(`${URL}/gpus/${a.gpu}`);
  const table = page.locator('table.gpu-alert-table');
  await waitForText(table, new RegExp(RULE));
  assert.match(await table.locator('tr', { hasText: RULE }).first().textContent(), /firing/);
  await page.goto(URL + '/alerts');
  await page.locator('#silences-title').waitFor({ timeout: T });
});

test('silences: the server refuses one without matchers, at the matchers; one is added and ended', async () => {
  await expecting(['/api/v1/silences'], async () => {
    await page.getByRole('button', { name: 'Add silence' }).click();
    await waitForText(page.locator('.field-error[data-field="matchers"]'), /at least one of rule, host, gpu, team, severity/);
  });
  await page.fill('#silence-host', 'sim-node-*');
  await page.selectOption('#silence-severity', 'critical');
  await page.selectOption('#silence-duration', { label: '1 day' });
  await page.fill('#silence-comment', 'maintenance window');
  await page.getByRole('button', { name: 'Add silence' }).click();
  await waitForText(section(page, 'silences-title').locator('.banner-ok'), /host=sim-node-\*, severity=critical/);
  assert.equal(await page.locator('.field-error[data-field="matchers"]').count(), 0);
  const row = page.locator('table.silence-table tr', { hasText: 'maintenance window' });
  await waitForText(row, /active/);
  await row.getByRole('button', { name: 'End now' }).click();
  await waitForText(page.locator('table.silence-table tr', { hasText: 'maintenance window' }), /expired/);
  await shot(page, '13-silences');
});

test('alert rules: edit (with a field error first), disable and delete', async () => {
  await page.getByRole('button', { name: `Edit rule ${RULE}` }).click();
  await page.locator('#rule-for').waitFor({ timeout: T });
  assert.equal(await page.inputValue('#rule-name'), RULE);
  assert.equal(await page.inputValue('#rule-condition'), 'gpu_util_pct >= 0');
  await page.fill('#rule-for', 'soon');
  await page.getByRole('button', { name: 'Save rule' }).click();
  await waitForText(page.locator('pre.field-error[data-field="for_s"]'), /whole seconds/);
  await page.fill('#rule-for', '120');
  await page.selectOption('#rule-severity', 'critical');
  await page.getByRole('button', { name: 'Save rule' }).click();
  await waitForText(section(page, 'rules-title').locator('.banner-ok'), new RegExp(`Rule “${RULE}” saved`));
  const row = page.locator('table.rule-table tr', { hasText: RULE });
  await waitForText(row, /critical/);
  await row.getByRole('button', { name: 'Disable' }).click();
  await waitForText(section(page, 'rules-title').locator('.banner-ok'), /disabled/);
  const stored = (await (await api('/api/v1/alert-rules')).json()).rules.find((r) => r.name === RULE);
  assert.deepEqual([stored.for_s, stored.severity, stored.enabled], [120, 'critical', false]);

  await page.locator('table.rule-table tr', { hasText: RULE }).getByRole('button', { name: `Delete rule ${RULE}` }).click();
  // Keyboard users land on the confirmation that replaced the button.
  await page.waitForFunction(() => document.activeElement?.textContent === 'Confirm delete', null, { timeout: T });
  await page.keyboard.press('Enter');
  await waitForText(section(page, 'rules-title').locator('.banner-ok'), /deleted/);
  await page.waitForFunction((name) => ![...document.querySelectorAll('table.rule-table tbody tr')].some((tr) => tr.textContent.includes(name)), RULE, { timeout: T });
  assert.equal((await (await api('/api/v1/alert-rules')).json()).rules.some((r) => r.name === RULE), false);
});

test('channels: a bad URL is refused at the URL; a webhook is added, its test message delivered, then deleted', async () => {
  await page.fill('#channel-name', 'Browser webhook');
  await page.selectOption('#channel-kind', 'webhook');
  await page.fill('#channel-url', 'ftp://example.invalid/hook');
  await expecting(['/api/v1/notification-channels'], async () => {
    await page.getByRole('button', { name: 'Add channel' }).click();
    await waitForText(page.locator('.field-error[data-field="url"]'), /must be an http:\/\/ or https:\/\/ URL/);
    assert.equal(await page.locator('#channel-url').getAttribute('aria-invalid'), 'true');
  });
  await page.fill('#channel-url', receiverUrl);
  await page.getByRole('button', { name: 'Add channel' }).click();
  await waitForText(section(page, 'channels-title').locator('.banner-ok'), /Channel “Browser webhook” added/);
  const row = page.locator('table.channel-table tr', { hasText: 'Browser webhook' });
  await row.waitFor({ timeout: T });
  assert.match(await row.textContent(), /webhook/);

  // A second channel with the same name: the server's conflict is shown.
  await expecting(['/api/v1/notification-channels'], async () => {
    await page.fill('#channel-name', 'Browser webhook');
    await page.fill('#channel-url', receiverUrl);
    await page.getByRole('button', { name: 'Add channel' }).click();
    await waitForText(section(page, 'channels-title').locator('.banner-error'), /Conflict: a channel named "Browser webhook" exists/);
  });

  await row.getByRole('button', { name: 'Send a test message to Browser webhook' }).click();
  await waitForText(row.locator('.field-ok'), /Test message delivered \(HTTP 200\)/, 20_000);
  const got = received.find((r) => r.method === 'POST' && r.url === '/hook');
  assert.ok(got, 'the receiver got the test message');
  assert.ok(got.headers['x-fleetlens-message-id'], 'with its message id');
  await shot(page, '14-channels');

  await row.getByRole('button', { name: 'Delete channel Browser webhook' }).click();
  await page.locator('table.channel-table tr', { hasText: 'Browser webhook' }).getByRole('button', { name: 'Confirm delete' }).click();
  await waitForText(section(page, 'channels-title').locator('.banner-ok'), /Channel “Browser webhook” deleted/);
  const list = (await (await api('/api/v1/notification-channels')).json()).channels;
  assert.equal(list.some((c) => c.name === 'Browser webhook'), false);
});

test('thresholds: an out-of-range value is refused at its field; a valid one is saved, then reset', async () => {
  await page.goto(URL + '/settings');
  const input = page.locator('#th-hollow_max_sm_util_ratio');
  await input.waitFor({ timeout: T });
  assert.equal(await input.inputValue(), '0.3');
  await input.fill('1.5');
  await expecting(['/api/v1/settings/thresholds'], async () => {
    await page.getByRole('button', { name: 'Save thresholds' }).click();
    await waitForText(page.locator('#th-hollow_max_sm_util_ratio').locator('xpath=../following-sibling::p[contains(@class,"field-error")]'), /not a ratio \(0–1\)/);
    assert.equal(await input.getAttribute('aria-invalid'), 'true');
  });
  await shot(page, '15-thresholds-error');
  await input.fill('0.25');
  await page.getByRole('button', { name: 'Save thresholds' }).click();
  await waitForText(section(page, 'thresholds-title').locator('.banner-ok'), /Thresholds saved/);
  assert.equal((await (await api('/api/v1/settings/thresholds')).json()).hollow_max_sm_util_ratio, 0.25);
  assert.equal(await input.getAttribute('aria-invalid'), 'false');
  await page.getByRole('button', { name: 'Reset to defaults' }).click();
  await waitForText(section(page, 'thresholds-title').locator('.banner-ok'), /reset to the defaults/);
  await page.waitForFunction(() => document.querySelector('#th-hollow_max_sm_util_ratio')?.value === '0.3', null, { timeout: T });
  assert.equal((await (await api('/api/v1/settings/thresholds')).json()).hollow_max_sm_util_ratio, 0.3);
});

test('jobs: MFU per job, n/a where the datasheet has no figure (never 0)', async () => {
  const now = Date.now();
  const post = async (job) => {
    const r = await api('/api/v1/jobs', { method: 'POST', body: JSON.stringify(job) });
    const text = await r.text();
    assert.equal(r.status, 201, text);
    return JSON.parse(text);
  };
  const llama = await post({ name: 'llama-pretrain', gpus: [FIXTURE_UUID], from: now - 1_200_000, to: now - 60_000, precision: 'bf16', achieved_flops_per_s: 4.0e14 });
  const fp4 = await post({ name: 'fp4-experiment', gpus: [FIXTURE_UUID], from: now - 1_200_000, to: now - 60_000, precision: 'fp4', achieved_flops_per_s: 1.0e14 });
  assert.ok(llama.mfu > 0.3 && llama.mfu < 0.5, `H200 bf16 MFU ${llama.mfu}`);
  assert.equal(fp4.mfu, null, 'the H200 has no FP4 figure');
  await page.goto(URL + '/reports');
  const table = page.locator('table.job-table');
  await table.waitFor({ timeout: T });
  const mfuOf = (name) => table.locator('tr', { hasText: name }).locator('td.mfu');
  assert.equal(await mfuOf('llama-pretrain').textContent(), `${(llama.mfu * 100).toFixed(0)}%`);
  assert.match(await table.locator('tr', { hasText: 'llama-pretrain' }).textContent(), /400\.0 TFLOP\/s/);
  assert.equal(await mfuOf('fp4-experiment').textContent(), 'n/a');
  await shot(page, '16-jobs');
});

test('API keys: the server refuses a key without scopes; a new key is shown once, works, and is revoked', async () => {
  await page.goto(URL + '/settings');
  await page.locator('#key-name').waitFor({ timeout: T });
  await page.fill('#key-name', 'ci-ingest');
  await page.locator('form[aria-label="New API key"] input[value="read"]').uncheck();
  await expecting(['/api/v1/api-keys'], async () => {
    await page.getByRole('button', { name: 'Create key' }).click();
    await waitForText(page.locator('.field-error[data-field="scopes"]'), /at least one of ingest, read, admin/);
  });
  await page.locator('form[aria-label="New API key"] input[value="ingest"]').check();
  await page.locator('form[aria-label="New API key"] input[value="read"]').check();
  await page.getByRole('button', { name: 'Create key' }).click();
  const secret = (await waitForText(page.locator('[data-testid="new-key"]'), /^flk_/)).trim();
  assert.equal(await page.locator('.field-error[data-field="scopes"]').count(), 0);
  const who = await fetch(URL + '/api/v1/auth/me', { headers: { Authorization: `Bearer ${secret}` } });
  assert.equal(who.status, 200);
  assert.deepEqual((await who.json()).scopes.sort(), ['ingest', 'read']);
  const row = page.locator('table.key-table tr', { hasText: 'ci-ingest' });
  await row.waitFor({ timeout: T });
  assert.equal(await row.locator('code').textContent(), `${secret.slice(0, 12)}…`, 'only the prefix is listed');
  await shot(page, '19-api-keys');
  await row.getByRole('button', { name: 'Revoke key ci-ingest' }).click();
  await row.getByRole('button', { name: 'Confirm revoke' }).click();
  await waitForText(page.locator('table.key-table tr', { hasText: 'ci-ingest' }), /revoked/);
  const after = await fetch(URL + '/api/v1/auth/me', { headers: { Authorization: `Bearer ${secret}` } });
  assert.equal(after.status, 401);
});

test('users: the server refuses a short password at the field; a user is added, changes role, is disabled and deleted', async () => {
  const form = page.locator('form[aria-label="Add a user"]');
  await page.fill('#user-email', 'mia@example.com');
  await page.fill('#user-name', 'Mia Member');
  await page.fill('#user-password', 'short');
  await expecting(['/api/v1/users'], async () => {
    await form.getByRole('button', { name: 'Add user' }).click();
    await waitForText(page.locator('.field-error[data-field="password"]'), /8/);
    assert.equal(await page.locator('#user-password').getAttribute('aria-invalid'), 'true');
  });
  await page.fill('#user-password', 'a-long-enough-password');
  await form.getByRole('button', { name: 'Add user' }).click();
  await waitForText(section(page, 'users-title').locator('.banner-ok'), /User mia@example.com added as member/);
  const row = page.locator('table.user-table tr', { hasText: 'mia@example.com' });
  await row.waitFor({ timeout: T });
  await row.getByLabel('Role of mia@example.com').selectOption('viewer');
  await waitForText(section(page, 'users-title').locator('.banner-ok'), /mia@example.com is now viewer/);
  await row.getByRole('button', { name: 'Disable' }).click();
  await waitForText(page.locator('table.user-table tr', { hasText: 'mia@example.com' }), /disabled/);
  const users = await (await api('/api/v1/users')).json();
  const mia = users.find((u) => u.email === 'mia@example.com');
  assert.deepEqual([mia.role, mia.disabled, mia.name], ['viewer', true, 'Mia Member']);
  await shot(page, '20-users');
  await page.locator('table.user-table tr', { hasText: 'mia@example.com' }).getByRole('button', { name: 'Delete' }).click();
  await page.locator('table.user-table tr', { hasText: 'mia@example.com' }).getByRole('button', { name: 'Confirm delete' }).click();
  await waitForText(section(page, 'users-title').locator('.banner-ok'), /User mia@example.com deleted/);
  assert.equal((await (await api('/api/v1/users')).json()).some((u) => u.email === 'mia@example.com'), false);
});

test('teams: the server refuses a blank name at the field; a team is created, a host assigned to it, then deleted', async () => {
  await page.locator('#team-name').waitFor({ timeout: T });
  await page.fill('#team-name', '   ');
  await expecting(['/api/v1/teams'], async () => {
    await page.getByRole('button', { name: 'Create team' }).click();
    await waitForText(page.locator('.field-error[data-field="name"]', { hasText: 'Team name' }), /1–100 characters/);
  });
  await page.fill('#team-name', 'ml-research');
  await page.getByRole('button', { name: 'Create team' }).click();
  await waitForText(section(page, 'teams-title').locator('.banner-ok'), /Team “ml-research” created/);
  const team = (await (await api('/api/v1/teams')).json()).find((t) => t.name === 'ml-research');
  assert.ok(team);
  await page.getByLabel('Team of host sim-node-00').selectOption({ label: 'ml-research' });
  await waitForText(section(page, 'teams-title').locator('.banner-ok'), /Host sim-node-00 assigned/);
  await waitForText(page.locator('table.host-table tr[data-host="sim-node-00"]'), /ml-research \(from host\)/);
  const host = (await (await api('/api/v1/hosts')).json()).find((h) => h.host === 'sim-node-00');
  assert.equal(host.assigned_team_id, team.id);
  await shot(page, '21-teams');
  await page.getByLabel('Team of host sim-node-00').selectOption({ label: '— none —' });
  await waitForText(section(page, 'teams-title').locator('.banner-ok'), /Host sim-node-00 no longer assigned/);
  await page.getByRole('button', { name: 'Delete team ml-research' }).click();
  await page.locator('li', { hasText: 'ml-research' }).getByRole('button', { name: 'Confirm delete' }).click();
  await waitForText(section(page, 'teams-title').locator('.banner-ok'), /Team “ml-research” deleted/);
  assert.equal((await (await api('/api/v1/teams')).json()).some((t) => t.name === 'ml-research'), false);
});

test('password: a wrong current password is refused at its field; a change that revokes the user\'s keys ends them', async () => {
  const who = { email: 'pat@example.com', password: 'pat-first-password-1' };
  const made = await api('/api/v1/users', { method: 'POST', body: JSON.stringify({ ...who, name: 'Pat', role: 'member' }) });
  assert.equal(made.status, 201);
  // Pat makes a key of their own, in a session of their own (cookie + CSRF token).
  const login = await fetch(URL + '/api/v1/auth/login', {
    method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(who),
  });
  assert.equal(login.status, 200);
  const { csrf_token } = await login.json();
  const cookie = login.headers.get('set-cookie').split(';')[0];
  const keyAnswer = await fetch(URL + '/api/v1/api-keys', {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', Cookie: cookie, 'X-CSRF-Token': csrf_token },
    body: JSON.stringify({ name: 'pat-laptop', scopes: ['read'] }),
  });
  assert.equal(keyAnswer.status, 201);
  const patKey = (await keyAnswer.json()).key;
  const asPat = () => fetch(URL + '/api/v1/gpus', { headers: { Authorization: `Bearer ${patKey}` } });
  assert.equal((await asPat()).status, 200);

  const pctx = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  const p = await pctx.newPage();
  watch(p);
  await logIn(p, who.email, who.password);
  await p.goto(URL + '/settings');
  const form = p.locator('form[aria-label="Change your password"]');
  await form.waitFor({ timeout: T });
  await p.fill('#current-password', 'not-my-password');
  await p.fill('#new-password', 'pat-second-password-2');
  await expecting(['/api/v1/auth/password'], async () => {
    await form.getByRole('button', { name: 'Change password' }).click();
    await waitForText(p.locator('.field-error[data-field="current_password"]'), /wrong password/);
    assert.equal(await p.locator('#current-password').getAttribute('aria-invalid'), 'true');
  });
  assert.equal((await asPat()).status, 200, 'a refused change revokes nothing');

  await p.fill('#current-password', who.password);
  await p.check('#revoke-keys');
  await form.getByRole('button', { name: 'Change password' }).click();
  await waitForText(section(p, 'password-title').locator('.banner-ok'), /API keys were revoked/);
  await shot(p, '22-password');
  assert.equal((await asPat()).status, 401, 'the key Pat made is revoked');
  const again = await fetch(URL + '/api/v1/auth/login', {
    method: 'POST', headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ email: who.email, password: 'pat-second-password-2' }),
  });
  assert.equal(again.status, 200, 'the new password logs in');
  await pctx.close();
});

test('viewer: sees the user and role, the data, and no admin controls', async () => {
  const vctx = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  const v = await vctx.newPage();
  watch(v);
  await logIn(v, VIEWER.email, VIEWER.password);
  await waitForText(v.locator('[data-testid="whoami"]'), /Vera Viewer\s*viewer/);

  await v.goto(URL + '/alerts');
  await v.locator('table.rule-table').waitFor({ timeout: T });
  assert.equal(await v.getByRole('button', { name: 'New rule' }).count(), 0);
  assert.equal(await v.locator('table.rule-table').getByRole('button').count(), 0, 'no edit/disable/delete');
  assert.equal(await v.locator('#channels-title').count(), 0, 'channel URLs are secrets');
  assert.equal(await v.getByRole('button', { name: 'Add silence' }).count(), 0);
  assert.equal(await v.locator('table.alert-table select').count(), 0, 'no silence controls');
  await shot(v, '17-viewer-alerts');

  await v.goto(URL + '/settings');
  const input = v.locator('#th-window_s');
  await input.waitFor({ timeout: T });
  assert.equal(await input.isDisabled(), true);
  assert.equal(await v.getByRole('button', { name: 'Save thresholds' }).count(), 0);
  assert.equal(await v.getByRole('button', { name: 'Set price' }).count(), 0);
  assert.match(await v.locator('section', { has: v.locator('#thresholds-title') }).textContent(), /Only an admin can change them/);
  assert.equal(await v.locator('[data-testid="role"]').textContent(), 'viewer');
  assert.equal(await v.locator('#users-title').count(), 0, 'no user management');
  assert.equal(await v.locator('#keys-title').count(), 0, 'viewers cannot make keys');
  assert.equal(await v.getByRole('button', { name: 'Create team' }).count(), 0);
  assert.equal(await v.locator('table.host-table select').count(), 0, 'no team assignment');
  await shot(v, '18-viewer-settings');

  // Logging out ends the session on the server: the same cookie is no longer accepted.
  const cookie = (await vctx.cookies()).find((c) => /fleetlens_session$/.test(c.name));
  await v.getByRole('button', { name: 'Log out' }).first().click();
  await v.waitForURL(/\/login/, { timeout: T });
  const r = await fetch(URL + '/api/v1/auth/me', { headers: { Cookie: `${cookie.name}=${cookie.value}` } });
  assert.equal(r.status, 401);
  await vctx.close();
});

test('login: after too many wrong passwords the server rate limit is shown', async () => {
  const lctx = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  const l = await lctx.newPage();
  watch(l);
  await expecting(['/api/v1/auth/login'], async () => {
    await l.goto(URL + '/login');
    await l.locator('#email').waitFor({ timeout: T });
    let msg = '';
    for (let i = 0; i < 8 && !/Too many attempts/.test(msg); i++) {
      await l.fill('#email', 'nobody@example.com');
      await l.fill('#password', `wrong-password-${i}`);
      const [resp] = await Promise.all([
        l.waitForResponse((r) => r.url().endsWith('/api/v1/auth/login'), { timeout: T }),
        l.click('form[aria-label="Log in"] button[type="submit"]'),
      ]);
      await l.waitForFunction(() => !document.querySelector('form[aria-label="Log in"] button[type="submit"]').disabled, null, { timeout: T });
      if (resp.status() === 429) assert.ok(resp.headers()['retry-after'], 'Retry-After');
      msg = (await l.locator('[role="alert"]').first().textContent()) || '';
      assert.match(msg, /Wrong email or password|Too many attempts/);
    }
    assert.match(msg, /^Too many attempts/);
    await l.screenshot({ path: path.join(SHOTS, '22-login-rate-limited.png') });
  });
  await lctx.close();
});

test('no console errors', () => {
  assert.deepEqual(consoleErrors, []);
});
