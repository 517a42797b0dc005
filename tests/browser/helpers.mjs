// What the browser tests share: the server scripts/browser-test.sh started (its address, admin
// key and admin login, from the environment), its API with the admin key, the system Chromium,
// logging in, waiting for text, screenshots, console watching, axe-core and a local webhook
// receiver. A module, not a test file (no `.test.mjs`): browser-test.sh does not run it.
import assert from 'node:assert/strict';
import http from 'node:http';
import { createRequire } from 'node:module';
import path from 'node:path';
import { chromium } from 'playwright-core';

export const URL = process.env.FLEETLENS_URL;
export const TOKEN = process.env.FLEETLENS_TOKEN;
export const EMAIL = process.env.FLEETLENS_ADMIN_EMAIL;
export const PASSWORD = process.env.FLEETLENS_ADMIN_PASSWORD;
export const SHOTS = process.env.SCREENSHOT_DIR || '/tmp';
/** How long a step waits for the page, ms. */
export const T = 15_000;
const AXE = createRequire(import.meta.url).resolve('axe-core/axe.min.js');

/** `fetch` of the server's API with the admin key and a JSON content type. */
export function api(pathAndQuery, init = {}) {
  return fetch(URL + pathAndQuery, {
    ...init,
    headers: { Authorization: `Bearer ${TOKEN}`, 'Content-Type': 'application/json', ...(init.headers || {}) },
  });
}

/** The system Chromium, headless, with no background traffic of its own. */
export function launchChromium() {
  return chromium.launch({
    executablePath: '/usr/bin/chromium',
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking',
      '--disable-component-update', '--disable-sync'],
  });
}

/** Logs `p` in through the login form (as the admin unless told) and waits for the home page. */
export async function logIn(p, email = EMAIL, password = PASSWORD) {
  await p.goto(URL + '/login');
  await p.locator('#email').waitFor({ timeout: T });
  await p.fill('#email', email);
  await p.fill('#password', password);
  await p.click('form[aria-label="Log in"] button[type="submit"]');
  await p.waitForURL(URL + '/', { timeout: T });
}

/** Polls until the locator's text matches, returns the text. */
export async function waitForText(locator, re, timeout = T) {
  const end = Date.now() + timeout;
  let last = '';
  while (Date.now() < end) {
    last = (await locator.first().textContent().catch(() => '')) || '';
    if (re.test(last)) return last;
    await new Promise((r) => setTimeout(r, 100));
  }
  assert.fail(`text ${JSON.stringify(last.slice(0, 300))} never matched ${re}`);
}

/** A full-page screenshot `name`.png in SHOTS, once the page has settled for a moment. */
export async function shot(p, name) {
  await p.waitForTimeout(200);
  await p.screenshot({ path: path.join(SHOTS, `${name}.png`), fullPage: true });
}

/** Pushes the console errors and uncaught exceptions of `p` to `errors` as `{ text, url }`,
 * except a failed resource whose path is in `expectedFailures` (a Set, changeable later). */
export function watchConsole(p, errors, expectedFailures) {
  p.on('console', (msg) => {
    if (msg.type() !== 'error') return;
    const url = msg.location()?.url || '';
    const pathname = new globalThis.URL(url || 'http://x/').pathname;
    const expected = /Failed to load resource/.test(msg.text()) && expectedFailures.has(pathname);
    if (!expected) errors.push({ text: msg.text(), url });
  });
  p.on('pageerror', (err) => errors.push({ text: `uncaught: ${err.message}`, url: p.url() }));
}

/** The serious and critical axe-core violations of the page once drawn (`ready`, a selector,
 * shown if given, and no "Loading…" left), one line each. The page's context must bypass the
 * dashboard's Content-Security-Policy: axe is injected as a script of its own. */
export async function seriousViolations(p, ready) {
  if (ready) await p.locator(ready).first().waitFor({ timeout: T });
  await p.waitForFunction(() => !document.querySelector('main .status[role=status]'), null, { timeout: T });
  await p.addScriptTag({ path: AXE });
  const violations = await p.evaluate(async () => {
    const r = await globalThis.axe.run(document, { resultTypes: ['violations'] });
    return r.violations.map((v) => ({ id: v.id, impact: v.impact, help: v.help, nodes: v.nodes.map((n) => n.target.join(' ')) }));
  });
  return violations
    .filter((v) => v.impact === 'serious' || v.impact === 'critical')
    .map((v) => `${v.impact} ${v.id} (${v.help}): ${v.nodes.slice(0, 5).join(', ')}`);
}

/** A local HTTP receiver on 127.0.0.1 that answers 200 `ok` and pushes every request to
 * `received` as `{ method, url, headers, body }`: the server, listening. */
export async function startReceiver(received) {
  const receiver = http.createServer((req, res) => {
    let body = '';
    req.on('data', (c) => (body += c));
    req.on('end', () => {
      received.push({ method: req.method, url: req.url, headers: req.headers, body });
      res.writeHead(200, { 'Content-Type': 'text/plain' });
      res.end('ok');
    });
  });
  await new Promise((r) => receiver.listen(0, '127.0.0.1', r));
  return receiver;
}
