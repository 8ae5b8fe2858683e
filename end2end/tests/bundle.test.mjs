// The WASM loader (written by xtask/src/site/loader.rs): a page fetches its
// island's modules as one bundle, and a split point whose modules are partly
// in already gets the rest, each module instantiated once.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { BASE_URL, launch, openPage, waitForHydration } from '../lib/browser.mjs';

const LOADER = '/pkg/__wasm_split.______________________.js';

let browser;
before(async () => { browser = await launch(); });
after(async () => { await browser?.close(); });

/** The `.wasm` files the page asks for, in order. */
function wasmRequests(page) {
  const files = [];
  page.on('request', (r) => {
    const path = new URL(r.url()).pathname;
    if (path.endsWith('.wasm')) files.push(path.split('/').pop().replace(/\.wasm$/, ''));
  });
  return files;
}

/** Loads split point `prefix…` through the page's loader; its modules. */
async function load(page, prefix) {
  return page.evaluate(async ([loader, prefix]) => {
    const { loadSplit, splitParts } = await import(loader);
    const split = Object.keys(splitParts).find((s) => s.startsWith(prefix));
    await loadSplit(split);
    return splitParts[split];
  }, [LOADER, prefix]);
}

/** What the loader fetches for `missing` modules: the bundle of exactly
 *  those if there is one, else each. */
async function expected(page, missing) {
  const bundles = await page.evaluate(async (loader) => (await import(loader)).splitBundles, LOADER);
  const same = bundles.find(([, parts]) => parts.length === missing.length && parts.every((p) => missing.includes(p)));
  return same ? [same[0]] : missing.toSorted();
}

test('a page fetches the main module and its island\'s bundle', async () => {
  const { page, errors } = await openPage(browser);
  const files = wasmRequests(page);
  await page.goto(BASE_URL + '/jobs');
  await waitForHydration(page);
  assert.deepEqual(files, ['pvedeck_bg', files[1]]);
  assert.match(files[1], /^bundle_live_jobs_loader_\d+$/);
  assert.deepEqual(errors, []);
});

test('modules partly in already: the rest come one by one, each once', async () => {
  const { page, errors } = await openPage(browser);
  const files = wasmRequests(page);
  await page.goto(BASE_URL + '/jobs');
  await waitForHydration(page);
  const jobs = await load(page, 'live_jobs_loader_');
  const onLoad = files.length;
  // No bundle is made for an island after another: one by one.
  const people = await load(page, 'people_loader_');
  const fetched = files.slice(onLoad);
  assert.deepEqual(fetched.toSorted(), await expected(page, people.filter((p) => !jobs.includes(p))));
  // Everything in: nothing more.
  await load(page, 'people_loader_');
  assert.equal(files.length, onLoad + fetched.length);
  // A lazy function after both: only what neither had.
  const panel = await load(page, 'job_panel_');
  const had = new Set([...jobs, ...people]);
  const rest = files.slice(onLoad + fetched.length);
  assert.deepEqual(rest.toSorted(), await expected(page, panel.filter((p) => !had.has(p))));
  assert.equal(new Set(files).size, files.length, `a file fetched twice: ${files}`);
  assert.deepEqual(errors, []);
});
