// Live-push budget (issue 23), not a test: how long after a state change at the agent an open
// page shows it, the agent's flush included. scripts/bench-dashboard.sh starts, next to the
// simulated fleet, an agent replaying a trace at 1x whose GPUs are idle in even minutes and busy
// in odd ones (the first sample of a new state is read by the agent at the minute boundary).
// Two pages stay open (the GPU's detail page and the GPUs page searched down to its card); a
// MutationObserver in each stamps every change of a state badge's `data-state`. A flip's latency
// is the stamp of the first badge in the new state minus the boundary.
//   FLEETLENS_URL, FLEETLENS_ADMIN_EMAIL, FLEETLENS_ADMIN_PASSWORD, FLEETLENS_LIVE_UUID,
//   FLEETLENS_LIVE_FLIPS (default 4)
import assert from 'node:assert/strict';
import { EMAIL, PASSWORD, URL, launchChromium, logIn } from './helpers.mjs';

const UUID = process.env.FLEETLENS_LIVE_UUID;
const FLIPS = Number(process.env.FLEETLENS_LIVE_FLIPS || 4);
assert.ok(URL && EMAIL && PASSWORD && UUID, 'run scripts/bench-dashboard.sh');

const browser = await launchChromium();
const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
const errors = [];
const login = await context.newPage();
await logIn(login);
await login.close();

/** Opens `path`, waits for a state badge, and stamps every later change of its state. */
async function watch(path, badge) {
  const p = await context.newPage();
  p.on('pageerror', (e) => errors.push(e.message));
  await p.goto(URL + path);
  await p.waitForFunction((sel) => document.querySelector(sel)?.dataset.state, badge, { timeout: 60_000 });
  await p.evaluate((sel) => {
    window.__flips = [];
    let last = document.querySelector(sel)?.dataset.state;
    // Badges may be redrawn rather than changed in place: watch the whole document.
    new MutationObserver(() => {
      const now = document.querySelector(sel)?.dataset.state;
      if (now && now !== last) {
        window.__flips.push({ t: Date.now(), state: now });
        last = now;
      }
    }).observe(document.body, { subtree: true, childList: true, attributes: true, attributeFilter: ['data-state'] });
  }, badge);
  return p;
}

const pages = {
  gpu_detail: await watch(`/gpus/${UUID}`, 'main [data-state]'),
  gpus_list: await watch(`/gpus?q=${UUID}`, '.gpu-card [data-state]'),
};
const first = Math.ceil(Date.now() / 60_000) * 60_000;
const boundaries = Array.from({ length: FLIPS }, (_, i) => first + i * 60_000);
// Wait past the last boundary, with time for the slowest flip to show.
await new Promise((r) => setTimeout(r, boundaries[FLIPS - 1] + 15_000 - Date.now()));

const out = { uuid: UUID, flips: FLIPS, latency_s: {}, missed: {}, errors };
for (const [name, p] of Object.entries(pages)) {
  const flips = await p.evaluate(() => window.__flips);
  const lat = [];
  const missed = [];
  for (const b of boundaries) {
    const wantIdle = (b / 60_000) % 2 === 0;
    const hit = flips.find((f) => f.t >= b && f.t < b + 60_000 && (f.state === 'idle') === wantIdle);
    if (hit) lat.push((hit.t - b) / 1000);
    else missed.push(new Date(b).toISOString());
  }
  const s = [...lat].sort((a, b) => a - b);
  out.latency_s[name] = { each: lat, p50: s[Math.floor(s.length / 2)], max: s[s.length - 1] };
  out.missed[name] = missed;
}
await browser.close();
console.log(JSON.stringify(out));
assert.deepEqual(errors, []);
for (const name of Object.keys(pages)) assert.deepEqual(out.missed[name], [], `${name}: every flip shown`);
