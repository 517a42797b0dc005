// Hostile names from agents in a real Chromium (issue 19): a host, GPU uuid, GPU name and process
// owner made of markup (`<img onerror>`, `<script>`, `<svg onload>`), an attribute break-out, bidi
// controls, a spreadsheet formula and a 256-character unbroken name are ingested over the API;
// the dashboard must show each as text — no element is created from it, no script runs
// (`window.__pwned` stays undefined) — and the cards keep their layout. Started by
// scripts/browser-test.sh after dashboard.test.mjs (which counts the GPUs before these arrive):
// FLEETLENS_URL, FLEETLENS_TOKEN, FLEETLENS_ADMIN_EMAIL, FLEETLENS_ADMIN_PASSWORD, SCREENSHOT_DIR.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import {
  EMAIL, PASSWORD, T, TOKEN, URL, api, launchChromium, logIn, shot, watchConsole,
} from './helpers.mjs';

assert.ok(URL && TOKEN && EMAIL && PASSWORD, 'run scripts/browser-test.sh');

const PWN_HOST = '<img src=x onerror="window.__pwned=1">';
const PWN_UUID = 'GPU-"><img src=x onerror=window.__pwned=2>';
const PWN_NAME = '<script>window.__pwned=3</script>';
const PWN_OWNER = '<svg onload=window.__pwned=4>';
/** The detail page is reached by a plain uuid; its host, name and owner are the hostile ones. */
const DETAIL_UUID = 'GPU-hostile-detail';
const BIDI_HOST = 'gpu\u202E10-edon\u2066x\u2069';
const BIDI_UUID = 'GPU-bidi-\u202Eevil';
const FORMULA_NAME = '=HYPERLINK("http://evil","x")';
/** 256 bytes, the longest name ingest takes, with no place to break a line. */
const LONG_NAME = '@' + 'W'.repeat(255);
const LONG_UUID = 'GPU-hostile-long-name';
const HOSTILE_UUIDS = [PWN_UUID, DETAIL_UUID, BIDI_UUID, LONG_UUID];
/** A GPU the kubelet gave a JobSet's pod (issue 28): no process, the pod's Kubernetes metadata. */
const K8S_UUID = 'GPU-k8s-held';
const K8S_POD = 'llm-pretrain-workers-0-0-x8k2p';

let browser;
let context;
let page;
const consoleErrors = [];
// `/api/v1/stream`: the dashboard's probe for the live stream (`?once=true`); a server without
// it answers 404 and the dashboard polls instead.
const expectedFailures = new Set(['/api/v1/auth/me', '/api/v1/stream']);
const watch = (p) => watchConsole(p, consoleErrors, expectedFailures);

function samples(uuid, name, owner) {
  const now = Date.now();
  return [0, 1, 2].map((i) => ({
    ts_ms: now - 3000 + i * 1000,
    uuid,
    gpu_index: 0,
    name,
    gpu_util_pct: 90,
    sm_active_pct: 30,
    mem_used_bytes: 8 * 2 ** 30,
    mem_total_bytes: 80 * 2 ** 30,
    power_w: 300,
    processes: [{ pid: 4242, used_bytes: 8 * 2 ** 30, user: owner, owner: { user: owner } }],
  }));
}

async function ingest(host, gpus) {
  const body = { host, samples: gpus.flatMap(([uuid, name, owner]) => samples(uuid, name, owner)) };
  const res = await api('/api/v1/ingest', { method: 'POST', body: JSON.stringify(body) });
  assert.equal(res.status, 200, `ingest ${JSON.stringify(host)}: ${await res.text()}`);
}

/** What a page shows of the GPU cards of the hostile uuids, read from the DOM by `dataset`. */
async function hostileCards(p) {
  return p.evaluate((uuids) => {
    const cards = [...document.querySelectorAll('.gpu-card')].filter((c) => uuids.includes(c.dataset.uuid));
    return cards.map((c) => {
      const name = c.querySelector('.gpu-name');
      return {
        uuid: c.dataset.uuid,
        name: name?.textContent,
        place: c.querySelector('.gpu-place')?.textContent,
        owner: c.querySelector('.gpu-owner')?.textContent,
        nameFits: name.getBoundingClientRect().right <= c.getBoundingClientRect().right + 0.5,
        cardOverflow: c.scrollWidth - c.clientWidth,
        width: c.getBoundingClientRect().width,
      };
    });
  }, HOSTILE_UUIDS);
}

/** Elements or effects that only the hostile markup could have made. */
async function injected(p) {
  return p.evaluate(() => ({
    pwned: typeof window.__pwned,
    imgs: document.querySelectorAll('img[src="x"]').length,
    svgOnload: document.querySelectorAll('svg[onload]').length,
    scripts: [...document.scripts].filter((s) => s.textContent.includes('__pwned')).length,
  }));
}

const CLEAN = { pwned: 'undefined', imgs: 0, svgOnload: 0, scripts: 0 };

/** Three idle samples of a GPU allocated to a JobSet's pod, its owner label hostile. */
async function ingestKubernetesHeld() {
  const now = Date.now();
  const allocation = {
    namespace: 'ml', pod: K8S_POD, container: 'trainer', resource: 'nvidia.com/gpu', device_id: K8S_UUID,
    team: 'research', pod_user: PWN_OWNER, job_kind: 'JobSet', job_name: 'llm-pretrain',
  };
  const body = {
    host: 'k8s-node-1',
    samples: [0, 1, 2].map((i) => ({
      ts_ms: now - 3000 + i * 1000, uuid: K8S_UUID, gpu_index: 0, name: 'NVIDIA H100 80GB HBM3',
      gpu_util_pct: 0, sm_active_pct: 0, mem_used_bytes: 0, mem_total_bytes: 80 * 2 ** 30, power_w: 70,
      processes: [], allocations: [allocation],
    })),
  };
  const res = await api('/api/v1/ingest', { method: 'POST', body: JSON.stringify(body) });
  assert.equal(res.status, 200, `ingest k8s-node-1: ${await res.text()}`);
}

before(async () => {
  await ingestKubernetesHeld();
  await ingest(PWN_HOST, [
    [PWN_UUID, PWN_NAME, PWN_OWNER],
    [DETAIL_UUID, PWN_NAME, PWN_OWNER],
  ]);
  await ingest(BIDI_HOST, [
    [BIDI_UUID, FORMULA_NAME, FORMULA_NAME],
    [LONG_UUID, LONG_NAME, LONG_NAME],
  ]);
  browser = await launchChromium();
  context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  page = await context.newPage();
  watch(page);
  await logIn(page);
});

after(async () => {
  await browser?.close();
});

test('GPUs page: hostile names are shown as text on intact cards, and no script runs', async () => {
  await page.goto(URL + '/gpus');
  await page.waitForFunction((uuids) => {
    const shown = new Set([...document.querySelectorAll('.gpu-card')].map((c) => c.dataset.uuid));
    return uuids.every((u) => shown.has(u));
  }, HOSTILE_UUIDS, { timeout: T });
  // The owner line comes with the card's newest sample: wait for the hostile one.
  await page.waitForFunction((uuid) => {
    const card = [...document.querySelectorAll('.gpu-card')].find((c) => c.dataset.uuid === uuid);
    return card?.querySelector('.gpu-owner');
  }, PWN_UUID, { timeout: T });
  await page.waitForTimeout(500);
  await shot(page, '30-hostile-gpus');

  const cards = Object.fromEntries((await hostileCards(page)).map((c) => [c.uuid, c]));
  assert.equal(cards[PWN_UUID].name, PWN_NAME, 'the markup is the name, as text');
  assert.ok(cards[PWN_UUID].place.includes(PWN_HOST), `host as text: ${cards[PWN_UUID].place}`);
  assert.ok(cards[PWN_UUID].owner.includes(PWN_OWNER), `owner as text: ${cards[PWN_UUID].owner}`);
  assert.equal(cards[BIDI_UUID].name, FORMULA_NAME);
  assert.ok(cards[BIDI_UUID].place.includes(BIDI_HOST), 'bidi controls kept, not stripped or interpreted as markup');
  assert.equal(cards[LONG_UUID].name, LONG_NAME);
  for (const c of Object.values(cards)) {
    assert.ok(c.nameFits, `${JSON.stringify(c.uuid)}: the name stays inside its card`);
    assert.ok(c.cardOverflow <= 0, `${JSON.stringify(c.uuid)}: nothing spills out of the card (${c.cardOverflow}px)`);
    assert.ok(c.width > 200 && c.width < 700, `${JSON.stringify(c.uuid)}: a normal card width (${c.width}px)`);
  }
  assert.deepEqual(await injected(page), CLEAN);

  // Phone width: the 256-character name wraps instead of widening the page.
  const phone = await context.newPage();
  watch(phone);
  await phone.setViewportSize({ width: 390, height: 844 });
  await phone.goto(URL + '/gpus');
  await phone.waitForFunction((uuid) => [...document.querySelectorAll('.gpu-card')].some((c) => c.dataset.uuid === uuid),
    LONG_UUID, { timeout: T });
  const overflow = await phone.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  assert.ok(overflow <= 0, `no horizontal scroll (${overflow}px)`);
  assert.deepEqual(await injected(phone), CLEAN);
  await phone.close();
});

test('GPU detail: hostile host, name and process owner as text, and no script runs', async () => {
  await page.goto(`${URL}/gpus/${DETAIL_UUID}`);
  const procs = page.locator('section', { has: page.locator('#proc-title') });
  await procs.locator('table.proc-table tbody tr').first().waitFor({ timeout: T });
  assert.equal((await procs.locator('td[data-col="user"]').first().textContent()).trim(), PWN_OWNER);
  const text = await page.locator('main').textContent();
  assert.ok(text.includes(PWN_NAME), 'the GPU name shown as text');
  assert.ok(text.includes(PWN_HOST), 'the host shown as text');
  await page.waitForTimeout(500);
  await shot(page, '31-hostile-gpu-detail');
  assert.deepEqual(await injected(page), CLEAN);
});

test('GPU detail: the kubelet\'s pod with its team, owner and job (Kubernetes metadata)', async () => {
  await page.goto(`${URL}/gpus/${K8S_UUID}`);
  const pods = page.locator('section', { has: page.locator('#alloc-title') });
  await pods.locator('table.alloc-table tbody tr').first().waitFor({ timeout: T });
  const cell = async (col) => (await pods.locator(`td[data-col="${col}"]`).first().textContent()).trim();
  assert.equal(await cell('pod'), `ml/${K8S_POD}`);
  assert.equal(await cell('container'), 'trainer');
  assert.equal(await cell('resource'), 'nvidia.com/gpu');
  assert.equal(await cell('team'), 'research');
  assert.equal(await cell('owner'), PWN_OWNER, 'a hostile owner label shown as text');
  assert.equal(await cell('job'), 'JobSet ml/llm-pretrain');
  const procs = page.locator('section', { has: page.locator('#proc-title') });
  assert.match(await procs.textContent(), /No process on this GPU/);
  await shot(page, '32-kubernetes-pod-gpu-detail');
  assert.deepEqual(await injected(page), CLEAN);

  // Reports: the holder and the namespace team are groupings; the pod's team has a row.
  await page.goto(`${URL}/reports`);
  const select = page.locator('section', { has: page.locator('#billing-title') }).locator('select');
  await select.waitFor({ timeout: T });
  const values = await select.locator('option').evaluateAll((os) => os.map((o) => o.value));
  for (const v of ['holder', 'namespace_team', 'job']) assert.ok(values.includes(v), `group by ${v}: ${values}`);
  await select.selectOption('namespace_team');
  await page.locator('table.data tbody tr', { hasText: 'research' }).first().waitFor({ timeout: T });
  assert.deepEqual(await injected(page), CLEAN);
});

test('fleet and settings pages list hostile hosts as text, and no script runs', async () => {
  for (const p of ['/', '/settings']) {
    await page.goto(URL + p);
    await page.waitForLoadState('networkidle', { timeout: T });
    await page.waitForTimeout(500);
    assert.deepEqual(await injected(page), CLEAN, p);
  }
});

test('no console errors', () => {
  assert.deepEqual(consoleErrors, []);
});
