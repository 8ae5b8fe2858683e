// `cargo xtask bench bundle`: the WASM each page fetches, as Chromium sees
// it. Each page opens in a fresh browser context (an empty cache), waits
// until the page says its islands are hydrated and every WASM request it
// started has finished, and counts the `.wasm` responses and their bytes as
// they came over the wire (the server sends the `.gz` files as they are).
// Then a VM page's Start, which fetches the job timeline's code, and a
// VM's console page, whose scripts (its own, noVNC's, xterm.js's) no other
// page may load: every page's count of those is reported too.
//
// The server (BASE_URL) runs the simulated cluster with API_TOKENS=TOKEN,
// so that the sign-in form and the account page have their islands; every
// page but /login is opened signed in with that token. Prints one JSON
// object: { pages: [{ page, path, requests, bytes, files, console }],
// start: {…}, console: {…} }, where `console` is { requests, bytes, files }
// of the console's scripts and styles.
import { BASE_URL, launch } from '../lib/browser.mjs';

const TOKEN = process.env.TOKEN;
if (!TOKEN) throw new Error('TOKEN (one of the server\'s API_TOKENS) is not set');
const AUTH = { authorization: `Bearer ${TOKEN}` };
/** Ample for a page of the release server to hydrate on a loaded machine. */
const TIMEOUT_MS = 30_000;

async function api(path, init = {}) {
  const res = await fetch(BASE_URL + path, { ...init, headers: { ...AUTH, ...init.headers } });
  if (!res.ok) throw new Error(`${init.method ?? 'GET'} ${path}: ${res.status} ${await res.text()}`);
  return res;
}

/** Whether a path is the console page's own (its script and style, and
 *  the clients it imports). */
const isConsoleFile = (path) => /^\/pkg\/(console|novnc|xterm)\//.test(path);

/** Records the page's `.wasm` requests and the console's files: each
 *  one's file and encoded size once finished; `settled()` resolves when
 *  none is in flight. */
function watchWasm(page) {
  const files = [];
  const pending = new Set();
  let wake = () => {};
  const done = async (request, failed) => {
    if (!pending.has(request)) return;
    const response = failed ? null : await request.response();
    const sizes = failed ? null : await request.sizes();
    const path = new URL(request.url()).pathname;
    files.push({
      console: isConsoleFile(path),
      file: isConsoleFile(path) ? path.replace('/pkg/', '') : path.split('/').pop(),
      status: response?.status() ?? 0,
      encoding: response?.headers()['content-encoding'] ?? 'none',
      bytes: sizes?.responseBodySize ?? 0,
    });
    pending.delete(request);
    wake();
  };
  page.on('request', (r) => {
    const path = new URL(r.url()).pathname;
    if (path.endsWith('.wasm') || isConsoleFile(path)) pending.add(r);
  });
  page.on('requestfinished', (r) => done(r, false));
  page.on('requestfailed', (r) => done(r, true));
  return {
    files,
    async settled() {
      while (pending.size > 0) await new Promise((resolve) => { wake = resolve; });
    },
  };
}

/** The page's WASM, and apart the console's files it loaded. */
function summary(page, path, all) {
  const files = all.filter((f) => !f.console);
  const theirs = all.filter((f) => f.console);
  const sum = (list) => list.reduce((total, f) => total + f.bytes, 0);
  return {
    page,
    path,
    requests: files.length,
    bytes: sum(files),
    files,
    console: { requests: theirs.length, bytes: sum(theirs), files: theirs.map((f) => f.file) },
  };
}

/** `path` in a fresh context with `state`, once `ready` (a page function)
 *  holds and its requests have finished. */
async function measure(browser, state, page, path, ready = hydrated) {
  const context = await browser.newContext({ storageState: state });
  try {
    const tab = await context.newPage();
    const errors = [];
    tab.on('pageerror', (e) => errors.push(e.message));
    tab.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()); });
    const wasm = watchWasm(tab);
    await tab.goto(BASE_URL + path);
    await ready(tab);
    await wasm.settled();
    if (errors.length) throw new Error(`${path}: ${errors.join('; ')}`);
    return { tab, result: summary(page, path, wasm.files), wasm };
  } catch (e) {
    await context.close();
    throw e;
  }
}

function hydrated(tab) {
  return tab.waitForSelector('main[data-hydrated="true"]', { timeout: TIMEOUT_MS });
}

/** The console page hydrates nothing: it is ready when its console is
 *  open and the clients it imports have come. */
async function consoleOpen(tab) {
  await tab.waitForFunction(() => window.pvedeckConsole?.state === 'open', null, { timeout: TIMEOUT_MS });
  await tab.waitForLoadState('networkidle', { timeout: TIMEOUT_MS });
}

async function signIn(browser) {
  const context = await browser.newContext();
  const page = await context.newPage();
  await page.goto(BASE_URL + '/login');
  await page.waitForSelector('main[data-hydrated="true"]', { timeout: TIMEOUT_MS });
  await page.fill('#token', TOKEN);
  await Promise.all([
    page.waitForURL(BASE_URL + '/', { timeout: TIMEOUT_MS }),
    page.getByRole('button', { name: 'Sign in with a token' }).click(),
  ]);
  const state = await context.storageState();
  await context.close();
  return state;
}

const { list: vms } = await (await api('/api/vm/list')).json();
const running = vms.find((vm) => vm.status === 'running');
const stopped = vms.filter((vm) => vm.status === 'stopped');
if (!running || stopped.length < 2) throw new Error(`the cluster needs a running VM and two stopped ones: ${JSON.stringify(vms)}`);
// A job to show: start one stopped VM and read the stream to its end.
await (await api(`/api/vm/${stopped[0].vmid}/start`, { method: 'POST' })).text();
const [job] = await (await api('/api/jobs?limit=1')).json();

const browser = await launch();
try {
  const signedIn = await signIn(browser);
  const signedOut = { cookies: [], origins: [] };
  const pages = [
    ['/', '/', signedIn],
    ['/vm/:id', `/vm/${running.vmid}`, signedIn],
    ['/new', '/new', signedIn],
    ['/jobs', '/jobs', signedIn],
    ['/jobs/:id', `/jobs/${job.id}`, signedIn],
    ['/login', '/login', signedOut],
    ['/templates', '/templates', signedIn],
    ['/node/:name', `/node/${running.node}`, signedIn],
    ['/account', '/account', signedIn],
  ];
  const results = [];
  for (const [page, path, state] of pages) {
    const { tab, result } = await measure(browser, state, page, path);
    results.push(result);
    await tab.context().close();
  }
  // A stopped VM's page, then its Start: the job's timeline comes then.
  const vmid = stopped[1].vmid;
  const { tab, wasm } = await measure(browser, signedIn, '/vm/:id', `/vm/${vmid}`);
  const before = wasm.files.length;
  await tab.getByRole('button', { name: `Start VM ${vmid}` }).click();
  await tab.locator('.job[data-state="succeeded"]').waitFor({ timeout: TIMEOUT_MS });
  await wasm.settled();
  const start = summary('/vm/:id, Start', `/vm/${vmid}`, wasm.files.slice(before));
  await tab.context().close();
  const shown = await measure(browser, signedIn, '/vm/:id/console', `/vm/${running.vmid}/console`, consoleOpen);
  await shown.tab.context().close();
  console.log(JSON.stringify({ pages: results, start, console: shown.result }));
} finally {
  await browser.close();
}
