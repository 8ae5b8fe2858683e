// Sign-in with OpenID Connect: a pvedeck server of its own (PVEDECK_BIN)
// against the test provider (oidc/provider.mjs) in this process — the way in
// through the provider's form and back to where the visitor was going, who
// is an admin by group, signing out, whose VM consoles a user may open (their
// own; another's is not there) and that signing out closes them, and a
// callback refused (no session) for
// a wrong state, a spent code, and each way the provider can spoil the ID
// token. Skipped without PVEDECK_BIN (and LEPTOS_SITE_ROOT) in the environment.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createWriteStream } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { once } from 'node:events';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { createInterface } from 'node:readline';
import { audit } from '../lib/axe.mjs';
import { launch, openPage, screenshot, waitForHydration } from '../lib/browser.mjs';
import { startProvider } from '../oidc/provider.mjs';

const PVEDECK_BIN = process.env.PVEDECK_BIN;
const CLIENT_ID = 'pvedeck';
const CLIENT_SECRET = 'signin-test-secret';
const SESSION_COOKIE = 'pvedeck_session';
/** openPage's viewport, and a phone's (as in ui.test.mjs and a11y.test.mjs). */
const DESKTOP = { width: 1280, height: 900 };
const NARROW = { width: 390, height: 844 };
/** Ample for a release server to bind; it prints its URL the moment it listens. */
const START_TIMEOUT_MS = 60_000;
// Next to the other server's log when run by xtask (SCREENSHOT_DIR is
// target/e2e/screenshots there).
const LOG = join(process.env.SCREENSHOT_DIR ? dirname(process.env.SCREENSHOT_DIR) : tmpdir(), 'signin-server.log');

// What each refusal must name after "Sign-in refused:" — loose on purpose,
// in one place to match the server's wording: a refusal for the wrong
// reason (say every callback failing) must not pass for the right one.
const REASON = {
  state: /state/i,
  spentCode: /code|grant|token/i,
  'wrong-nonce': /nonce/i,
  expired: /expir/i,
  'bad-signature': /signature/i,
  'wrong-audience': /audience|\baud\b/i,
};

/** A loopback port nothing listens on (the server's, chosen before the
 *  provider is told its redirect URI). */
async function freePort() {
  const probe = createServer().listen(0, '127.0.0.1');
  await once(probe, 'listening');
  const { port } = probe.address();
  await new Promise((resolve) => probe.close(resolve));
  return port;
}

/** pvedeck with the sim backend and sign-in through `issuer`, on `port`, in
 *  a fresh data directory; resolves once it prints its URL. Its output goes to LOG. */
async function startPvedeck({ port, issuer, dataDir }) {
  const base = `http://127.0.0.1:${port}`;
  const env = {
    LEPTOS_SITE_ROOT: process.env.LEPTOS_SITE_ROOT,
    PORT: String(port),
    BIND_ADDR: '127.0.0.1',
    DATA_DIR: dataDir,
    PVE_BACKEND: 'sim',
    SIM_SPEED: '50',
    PUBLIC_URL: base,
    OIDC_ISSUER: issuer,
    OIDC_CLIENT_ID: CLIENT_ID,
    OIDC_CLIENT_SECRET: CLIENT_SECRET,
    OIDC_ADMIN_GROUPS: 'pvedeck-admins',
  };
  // Nothing else from this environment (the other server's settings) leaks in.
  for (const name of ['PATH', 'HOME']) if (process.env[name]) env[name] = process.env[name];
  const log = createWriteStream(LOG);
  const child = spawn(PVEDECK_BIN, [], { env, stdio: ['ignore', 'pipe', 'pipe'] });
  child.stderr.pipe(log, { end: false });
  const exited = once(child, 'exit');
  await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`pvedeck printed no URL in ${START_TIMEOUT_MS} ms; see ${LOG}`)), START_TIMEOUT_MS);
    // Read on after the URL too: a full pipe would stall the server.
    createInterface({ input: child.stdout }).on('line', (line) => {
      log.write(`${line}\n`);
      if (line.includes('http://')) {
        clearTimeout(timer);
        resolve();
      }
    });
    child.once('error', (err) => { clearTimeout(timer); reject(err); });
    exited.then(([code, signal]) => {
      clearTimeout(timer);
      reject(new Error(`pvedeck exited (${code ?? signal}) before listening; see ${LOG}`));
    });
  });
  return {
    base,
    async stop() {
      if (child.exitCode === null && child.signalCode === null) process.kill(child.pid, 'SIGTERM');
      await exited;
      log.end();
    },
  };
}

describe('sign-in with OpenID Connect', {
  skip: PVEDECK_BIN ? false : 'PVEDECK_BIN is not set (a release pvedeck binary; with LEPTOS_SITE_ROOT, its site)',
}, () => {
  let browser;
  let provider;
  let server;
  let dataDir;
  let BASE;

  before(async () => {
    const port = await freePort();
    provider = await startProvider({
      clients: [{
        client_id: CLIENT_ID,
        client_secret: CLIENT_SECRET,
        redirect_uris: [`http://127.0.0.1:${port}/auth/callback`],
      }],
    });
    dataDir = await mkdtemp(join(tmpdir(), 'pvedeck-signin-'));
    server = await startPvedeck({ port, issuer: provider.issuer, dataDir });
    BASE = server.base;
    browser = await launch();
  });

  after(async () => {
    await browser?.close();
    await server?.stop();
    await provider?.close();
    if (dataDir) await rm(dataDir, { recursive: true, force: true });
  });

  const isCallback = (url) => String(url).startsWith(`${BASE}/auth/callback`);

  /** The pvedeck_session cookie the browser holds for pvedeck, if any. */
  async function sessionCookie(page) {
    return (await page.context().cookies(BASE)).find((c) => c.name === SESSION_COOKIE);
  }

  /** On pvedeck's login page: through its link to the provider, whose form
   *  is filled as `name` (in a fresh context: the provider remembers who
   *  signed in before and would skip its form). */
  async function throughProvider(page, name) {
    await page.click('a.oidc-sign-in');
    await page.waitForURL((url) => url.href.startsWith(`${provider.issuer}/`));
    await page.fill('input[name="login"]', name);
    await page.click('button[value="login"]');
  }

  /** A fresh context on the login page (to come back to /). */
  async function loginPage() {
    const { page } = await openPage(browser);
    await page.goto(`${BASE}/login?next=%2F`);
    return page;
  }

  /** `name` signed in from a fresh context, from an anonymous visit to `next`
   *  via the login page to `next` again, hydrated. */
  async function signIn(name, next = '/') {
    const { page, errors } = await openPage(browser);
    await page.goto(BASE + next);
    assert.equal(page.url(), `${BASE}/login?next=${encodeURIComponent(next)}`, 'sent to the login page');
    await throughProvider(page, name);
    await page.waitForURL(BASE + next);
    await waitForHydration(page);
    return { page, errors };
  }

  /** A sign-in as `name` in `page` stopped where the provider sends the
   *  browser back: the callback URL, which pvedeck has not seen. */
  async function heldBackCallback(page, name) {
    provider.holdBack(true);
    try {
      await throughProvider(page, name);
      return new URL(await page.locator('a.held-back-callback').getAttribute('href'));
    } finally {
      provider.holdBack(false);
    }
  }

  /** Checks pvedeck's `response` to a callback, shown in `page`: a refusal
   *  for `reason` that leaves no session behind. */
  async function assertRefused(page, response, reason) {
    assert.ok([400, 401].includes(response.status()), `callback status ${response.status()}`);
    const body = await page.locator('body').innerText();
    const refusal = /Sign-in refused:\s*(.+)/.exec(body);
    assert.ok(refusal, `a refusal page: ${body.slice(0, 200)}`);
    assert.match(refusal[1], reason);
    // Clearing the cookie is fine; giving it a value is not.
    const sessions = (await response.headerValues('set-cookie')).filter((c) => c.startsWith(`${SESSION_COOKIE}=`)
      && !c.startsWith(`${SESSION_COOKIE}=;`) && !/max-age=0\b/i.test(c));
    assert.deepEqual(sessions, [], 'no session cookie set');
    assert.equal(await sessionCookie(page), undefined);
  }

  /** A sign-in as `name` with the provider in `mode`; the callback's response. */
  async function signInWithMode(mode, name = 'alice') {
    provider.setMode(mode);
    try {
      const page = await loginPage();
      const callback = page.waitForResponse((res) => isCallback(res.url()));
      await throughProvider(page, name);
      const response = await callback;
      await page.waitForLoadState();
      return { page, response };
    } finally {
      provider.setMode('normal');
    }
  }

  /** Each of `paths` in `page` (signed in as `who`) at desktop width, then
   *  at 390 px: it passes axe, and on the phone does not scroll sideways.
   *  Subtests, so that one failure does not hide the others. */
  async function auditPages(t, page, who, paths) {
    for (const viewport of [DESKTOP, NARROW]) {
      await page.setViewportSize(viewport);
      for (const path of paths) {
        await t.test(`${path} as ${who} at ${viewport.width} px`, async (t) => {
          await page.goto(BASE + path);
          await waitForHydration(page);
          if (viewport === NARROW) {
            await t.test('no horizontal scroll', async () => {
              const width = await page.evaluate(() => document.documentElement.scrollWidth);
              assert.ok(width <= NARROW.width, `${path} is ${width}px wide`);
            });
          }
          await t.test('axe', async () => { await audit(page, `${path} as ${who} (${viewport.width} px)`); });
        });
      }
    }
  }

  test('an anonymous visit is sent to the login page, which leads to the provider', async () => {
    const res = await fetch(`${BASE}/`, { redirect: 'manual' });
    assert.equal(res.status, 303);
    const location = new URL(res.headers.get('location'), BASE);
    assert.equal(location.href, `${BASE}/login?next=%2F`);

    const { page, errors } = await openPage(browser);
    await page.goto(location.href);
    const link = page.locator('a.oidc-sign-in');
    assert.equal((await link.textContent()).trim(), 'Sign in with OpenID Connect');
    assert.match(await link.getAttribute('href'), /^\/auth\/login\?next=/);
    await screenshot(page, 'signin-login');
    assert.deepEqual(errors, []);
  });

  test('alice signs in at the provider and is back on /, with an HttpOnly session cookie', async () => {
    const { page, errors } = await signIn('alice');
    const cookie = await sessionCookie(page);
    assert.ok(cookie, 'a pvedeck_session cookie');
    assert.equal(cookie.httpOnly, true);
    assert.ok(!(await page.evaluate(() => document.cookie)).includes(SESSION_COOKIE), 'not visible to scripts');
    assert.match(await page.locator('.whoami').textContent(), /\balice\b/);
    assert.equal(await page.locator('button.sign-out').count(), 1);
    assert.equal(await page.locator('header a[href="/audit"]').count(), 0, 'alice is no admin');
    assert.deepEqual(errors, []);
  });

  test('bob, on his way to /account, is back there after signing in; no admin either', async () => {
    const { page, errors } = await signIn('bob', '/account');
    assert.match(await page.locator('main').innerText(), /\bbob\b/);
    assert.match(await page.locator('.whoami').textContent(), /\bbob\b/);
    assert.equal(await page.locator('header a[href="/audit"]').count(), 0, 'groups dev and qa are not admins');
    await screenshot(page, 'signin-account');
    assert.deepEqual(errors, []);
  });

  test('carol, of pvedeck-admins, is an admin: her header links to /audit', async () => {
    const { page, errors } = await signIn('carol');
    assert.match(await page.locator('.whoami').textContent(), /\bcarol\b/);
    assert.equal(await page.locator('header a[href="/audit"]').count(), 1);
    await page.goto(`${BASE}/account`);
    await waitForHydration(page);
    assert.match(await page.locator('main').innerText(), /\bcarol\b/);
    assert.deepEqual(errors, []);
  });

  test('signed-in pages pass axe, wide and 390 px: carol\'s account, users and audit, alice\'s account', async (t) => {
    // The admin pages as an admin sees them, filled (the users and audit
    // tables have rows once anyone signed in).
    const carol = await signIn('carol', '/account');
    assert.equal(await carol.page.locator('header a[href="/audit"]').count(), 1, 'carol is an admin');
    await auditPages(t, carol.page, 'carol', ['/account', '/users', '/audit']);
    assert.deepEqual(carol.errors, []);
    // A header without the admin links, an account page of a user.
    const alice = await signIn('alice', '/account');
    await auditPages(t, alice.page, 'alice', ['/account']);
    assert.deepEqual(alice.errors, []);
  });

  test('signing out ends the session, not only the cookie', async () => {
    const { page, errors } = await signIn('alice');
    const { value } = await sessionCookie(page);
    await page.click('button.sign-out');
    // Wherever sign-out lands, the signed-in header is gone from it.
    await page.locator('button.sign-out').waitFor({ state: 'detached' });
    await page.goto(`${BASE}/`);
    assert.equal(page.url(), `${BASE}/login?next=%2F`);
    // The old cookie, kept by someone, opens nothing any more.
    const replay = await fetch(`${BASE}/`, { redirect: 'manual', headers: { cookie: `${SESSION_COOKIE}=${value}` } });
    assert.equal(replay.status, 303);
    assert.equal(new URL(replay.headers.get('location'), BASE).pathname, '/login');
    assert.deepEqual(errors, []);
  });

  /** A VM `page`'s user installs in the browser (the install server
   *  function, with the session): its VMID once the job has ended. */
  async function installAs(page, name) {
    const started = await page.evaluate(async (vmName) => {
      const res = await fetch('/fn/install', {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ body: { os: 'debian', version: '12', name: vmName } }),
      });
      return res.json();
    }, name);
    assert.ok(Number.isInteger(started.Ok), `an install job: ${JSON.stringify(started)}`);
    // The job's event stream ends when the job does.
    const job = await page.evaluate(async (id) => {
      await (await fetch(`/api/jobs/${id}/events`)).text();
      return (await fetch(`/api/jobs/${id}`)).json();
    }, started.Ok);
    assert.equal(job.state, 'succeeded', `job ${started.Ok}`);
    return job.vmid;
  }

  /** What became of a console WebSocket `page` opens on `vmid`. */
  function consoleSocket(page, vmid) {
    return page.evaluate((id) => new Promise((resolve) => {
      const ws = new WebSocket(`${location.origin.replace('http', 'ws')}/api/vm/${id}/console?kind=serial`, ['binary']);
      ws.onopen = () => { ws.close(); resolve('opened'); };
      ws.onclose = () => resolve('refused');
    }), vmid);
  }

  test('a VM\'s console is its owner\'s and the admins\': for another user it does not exist', { timeout: 120_000 }, async () => {
    const bob = await signIn('bob');
    const vmid = await installAs(bob.page, 'bobs-console');
    // Bob's own: the page opens the serial console.
    await bob.page.goto(`${BASE}/vm/${vmid}/console?kind=serial`);
    await bob.page.locator('#console-screen .xterm-rows').filter({ hasText: 'login:' }).waitFor({ timeout: 10_000 });

    // Alice: the page, the route and the WebSocket all say 404, as for a VM
    // that is not there.
    const alice = await signIn('alice');
    const page = await alice.page.goto(`${BASE}/vm/${vmid}/console`);
    assert.equal(page.status(), 404);
    assert.equal(await alice.page.evaluate(() => window.pvedeckConsole?.state ?? 'no console'), 'no console');
    const route = await alice.page.evaluate(async (id) => (await fetch(`/api/vm/${id}/console?kind=serial`)).status, vmid);
    assert.equal(route, 404);
    assert.equal(await consoleSocket(alice.page, vmid), 'refused');

    // Carol, an admin, may.
    const carol = await signIn('carol');
    assert.equal(await consoleSocket(carol.page, vmid), 'opened');
    assert.deepEqual(alice.errors.filter((e) => !/404|WebSocket/.test(e)), []);
    assert.deepEqual(bob.errors, []);
  });

  test('signing out closes the consoles the session had open', { timeout: 120_000 }, async () => {
    const { page, errors } = await signIn('bob');
    const vmid = await installAs(page, 'bobs-signout');
    await page.goto(`${BASE}/vm/${vmid}/console?kind=serial`);
    await page.locator('#console-screen .xterm-rows').filter({ hasText: 'login:' }).waitFor({ timeout: 10_000 });
    // Signing out in another tab of the same browser.
    const other = await page.context().newPage();
    await other.goto(`${BASE}/`);
    await waitForHydration(other);
    await other.click('button.sign-out');
    await page.waitForFunction(() => window.pvedeckConsole?.state === 'closed', null, { timeout: 10_000 });
    assert.match(await page.locator('#console-status').textContent(), /signed out/);
    assert.deepEqual(errors, []);
  });

  test('refused: a callback whose state is not the one pvedeck sent', async () => {
    const page = await loginPage();
    const callback = await heldBackCallback(page, 'alice');
    callback.searchParams.set('state', `${callback.searchParams.get('state')}x`);
    // Same browser, so whatever pvedeck keeps for the sign-in is there.
    await assertRefused(page, await page.goto(callback.href), REASON.state);
    await screenshot(page, 'signin-refused');
  });

  test('refused: a successful callback loaded again in another browser', async () => {
    const first = await loginPage();
    let callback;
    first.on('request', (req) => { if (isCallback(req.url())) callback = req.url(); });
    await throughProvider(first, 'bob');
    await first.waitForURL(`${BASE}/`);
    assert.ok(await sessionCookie(first), 'the first time signs bob in');

    const { page } = await openPage(browser);
    const response = await page.goto(callback);
    assert.ok([400, 401].includes(response.status()), `callback status ${response.status()}`);
    assert.match(await page.locator('body').innerText(), /Sign-in refused:/);
    assert.equal(await sessionCookie(page), undefined);
  });

  test('refused: a spent code under a sign-in of its own (the provider says invalid_grant)', async () => {
    // The code of a completed sign-in…
    const first = await loginPage();
    let spent;
    first.on('request', (req) => { if (isCallback(req.url())) spent = new URL(req.url()).searchParams.get('code'); });
    await throughProvider(first, 'bob');
    await first.waitForURL(`${BASE}/`);
    // …in place of the fresh one of another sign-in, whose state is right:
    // pvedeck has to take it to the provider to learn it is no good.
    const page = await loginPage();
    const callback = await heldBackCallback(page, 'bob');
    callback.searchParams.set('code', spent);
    await assertRefused(page, await page.goto(callback.href), REASON.spentCode);
  });

  for (const mode of ['wrong-nonce', 'expired', 'bad-signature', 'wrong-audience']) {
    test(`refused: an ID token from the provider in mode ${mode}`, async () => {
      const { page, response } = await signInWithMode(mode);
      await assertRefused(page, response, REASON[mode]);
    });
  }
});
