// Accessibility of every page (axe-core in the real Chromium) and views shared through the
// address (filters, sort and search in the query). Started by scripts/browser-test.sh, which
// provides a server with the recorded H200 trace and a simulated fleet of 8 GPUs:
//   FLEETLENS_URL, FLEETLENS_ADMIN_EMAIL, FLEETLENS_ADMIN_PASSWORD
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { EMAIL, PASSWORD, T, URL, launchChromium, seriousViolations } from './helpers.mjs';

assert.ok(URL && EMAIL && PASSWORD, 'FLEETLENS_URL, FLEETLENS_ADMIN_EMAIL/PASSWORD must be set (run scripts/browser-test.sh)');

const FIXTURE_UUID = 'GPU-b8c24ac0-038a-26bb-9696-7e629bc4f276';

let browser;
let context;
let page;

before(async () => {
  browser = await launchChromium();
  // axe is injected as a script of its own: the dashboard's Content-Security-Policy would refuse it.
  context = await browser.newContext({ viewport: { width: 1280, height: 900 }, bypassCSP: true });
  page = await context.newPage();
});

after(async () => {
  await browser?.close();
});

test('login page: no serious or critical accessibility violations', async () => {
  await page.goto(URL + '/login');
  assert.deepEqual(await seriousViolations(page, '#email'), []);
  await page.fill('#email', EMAIL);
  await page.fill('#password', PASSWORD);
  await page.click('form[aria-label="Log in"] button[type="submit"]');
  await page.waitForURL(URL + '/', { timeout: T });
});

for (const [name, path, ready] of [
  ['fleet', '/', '#owners-title'],
  ['GPUs', '/gpus', '.gpu-card'],
  ['GPU detail', `/gpus/${FIXTURE_UUID}`, '#proc-title'],
  ['alerts', '/alerts', '#rules-title'],
  ['reports', '/reports', '#billing-title'],
  ['jobs', '/jobs', '#job-runs-title'],
  ['reclaim', '/reclaim', '#reclaims-title'],
  ['settings', '/settings', '#prices-title'],
  ['not found', '/no-such-page', 'h1'],
]) {
  test(`${name} page: no serious or critical accessibility violations`, async () => {
    await page.goto(URL + path);
    assert.deepEqual(await seriousViolations(page, ready), []);
  });
}

test('GPU detail: every chart has a text equivalent (a named image and a table of its values)', async () => {
  await page.goto(`${URL}/gpus/${FIXTURE_UUID}`);
  await page.locator('figure.chart svg').first().waitFor({ timeout: T });
  const charts = await page.evaluate(() => [...document.querySelectorAll('figure.chart')].map((f) => ({
    label: f.querySelector('svg[role=img]')?.getAttribute('aria-label') || '',
    table: !!f.querySelector('table'),
  })));
  assert.ok(charts.length >= 3, `charts drawn: ${charts.length}`);
  for (const c of charts) {
    assert.ok(c.label.length > 10, `a chart's summary: ${JSON.stringify(c.label)}`);
    assert.ok(c.table, `the chart "${c.label}" has a table of its values`);
  }
});

/** The GPUs page's filter control named `name` (its label's own words, not the chosen option's). */
const control = (p, name) => p.locator('form[aria-label="Filter and sort GPUs"] label')
  .filter({ has: p.locator(`span:text-is("${name}")`) }).locator('select, input');

test('GPUs page: filters, sort and search live in the address; a shared link opens the same view', async () => {
  await page.goto(URL + '/gpus');
  await page.locator('.gpu-card').first().waitFor({ timeout: T });
  const all = await page.locator('.gpu-card').count();
  assert.ok(all >= 8, `cards: ${all}`);

  // A host filter and a sort go into the query, replacing the address (no history entry each).
  const host = await control(page, 'Host').locator('option').nth(1).getAttribute('value');
  await control(page, 'Host').selectOption(host);
  await page.waitForURL((u) => u.searchParams.get('host') === host, { timeout: T });
  await control(page, 'Sort by').selectOption('util');
  await page.waitForURL((u) => u.searchParams.get('sort') === 'util' && u.searchParams.get('host') === host, { timeout: T });
  const filtered = await page.locator('.gpu-card').count();
  assert.ok(filtered >= 1 && filtered < all, `one host's cards: ${filtered} of ${all}`);

  // The same address in a fresh page shows the same view, its controls set.
  const shared = page.url();
  const other = await context.newPage();
  await other.goto(shared);
  await other.locator('.gpu-card').first().waitFor({ timeout: T });
  assert.equal(await other.locator('.gpu-card').count(), filtered);
  assert.equal(await control(other, 'Host').inputValue(), host);
  assert.equal(await control(other, 'Sort by').inputValue(), 'util');
  await other.close();

  // Search: words of the UUID (or host, model, owner) narrow the cards; the words are in the address.
  await control(page, 'Host').selectOption('');
  const uuid = await page.locator('.gpu-card').first().getAttribute('data-uuid');
  await control(page, 'Search').fill(uuid.slice(-12));
  await page.waitForURL((u) => u.searchParams.get('q') === uuid.slice(-12), { timeout: T });
  await page.waitForFunction(() => document.querySelectorAll('.gpu-card').length === 1, null, { timeout: T });
  assert.equal(await page.locator('.gpu-card').getAttribute('data-uuid'), uuid);
  await control(page, 'Search').fill('no-such-gpu-anywhere');
  await page.locator('text=No GPU matches these filters.').waitFor({ timeout: T });
});
