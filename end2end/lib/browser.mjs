// Shared set-up for the browser tests: Debian's Chromium through
// playwright-core, a page that records every console error, screenshots.
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { chromium } from 'playwright-core';

export const BASE_URL = process.env.BASE_URL ?? 'http://127.0.0.1:8080';
const SCREENSHOT_DIR = process.env.SCREENSHOT_DIR ?? 'screenshots';

const ARGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];

/** Chromium with a fresh temporary profile (playwright makes one per launch). */
export async function launch() {
  return chromium.launch({
    executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
    args: ARGS,
    headless: true,
  });
}

/** A page in its own context whose console errors and uncaught exceptions are collected. */
export async function openPage(browser, options = {}) {
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 }, ...options });
  const page = await context.newPage();
  const errors = [];
  page.on('console', (msg) => {
    if (msg.type() === 'error') errors.push(`console: ${msg.text()}`);
  });
  page.on('pageerror', (err) => errors.push(`page: ${err.message}`));
  // A request the page itself abandons (a live stream when navigating away)
  // is not a failure.
  page.on('requestfailed', (req) => {
    if (req.failure()?.errorText !== 'net::ERR_ABORTED') errors.push(`request failed: ${req.url()}`);
  });
  return { page, errors };
}

/** Resolves once the WASM has hydrated the page (the app sets the marker). */
export async function waitForHydration(page) {
  await page.waitForSelector('main[data-hydrated="true"]', { timeout: 20_000 });
}

export async function screenshot(page, name) {
  mkdirSync(SCREENSHOT_DIR, { recursive: true });
  await page.screenshot({ path: join(SCREENSHOT_DIR, `${name}.png`), fullPage: true });
}

export async function post(path) {
  const res = await fetch(BASE_URL + path, { method: 'POST' });
  if (!res.ok) throw new Error(`POST ${path}: ${res.status} ${await res.text()}`);
  return res.text();
}

export async function postJson(path, body) {
  const res = await fetch(BASE_URL + path, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  if (!res.ok) throw new Error(`POST ${path}: ${res.status} ${await res.text()}`);
  return res.text();
}

export async function getJson(path) {
  const res = await fetch(BASE_URL + path);
  if (!res.ok) throw new Error(`GET ${path}: ${res.status} ${await res.text()}`);
  return res.json();
}

export async function clearFaults() {
  const res = await fetch(BASE_URL + '/api/sim/faults', { method: 'DELETE' });
  if (!res.ok) throw new Error(`DELETE faults: ${res.status}`);
}
