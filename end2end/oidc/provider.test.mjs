// The test OpenID provider itself, no pvedeck involved: the code flow a
// client like pvedeck runs, over plain fetch with PKCE, state and nonce; the
// claims in the ID token; each way setMode spoils it; a code used twice;
// holdBack; the sign-in form in Chromium; the command line the Rust tests start.
// Run from end2end/: `node --test oidc/` (not part of `node --test tests/`).
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createHash, createPublicKey, randomBytes, verify } from 'node:crypto';
import { once } from 'node:events';
import { createServer } from 'node:http';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { launch, openPage } from '../lib/browser.mjs';
import { startProvider } from './provider.mjs';

const CLIENT = 'pvedeck';
const SECRET = 's3cret';
const SCOPE = 'openid profile email groups';

// The client's side: a redirect URI where a tiny server notes each callback.
let callbacks;
let redirectUri;
let provider;
let endpoints;

before(async () => {
  callbacks = await callbackServer();
  redirectUri = `${callbacks.origin}/auth/callback`;
  provider = await startProvider({
    clients: [{ client_id: CLIENT, client_secret: SECRET, redirect_uris: [redirectUri] }],
  });
  endpoints = await (await fetch(`${provider.issuer}/.well-known/openid-configuration`)).json();
});

after(async () => {
  await provider?.close();
  await callbacks?.close();
});

/** Answers every request with a line of text and keeps the query of each
 *  one to /auth/callback: what a client gets back from the provider. */
async function callbackServer() {
  const queries = [];
  const server = createServer((req, res) => {
    const url = new URL(req.url, 'http://127.0.0.1');
    if (url.pathname === '/auth/callback') queries.push(url.searchParams);
    res.setHeader('content-type', 'text/plain');
    res.end('callback received');
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return {
    origin: `http://127.0.0.1:${server.address().port}`,
    last: () => queries.at(-1),
    close: async () => {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

/** A fresh authorization request: its URL and what the client keeps. */
function authorizationRequest({ scope = SCOPE, pkce = true } = {}) {
  const verifier = randomBytes(32).toString('base64url');
  const state = randomBytes(16).toString('base64url');
  const nonce = randomBytes(16).toString('base64url');
  const url = new URL(endpoints.authorization_endpoint);
  url.search = new URLSearchParams({
    client_id: CLIENT, response_type: 'code', scope, redirect_uri: redirectUri, state, nonce,
    ...(pkce && {
      code_challenge: createHash('sha256').update(verifier).digest('base64url'),
      code_challenge_method: 'S256',
    }),
  });
  return { url: url.href, verifier, state, nonce };
}

/** Follows redirects by hand like a browser (cookies included) until one
 *  leads to the redirect URI, which is then loaded; its query. `step`, when
 *  given, answers a page that is not a redirect (a form) with the next request. */
async function follow(url, step) {
  const cookies = new Map();
  let request = { url, init: {} };
  for (let hops = 0; hops < 10; hops += 1) {
    const res = await fetch(request.url, {
      ...request.init,
      redirect: 'manual',
      headers: { ...request.init.headers, cookie: [...cookies].map(([k, v]) => `${k}=${v}`).join('; ') },
    });
    for (const line of res.headers.getSetCookie()) {
      const [pair] = line.split(';');
      const eq = pair.indexOf('=');
      cookies.set(pair.slice(0, eq), pair.slice(eq + 1));
    }
    const location = res.headers.get('location');
    if (location) {
      const next = new URL(location, request.url).href;
      if (next.startsWith(redirectUri)) {
        await fetch(next); // the client's own server sees the callback
        return callbacks.last();
      }
      request = { url: next, init: {} };
    } else {
      if (!step) assert.fail(`${res.status} at ${request.url} without a redirect: ${await res.text()}`);
      request = await step(res, request.url);
    }
  }
  throw new Error('too many redirects');
}

/** The code for a request, checked the way a client checks the callback. */
async function codeFor(request, step) {
  const query = await follow(request.url, step);
  assert.equal(query.get('error'), null, query.get('error_description'));
  assert.equal(query.get('state'), request.state);
  assert.equal(query.get('iss'), provider.issuer);
  return query.get('code');
}

/** POST to the token endpoint; `auth` 'basic' or 'post' (the client's secret
 *  in the Authorization header or in the form). */
async function exchange(code, verifier, { auth = 'basic' } = {}) {
  const form = new URLSearchParams({
    grant_type: 'authorization_code', code, redirect_uri: redirectUri, code_verifier: verifier,
  });
  const headers = { 'content-type': 'application/x-www-form-urlencoded' };
  if (auth === 'basic') {
    headers.authorization = `Basic ${Buffer.from(`${CLIENT}:${SECRET}`).toString('base64')}`;
  } else {
    form.set('client_id', CLIENT);
    form.set('client_secret', SECRET);
  }
  const res = await fetch(endpoints.token_endpoint, { method: 'POST', headers, body: form });
  return { status: res.status, body: await res.json() };
}

function decode(jwt) {
  const [header, payload] = jwt.split('.').slice(0, 2)
    .map((part) => JSON.parse(Buffer.from(part, 'base64url').toString()));
  return { header, payload };
}

/** Whether the JWT's RS256 signature verifies with the provider's published key of its kid. */
async function verifies(jwt) {
  const { keys } = await (await fetch(endpoints.jwks_uri)).json();
  const { header } = decode(jwt);
  const jwk = keys.find((k) => k.kid === header.kid);
  assert.ok(jwk, `a published key has kid ${header.kid}`);
  assert.equal(header.alg, 'RS256');
  const [h, p, s] = jwt.split('.');
  return verify('sha256', Buffer.from(`${h}.${p}`), createPublicKey({ key: jwk, format: 'jwk' }), Buffer.from(s, 'base64url'));
}

/** An ID token for `name` through the whole code flow with the provider in `mode`. */
async function idTokenFor(name, mode = 'normal') {
  provider.autoLogin(name);
  provider.setMode(mode);
  try {
    const request = authorizationRequest();
    const token = await exchange(await codeFor(request), request.verifier);
    assert.equal(token.status, 200, JSON.stringify(token.body));
    return { request, idToken: token.body.id_token, ...decode(token.body.id_token) };
  } finally {
    provider.setMode('normal');
    provider.autoLogin(null);
  }
}

test('discovery: code flow, S256 only, secret basic and post, a groups scope', () => {
  assert.equal(endpoints.issuer, provider.issuer);
  assert.match(provider.issuer, /^http:\/\/127\.0\.0\.1:\d+$/);
  assert.deepEqual(endpoints.response_types_supported, ['code']);
  assert.deepEqual(endpoints.code_challenge_methods_supported, ['S256']);
  assert.deepEqual(endpoints.token_endpoint_auth_methods_supported.sort(), ['client_secret_basic', 'client_secret_post']);
  for (const scope of SCOPE.split(' ')) assert.ok(endpoints.scopes_supported.includes(scope), scope);
  assert.ok(endpoints.id_token_signing_alg_values_supported.includes('RS256'));
});

test('auto-login: the code flow gives an ID token with the claims and groups, properly signed', async () => {
  const { request, idToken, header, payload } = await idTokenFor('alice');
  assert.equal(header.alg, 'RS256');
  assert.equal(payload.iss, provider.issuer);
  assert.equal(payload.aud, CLIENT);
  assert.equal(payload.nonce, request.nonce);
  assert.equal(payload.sub, 'alice');
  assert.equal(payload.preferred_username, 'alice');
  assert.equal(payload.email, 'alice@example.test');
  assert.deepEqual(payload.groups, ['dev']);
  assert.ok(payload.exp > Date.now() / 1000);
  assert.ok(await verifies(idToken));
});

test('client_secret_post is accepted as well as client_secret_basic', async () => {
  provider.autoLogin('bob');
  try {
    const request = authorizationRequest();
    const token = await exchange(await codeFor(request), request.verifier, { auth: 'post' });
    assert.equal(token.status, 200, JSON.stringify(token.body));
    assert.deepEqual(decode(token.body.id_token).payload.groups, ['dev', 'qa']);
  } finally {
    provider.autoLogin(null);
  }
});

test('a code is good once; a wrong verifier or no PKCE at all is refused', async () => {
  provider.autoLogin('alice');
  try {
    const request = authorizationRequest();
    const code = await codeFor(request);
    assert.equal((await exchange(code, request.verifier)).status, 200);
    const again = await exchange(code, request.verifier);
    assert.equal(again.status, 400);
    assert.equal(again.body.error, 'invalid_grant');

    const other = authorizationRequest();
    const wrong = await exchange(await codeFor(other), randomBytes(32).toString('base64url'));
    assert.equal(wrong.body.error, 'invalid_grant');

    const query = await follow(authorizationRequest({ pkce: false }).url);
    assert.equal(query.get('error'), 'invalid_request');
    assert.match(query.get('error_description'), /PKCE/);
  } finally {
    provider.autoLogin(null);
  }
});

test('each mode spoils the ID token in its one way', async () => {
  const now = Date.now() / 1000;

  const nonce = await idTokenFor('alice', 'wrong-nonce');
  assert.notEqual(nonce.payload.nonce, nonce.request.nonce);
  assert.ok(await verifies(nonce.idToken), 'signed with the real key');

  const expired = await idTokenFor('alice', 'expired');
  assert.ok(expired.payload.exp < now - 3000, `exp ${expired.payload.exp} an hour ago`);
  assert.ok(expired.payload.iat < expired.payload.exp);
  assert.ok(await verifies(expired.idToken), 'signed with the real key');

  const forged = await idTokenFor('alice', 'bad-signature');
  assert.equal(forged.payload.nonce, forged.request.nonce, 'the claims are fine');
  assert.equal(forged.payload.aud, CLIENT);
  assert.equal(await verifies(forged.idToken), false, 'the signature is not the provider\'s');

  const audience = await idTokenFor('alice', 'wrong-audience');
  assert.equal(audience.payload.aud, 'someone-else');
  assert.ok(await verifies(audience.idToken), 'signed with the real key');

  // And 'normal' again leaves it alone.
  const normal = await idTokenFor('carol');
  assert.deepEqual(normal.payload.groups, ['pvedeck-admins']);
  assert.ok(await verifies(normal.idToken));
});

test('holdBack: the way back to the client becomes a link to follow (or change)', async () => {
  provider.autoLogin('alice');
  provider.holdBack(true);
  try {
    const request = authorizationRequest();
    const res = await fetch(request.url, { redirect: 'manual' });
    assert.equal(res.status, 200);
    const href = /class="held-back-callback" href="([^"]+)"/.exec(await res.text())[1]
      .replace(/&#(\d+);/g, (_, code) => String.fromCharCode(code));
    const callback = new URL(href);
    assert.equal(`${callback.origin}${callback.pathname}`, redirectUri);
    assert.equal(callback.searchParams.get('state'), request.state);
    assert.equal((await exchange(callback.searchParams.get('code'), request.verifier)).status, 200);
  } finally {
    provider.holdBack(false);
    provider.autoLogin(null);
  }
});

test('without auto-login the sign-in form asks who; an unknown name is told so', async () => {
  const request = authorizationRequest();
  const forms = [];
  // Fill the form: a stranger first, then carol.
  const code = await codeFor(request, async (res, url) => {
    const html = await res.text();
    assert.equal(res.status, 200, html);
    assert.match(html, /<form class="login" method="post"/);
    forms.push(html);
    const login = forms.length === 1 ? 'mallory' : 'carol';
    return {
      url,
      init: {
        method: 'POST',
        headers: { 'content-type': 'application/x-www-form-urlencoded' },
        body: new URLSearchParams({ login, password: 'anything', action: 'login' }).toString(),
      },
    };
  });
  assert.match(forms[1], /No account &#39;mallory&#39;/);
  const token = await exchange(code, request.verifier);
  assert.equal(decode(token.body.id_token).payload.preferred_username, 'carol');
});

test('Chromium signs in through the form by its login name; Cancel comes back as access_denied', async () => {
  const browser = await launch();
  try {
    const { page, errors } = await openPage(browser);
    const request = authorizationRequest();
    await page.goto(request.url);
    await page.fill('input[name="login"]', 'bob');
    await page.click('button[value="login"]');
    await page.waitForURL((url) => url.href.startsWith(redirectUri));
    const query = new URL(page.url()).searchParams;
    assert.equal(query.get('state'), request.state);
    const token = await exchange(query.get('code'), request.verifier);
    assert.deepEqual(decode(token.body.id_token).payload.groups, ['dev', 'qa']);

    // The provider remembers bob in this browser; a new context forgets him.
    const other = await openPage(browser);
    await other.page.goto(authorizationRequest().url);
    await other.page.click('button[value="cancel"]');
    await other.page.waitForURL((url) => url.href.startsWith(redirectUri));
    assert.equal(new URL(other.page.url()).searchParams.get('error'), 'access_denied');
    assert.deepEqual([...errors, ...other.errors], []);
  } finally {
    await browser.close();
  }
});

test('the command line: one JSON line, /__test/mode, gone on SIGTERM or when stdin closes', async () => {
  const start = () => {
    const child = spawn(process.execPath, [
      fileURLToPath(new URL('./provider.mjs', import.meta.url)),
      '--port', '0', '--client-id', CLIENT, '--client-secret', SECRET,
      '--redirect', redirectUri, '--auto-login', 'alice',
    ], { stdio: ['pipe', 'pipe', 'inherit'] });
    const lines = [];
    const stdout = createInterface({ input: child.stdout });
    stdout.on('line', (line) => lines.push(line));
    return { child, lines, first: once(stdout, 'line'), exited: once(child, 'exit') };
  };

  const cli = start();
  const [first] = await cli.first;
  const { issuer } = JSON.parse(first);
  assert.match(issuer, /^http:\/\/127\.0\.0\.1:\d+$/);

  const discovery = await (await fetch(`${issuer}/.well-known/openid-configuration`)).json();
  assert.equal(discovery.issuer, issuer);
  const res = await fetch(`${issuer}/__test/mode`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ mode: 'expired', auto_login: null }),
  });
  assert.deepEqual(await res.json(), { mode: 'expired', auto_login: null });
  const bad = await fetch(`${issuer}/__test/mode`, { method: 'POST', body: '{"mode":"nonsense"}' });
  assert.equal(bad.status, 400);

  cli.child.kill('SIGTERM');
  assert.deepEqual(await cli.exited, [0, null]);
  assert.deepEqual(cli.lines, [first], 'nothing else on stdout');

  const piped = start();
  await piped.first;
  piped.child.stdin.end();
  assert.deepEqual(await piped.exited, [0, null]);
});
