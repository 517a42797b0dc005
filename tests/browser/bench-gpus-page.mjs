// Dashboard budget benchmark (issue 7), not a test: with a fleet of FLEETLENS_BENCH_GPUS GPUs,
// how long from navigating to the GPUs page until every card is drawn, in headless Chromium.
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
const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
const page = await context.newPage();
const errors = [];
page.on('pageerror', (e) => errors.push(e.message));

await page.goto(URL + '/login');
await page.fill('#email', EMAIL);
await page.fill('#password', PASSWORD);
await page.press('#password', 'Enter');
await page.waitForURL((u) => !u.pathname.startsWith('/login'), { timeout: 30_000 });

const allCards = (n) => page.waitForFunction((n) => document.querySelectorAll('.gpu-card').length >= n, n,
  { timeout: 60_000, polling: 'raf' });

/** Milliseconds from the start of `go` until every card is drawn and the page answers input. */
async function timed(go) {
  const t0 = Date.now();
  await go();
  await allCards(GPUS);
  // Usable: the main thread is free to answer (a frame after the cards).
  await page.evaluate(() => new Promise((r) => requestAnimationFrame(() => setTimeout(r, 0))));
  return Date.now() - t0;
}

const inApp = [];
const fullLoad = [];
for (let i = 0; i < RUNS; i++) {
  // In the app: from the Fleet page, a click on "GPUs" (client-side navigation).
  await page.goto(URL + '/');
  await page.locator('nav[aria-label="Main"] a', { hasText: 'GPUs' }).waitFor();
  inApp.push(await timed(() => page.locator('nav[aria-label="Main"] a', { hasText: 'GPUs' }).click()));
  // A fresh load of /gpus: HTML, JS and wasm from the server's cache headers, then the data.
  await page.goto('about:blank');
  fullLoad.push(await timed(() => page.goto(URL + '/gpus')));
}
const cards = await page.locator('.gpu-card').count();
await browser.close();

const stats = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return { p50: s[Math.floor(s.length / 2)], max: s[s.length - 1], runs: s.length };
};
console.log(JSON.stringify({ gpus: GPUS, cards, in_app_navigation_ms: stats(inApp), full_load_ms: stats(fullLoad), errors }));
assert.equal(cards, GPUS, 'every GPU has its card');
assert.deepEqual(errors, []);
