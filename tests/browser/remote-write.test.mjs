// GPUs that reach Fleetlens only through Prometheus remote write (issue 25) in a real Chromium:
// two GPUs of a host that runs no agent are remote-written as dcgm-exporter series
// (`POST /api/v1/write`, snappy-compressed protobuf, an `ingest` key), each scrape split over two
// requests as Prometheus does at `max_samples_per_send`; the GPUs page must show both with the
// state the server gives them and the pod that owns them (dcgm-exporter's pod labels).
// Started by scripts/browser-test.sh: FLEETLENS_URL, FLEETLENS_TOKEN, FLEETLENS_ADMIN_EMAIL,
// FLEETLENS_ADMIN_PASSWORD, SCREENSHOT_DIR.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { EMAIL, PASSWORD, T, TOKEN, URL, api, launchChromium, logIn, shot } from './helpers.mjs';

assert.ok(URL && TOKEN && EMAIL && PASSWORD, 'run scripts/browser-test.sh');

const HOST = 'rw-browser-node';
const BUSY = 'GPU-rw-browser-busy';
const IDLE = 'GPU-rw-browser-idle';
/** Per GPU: its index, pod and the series values of every scrape (ratios 0-1 as dcgm-exporter sends). */
const GPUS = [
  { uuid: BUSY, gpu: '0', pod: 'llm-train-0', namespace: 'research',
    first: { DCGM_FI_DEV_GPU_UTIL: 100, DCGM_FI_DEV_FB_USED: 70_000, DCGM_FI_DEV_FB_FREE: 11_000, DCGM_FI_DEV_POWER_USAGE: 610 },
    rest: { DCGM_FI_PROF_SM_ACTIVE: 0.93, DCGM_FI_PROF_SM_OCCUPANCY: 0.45, DCGM_FI_PROF_PIPE_TENSOR_ACTIVE: 0.61,
      DCGM_FI_PROF_DRAM_ACTIVE: 0.3, DCGM_FI_DEV_GPU_TEMP: 66 } },
  { uuid: IDLE, gpu: '1', pod: 'notebook-7', namespace: 'analytics',
    first: { DCGM_FI_DEV_GPU_UTIL: 0, DCGM_FI_DEV_FB_USED: 20_000, DCGM_FI_DEV_FB_FREE: 61_000, DCGM_FI_DEV_POWER_USAGE: 72 },
    rest: { DCGM_FI_PROF_SM_ACTIVE: 0, DCGM_FI_PROF_SM_OCCUPANCY: 0, DCGM_FI_PROF_PIPE_TENSOR_ACTIVE: 0,
      DCGM_FI_PROF_DRAM_ACTIVE: 0, DCGM_FI_DEV_GPU_TEMP: 35 } },
];

// The request body: protobuf `prometheus.WriteRequest` written field by field (the wire format
// is small: varints, length-delimited fields, fixed 64-bit doubles), then a snappy block of
// literal elements only — a valid block that the server's snappy decoder (the `snap` crate)
// inflates like any other. The browser tests have no protobuf or snappy package of their own.
function varint(n) {
  const out = [];
  let v = BigInt(n);
  do {
    let byte = Number(v & 0x7fn);
    v >>= 7n;
    if (v > 0n) byte |= 0x80;
    out.push(byte);
  } while (v > 0n);
  return out;
}
const field = (tag, bytes) => [tag, ...varint(bytes.length), ...bytes];
const text = (s) => [...Buffer.from(s, 'utf8')];
function double(v) {
  const b = Buffer.alloc(8);
  b.writeDoubleLE(v);
  return [...b];
}
function timeSeries(name, labels, points) {
  const label = (k, v) => field(0x0a, [...field(0x0a, text(k)), ...field(0x12, text(v))]);
  const sample = ([ts, v]) => field(0x12, [0x09, ...double(v), 0x10, ...varint(ts)]);
  return field(0x0a, [
    ...label('__name__', name),
    ...Object.entries(labels).flatMap(([k, v]) => label(k, v)),
    ...points.flatMap(sample),
  ]);
}
function snappyBlock(bytes) {
  const out = [...varint(bytes.length)];
  for (let at = 0; at < bytes.length; at += 65_536) {
    const chunk = bytes.slice(at, at + 65_536);
    // Literal, length - 1 in the next two bytes (tag 61 << 2).
    out.push(61 << 2, (chunk.length - 1) & 0xff, (chunk.length - 1) >> 8, ...chunk);
  }
  return Buffer.from(out);
}
function writeRequest(part, times) {
  return snappyBlock(GPUS.flatMap((g) => {
    const labels = { UUID: g.uuid, gpu: g.gpu, Hostname: HOST, modelName: 'NVIDIA H100 80GB HBM3',
      pod: g.pod, namespace: g.namespace, container: 'main' };
    return Object.entries(g[part]).flatMap(([name, v]) => timeSeries(name, labels, times.map((t) => [t, v])));
  }));
}

let browser;
let page;
const pageErrors = [];

before(async () => {
  const created = await api('/api/v1/api-keys', {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ name: 'prometheus-browser-test', scopes: ['ingest'] }),
  });
  assert.equal(created.status, 201, await created.clone().text());
  const key = (await created.json()).key;
  // A minute of 10-s scrapes, each split: the first request has utilisation, memory and power,
  // the second the profiling fields and temperature of the same timestamps.
  const now = Date.now();
  const times = Array.from({ length: 7 }, (_, i) => now - 60_000 + i * 10_000);
  for (const part of ['first', 'rest']) {
    const res = await fetch(URL + '/api/v1/write', {
      method: 'POST',
      headers: { Authorization: `Bearer ${key}`, 'Content-Type': 'application/x-protobuf',
        'Content-Encoding': 'snappy', 'X-Prometheus-Remote-Write-Version': '0.1.0' },
      body: writeRequest(part, times),
    });
    const body = await res.json();
    assert.equal(res.status, 200, JSON.stringify(body));
    const want = part === 'first' ? { inserted: 14, merged: 0 } : { inserted: 0, merged: 14 };
    assert.deepEqual({ inserted: body.inserted, merged: body.merged }, want, JSON.stringify(body));
  }
  browser = await launchChromium();
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  page = await context.newPage();
  page.on('pageerror', (err) => pageErrors.push(err.message));
  await logIn(page);
});

after(async () => {
  await browser?.close();
});

test('GPUs page: remote-written GPUs appear with their state and owning pod', async () => {
  const listed = await (await api('/api/v1/gpus')).json();
  const server = Object.fromEntries(listed.gpus.filter((g) => g.host === HOST).map((g) => [g.uuid, g]));
  assert.deepEqual(Object.keys(server).sort(), [BUSY, IDLE]);
  assert.equal(server[BUSY].latest.sm_active_pct, 93, 'the second request filled the sample');
  assert.ok(server[BUSY].state && server[IDLE].state, `classified: ${JSON.stringify(server)}`);
  assert.notEqual(server[BUSY].state, server[IDLE].state, 'a busy and an idle GPU');

  await page.goto(URL + '/gpus');
  await page.waitForFunction((uuids) => uuids.every((u) => {
    const card = [...document.querySelectorAll('.gpu-card')].find((c) => c.dataset.uuid === u);
    return card?.querySelector('.gpu-owner') && card.querySelector('[data-state]')?.dataset.state;
  }), [BUSY, IDLE], { timeout: T });
  const cards = await page.evaluate((uuids) => Object.fromEntries(uuids.map((u) => {
    const card = [...document.querySelectorAll('.gpu-card')].find((c) => c.dataset.uuid === u);
    return [u, {
      place: card.querySelector('.gpu-place')?.textContent,
      owner: card.querySelector('.gpu-owner')?.textContent,
      state: card.querySelector('[data-state]')?.dataset.state,
    }];
  })), [BUSY, IDLE]);
  await shot(page, '40-remote-write-gpus');
  for (const g of GPUS) {
    const card = cards[g.uuid];
    assert.ok(card.place.includes(HOST), `the Hostname label: ${card.place}`);
    assert.ok(card.owner.includes(`${g.namespace}/${g.pod}`), `the pod labels as owner: ${card.owner}`);
    assert.equal(card.state, server[g.uuid].state, `${g.uuid}: the server's state`);
  }
  assert.deepEqual(pageErrors, []);
});
