// Dashboard time budget (issue 23), not a test: with a fleet of FLEETLENS_BENCH_GPUS GPUs, how
// long from navigating to the GPUs page until it is usable (the screen is filled with cards, the
// filters are there and the page answers input), and until every card is drawn, in headless
// Chromium: in-app navigation, a cold-cache load on loopback, and a cold-cache load on a link
// throttled by Chromium's network emulation (20 Mbit/s, 40 ms RTT). The page builds the first
// screen of cards at once and the rest a step per animation frame.
// Started by scripts/bench-dashboard.sh, which provides the server and the fleet:
//   FLEETLENS_URL, FLEETLENS_ADMIN_EMAIL, FLEETLENS_ADMIN_PASSWORD, FLEETLENS_BENCH_GPUS
import assert from 'node:assert/strict';
import { chromium } from 'playwright-core';

const URL = process.env.FLEETLENS_URL;
const EMAIL = process.env.FLEETLENS_ADMIN_EMAIL;
const PASSWORD = process.env.FLEETLENS_ADMIN_PASSWORD;
const GPUS = Number(process.env.FLEETLENS_BENCH_GPUS || 1000);
const RUNS = Number(process.env.FLEETLENS_BENCH_RUNS || 7);
assert.ok(URL && EMAIL && PASSWORD, 'run scripts/bench-dashboard.sh');

const browser = await chromium.launch({
  executablePath: '/usr/bin/chromium',
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking',
    '--disable-component-update', '--disable-sync'],
});
const VIEWPORT = { width: 1280, height: 900 };
const context = await browser.newContext({ viewport: VIEWPORT });
const page = await context.newPage();
const errors = [];
page.on('pageerror', (e) => errors.push(e.message));

await page.goto(URL + '/login');
await page.fill('#email', EMAIL);
await page.fill('#password', PASSWORD);
await page.press('#password', 'Enter');
await page.waitForURL((u) => !u.pathname.startsWith('/login'), { timeout: 30_000 });

// The window is filled: every card is drawn, or the last one drawn reaches below the window.
const screenFull = (p, n) => p.waitForFunction((n) => {
  const cards = document.querySelectorAll('.gpu-card');
  return cards.length >= n || (cards.length > 0 && cards[cards.length - 1].getBoundingClientRect().top > innerHeight);
}, n, { timeout: 60_000, polling: 'raf' });
const allCards = (p, n) => p.waitForFunction((n) => document.querySelectorAll('.gpu-card').length >= n, n,
  { timeout: 60_000, polling: 'raf' });
// The main thread is free to answer input (a frame, then a task).
const answers = (p) => p.evaluate(() => new Promise((r) => requestAnimationFrame(() => setTimeout(r, 0))));

/** Milliseconds from the start of `go` until the page is usable, and until every card is drawn. */
async function timed(p, go) {
  const t0 = Date.now();
  await go();
  await screenFull(p, GPUS);
  // Usable: the filters are there and the page answers input.
  await p.locator('form[aria-label="Filter and sort GPUs"] select').first().waitFor({ timeout: 60_000 });
  await answers(p);
  const usable = Date.now() - t0;
  await allCards(p, GPUS);
  await answers(p);
  return [usable, Date.now() - t0];
}

/** A fresh load of /gpus in a new browser context (cold cache: HTML, JS, wasm and data all from
 * the server), logged in with the session's cookie; `throttle`: Chromium's network emulation. */
async function coldLoad(throttle) {
  const ctx = await browser.newContext({ viewport: VIEWPORT, storageState: await context.storageState() });
  const p = await ctx.newPage();
  p.on('pageerror', (e) => errors.push(e.message));
  if (throttle) {
    const cdp = await ctx.newCDPSession(p);
    await cdp.send('Network.enable');
    await cdp.send('Network.emulateNetworkConditions', {
      offline: false,
      latency: THROTTLE.rtt_ms,
      downloadThroughput: THROTTLE.mbit * 1e6 / 8,
      uploadThroughput: THROTTLE.mbit * 1e6 / 8,
    });
  }
  const out = await timed(p, () => p.goto(URL + '/gpus'));
  // Where the time went: when each request of the load started and ended, from navigation start.
  breakdown.push(await p.evaluate(() => {
    const at = {};
    for (const e of performance.getEntriesByType('resource')) {
      const name = new globalThis.URL(e.name).pathname;
      if (!(name in at)) at[name] = [Math.round(e.startTime), Math.round(e.responseEnd)];
      // index.html preloads the wasm: a second fetch of it means the preload went unused.
      else if (name.endsWith('.wasm')) at.twice = name;
    }
    return at;
  }));
  if (breakdown.at(-1).twice) errors.push(`${breakdown.at(-1).twice} fetched twice (its preload unused)`);
  await ctx.close();
  return out;
}

const THROTTLE = { mbit: 20, rtt_ms: 40 };
const breakdown = [];
const inApp = [];
const inAppAll = [];
const cold = [];
const coldAll = [];
const throttled = [];
const throttledAll = [];
for (let i = 0; i < RUNS; i++) {
  // In the app: from the Fleet page, a click on "GPUs" (client-side navigation).
  await page.goto(URL + '/');
  await page.locator('nav[aria-label="Main"] a', { hasText: 'GPUs' }).waitFor();
  const [a, b] = await timed(page, () => page.locator('nav[aria-label="Main"] a', { hasText: 'GPUs' }).click());
  inApp.push(a);
  inAppAll.push(b);
  const [c, d] = await coldLoad(false);
  cold.push(c);
  coldAll.push(d);
  const [e, f] = await coldLoad(true);
  throttled.push(e);
  throttledAll.push(f);
}
const cards = await page.locator('.gpu-card').count();
await browser.close();

const stats = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return { p50: s[Math.floor(s.length / 2)], max: s[s.length - 1], runs: s.length };
};
console.log(JSON.stringify({
  gpus: GPUS, cards, viewport: `${VIEWPORT.width}x${VIEWPORT.height}`, throttle: THROTTLE,
  usable_ms: { in_app_navigation: stats(inApp), cold_load_loopback: stats(cold), cold_load_throttled: stats(throttled) },
  all_cards_drawn_ms: { in_app_navigation: stats(inAppAll), cold_load_loopback: stats(coldAll), cold_load_throttled: stats(throttledAll) },
  // Per request of the cold loads (loopback and throttled alternate): [start, end] ms after navigation start.
  cold_load_requests_ms: breakdown,
  errors,
}));
assert.equal(cards, GPUS, 'every GPU has its card');
assert.deepEqual(errors, []);
