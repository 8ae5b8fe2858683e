// Shared set-up for the browser tests: Debian's Chromium through
// playwright-core, a page that records every console error, screenshots.
import { execFile } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
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

/** The whole page as `<name>.png`; `{ fullPage: false }` for what a visitor
 *  sees first (the README's pictures). */
export async function screenshot(page, name, { fullPage = true } = {}) {
  mkdirSync(SCREENSHOT_DIR, { recursive: true });
  await page.screenshot({ path: join(SCREENSHOT_DIR, `${name}.png`), fullPage });
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

/** The address pvedeck gives VM `vmid`: on its gateway's /24 (the server's
 *  GATEWAY, as PVEDECK_GATEWAY; the sim backend's default 192.168.0.1). */
export function vmAddress(vmid) {
  const gateway = process.env.PVEDECK_GATEWAY ?? '192.168.0.1';
  return `${gateway.split('.').slice(0, 3).join('.')}.${vmid}`;
}

// The simulated cluster, changed behind the server's back (faults, nodes
// going away). A server of the sim backend has routes for it
// (`/api/sim/…`); one of the api backend over the simulator's REST face has
// none, and the tests run the simulator's command line on the cluster's data
// directory instead: `PVEDECK_SIM_BIN …` with DATA_DIR=SIM_DATA_DIR.
const PVEDECK_SIM_BIN = process.env.PVEDECK_SIM_BIN;
const SIM_DATA_DIR = process.env.SIM_DATA_DIR;

/** `pvedeck-sim <args>`; rejects with its output if it fails. Only DATA_DIR:
 *  the REST face seeded the cluster already, nothing else is read. */
async function simCommand(...args) {
  await promisify(execFile)(PVEDECK_SIM_BIN, args, { env: { DATA_DIR: SIM_DATA_DIR } });
}

export const sim = {
  /** Injects a fault (see src/sim/faults.rs for its fields). */
  async fault(fault) {
    if (PVEDECK_SIM_BIN) return simCommand('fault', JSON.stringify(fault));
    await postJson('/api/sim/faults', fault);
  },

  async clearFaults() {
    if (PVEDECK_SIM_BIN) return simCommand('fault', 'clear');
    const res = await fetch(BASE_URL + '/api/sim/faults', { method: 'DELETE' });
    if (!res.ok) throw new Error(`DELETE faults: ${res.status}`);
  },

  /** Takes a node offline or brings it back (`state`: 'online', 'offline'). */
  async node(name, state) {
    if (PVEDECK_SIM_BIN) return simCommand('node', name, state);
    await post(`/api/sim/node/${name}/${state}`);
  },
};
