// A real OpenID Connect provider (npm oidc-provider) for pvedeck's sign-in
// tests: code flow with PKCE S256 only, three accounts with groups, a plain
// sign-in form of its own (no consent screen, nothing fetched from the
// internet), and switches that make it misbehave on purpose — an ID token
// with the wrong nonce, expired, badly signed or for someone else — so the
// tests can prove pvedeck refuses each.
//
// As a module: `startProvider({ port, clients })`. As a program (for the Rust
// tests): see `main()` at the bottom. Loopback only, in memory, for tests only.
import { createServer } from 'node:http';
import { createPrivateKey, generateKeyPairSync, randomBytes, randomUUID, sign } from 'node:crypto';
import { fstatSync, realpathSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import Provider from 'oidc-provider';

/** Who can sign in (any password); `sub` and `preferred_username` are the name. */
export const ACCOUNTS = {
  alice: { groups: ['dev'] },
  bob: { groups: ['dev', 'qa'] },
  carol: { groups: ['pvedeck-admins'] },
};

/** What `setMode` accepts: how the token endpoint spoils the ID token. */
export const MODES = ['normal', 'wrong-nonce', 'expired', 'bad-signature', 'wrong-audience'];

const HOST = '127.0.0.1';

/** An RS256 signing key as a private JWK; `kid` given so that a forged key
 *  can carry the real one's. */
function rsaKey(kid) {
  const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  return { ...privateKey.export({ format: 'jwk' }), kid, alg: 'RS256', use: 'sig' };
}

const b64url = (value) => Buffer.from(typeof value === 'string' ? value : JSON.stringify(value)).toString('base64url');

/** A compact JWS of `header` and `payload` signed RS256 with the private JWK. */
function signJwt(header, payload, jwk) {
  const input = `${b64url(header)}.${b64url(payload)}`;
  const signature = sign('sha256', Buffer.from(input), createPrivateKey({ key: jwk, format: 'jwk' }));
  return `${input}.${signature.toString('base64url')}`;
}

function decodeJwt(jwt) {
  const [header, payload] = jwt.split('.').slice(0, 2)
    .map((part) => JSON.parse(Buffer.from(part, 'base64url').toString()));
  return { header, payload };
}

/** The ID token as `mode` spoils it. Every variant but 'bad-signature' is
 *  signed again with the provider's real key, so that only the one defect
 *  shown can be the reason a client refuses it. */
function tamper(idToken, mode, realKey, forgedKey) {
  const { header, payload } = decodeJwt(idToken);
  const now = Math.floor(Date.now() / 1000);
  switch (mode) {
    case 'wrong-nonce':
      return signJwt(header, { ...payload, nonce: `not-${payload.nonce ?? 'a-nonce'}` }, realKey);
    case 'expired':
      // Two hours old and dead for an hour: beyond any clock-skew allowance.
      return signJwt(header, { ...payload, iat: now - 7200, auth_time: now - 7200, exp: now - 3600 }, realKey);
    case 'bad-signature':
      return signJwt(header, payload, forgedKey);
    case 'wrong-audience':
      return signJwt(header, { ...payload, aud: 'someone-else' }, realKey);
    default:
      return idToken;
  }
}

const escapeHtml = (text) => String(text).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);

/** A page without outside resources (oidc-provider's own pull in web fonts,
 *  which a browser test would count as failed requests). */
function page(title, body) {
  return `<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><link rel="icon" href="data:,"><title>${escapeHtml(title)}</title>
<style>body{font-family:sans-serif;max-width:28em;margin:3em auto}label{display:block;margin:.5em 0}.error{color:#b00}</style>
</head><body><main>${body}</main></body></html>`;
}

function loginPage(uid, client, error) {
  return page('Test OpenID provider: sign in', `
<h1>Sign in</h1>
<p>Test OpenID provider for <strong>${escapeHtml(client)}</strong>. Accounts: ${Object.keys(ACCOUNTS).join(', ')}; any password.</p>
${error ? `<p class="error" role="alert">${escapeHtml(error)}</p>` : ''}
<form class="login" method="post" action="/interaction/${escapeHtml(uid)}" autocomplete="off">
  <label>Login <input type="text" name="login" required autofocus></label>
  <label>Password <input type="password" name="password"></label>
  <button type="submit" name="action" value="login">Sign in</button>
  <button type="submit" name="action" value="cancel" formnovalidate>Cancel</button>
</form>`);
}

async function readBody(req) {
  const chunks = [];
  for await (const chunk of req) chunks.push(chunk);
  return Buffer.concat(chunks).toString();
}

/** oidc-provider's Account for a known name, else undefined. */
function findAccount(_ctx, sub) {
  const account = ACCOUNTS[sub];
  if (!account) return undefined;
  return {
    accountId: sub,
    async claims() {
      return { sub, preferred_username: sub, email: `${sub}@example.test`, groups: [...account.groups] };
    },
  };
}

/**
 * Starts a provider on 127.0.0.1:`port` (0: any free port).
 * `clients`: [{ client_id, client_secret, redirect_uris }] — confidential web
 * clients; either client_secret_basic or client_secret_post authenticates.
 * `controlRoute`: also serve `POST /__test/mode` (the command line's switch).
 * Resolves to { issuer, setMode(mode), autoLogin(nameOrNull), holdBack(on), close() }.
 */
export async function startProvider({ port = 0, clients, controlRoute = false }) {
  const server = createServer();
  await new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, HOST, resolve);
  });
  const issuer = `http://${HOST}:${server.address().port}`;

  // Our own signing key, not oidc-provider's built-in development one, so the
  // tampering below can sign with it; the forged key claims the same kid.
  const realKey = rsaKey(`test-${randomUUID()}`);
  const forgedKey = rsaKey(realKey.kid);

  let mode = 'normal';
  let autoLoginAs = null;
  let holdingBack = false;
  const redirectUris = new Set(clients.flatMap((c) => c.redirect_uris));

  const provider = new Provider(issuer, {
    clients: clients.map(({ client_id, client_secret, redirect_uris }) => ({
      client_id,
      client_secret,
      redirect_uris,
      application_type: 'web', // http://127.0.0.1 redirect URIs are fine for a web client's code flow
      grant_types: ['authorization_code'],
      response_types: ['code'],
      token_endpoint_auth_method: 'client_secret_basic', // client_secret_post is accepted too
    })),
    responseTypes: ['code'],
    clientAuthMethods: ['client_secret_basic', 'client_secret_post'],
    jwks: { keys: [realKey] },
    cookies: { keys: [randomBytes(32).toString('hex')] },
    findAccount,
    // Each key is a scope, its claims what it releases.
    claims: {
      openid: ['sub'],
      profile: ['preferred_username'],
      email: ['email'],
      groups: ['groups'],
    },
    // Claims asked for through `scope` go into the ID token itself, not only
    // the userinfo endpoint: pvedeck reads the groups from the ID token.
    conformIdTokenClaims: false,
    pkce: { methods: ['S256'], required: () => true },
    features: {
      devInteractions: { enabled: false }, // the form below instead
      rpInitiatedLogout: { enabled: true, logoutSource, postLogoutSuccessSource },
    },
    interactions: { url: (_ctx, interaction) => `/interaction/${interaction.uid}` },
    // No consent screen: every OpenID scope and claim asked for is granted.
    async loadExistingGrant(ctx) {
      const grant = new ctx.oidc.provider.Grant({
        accountId: ctx.oidc.session.accountId,
        clientId: ctx.oidc.client.clientId,
      });
      grant.addOIDCScope([...ctx.oidc.requestParamOIDCScopes].join(' '));
      grant.addOIDCClaims([...ctx.oidc.requestParamClaims]);
      await grant.save();
      return grant;
    },
    // The validator of a parameter nobody sends: oidc-provider runs it on
    // every authorization request after loading the browser's session and
    // before deciding whether to ask anyone to log in — the one place to log
    // `autoLogin`'s account in without a form, so that GET /auth answers with
    // the redirect carrying the code straight away.
    extraParams: {
      async x_test_auto_login(ctx) {
        if (autoLoginAs && ctx.oidc.route === 'authorization') {
          ctx.oidc.session.loginAccount({ accountId: autoLoginAs, transient: true });
        }
      },
    },
    // Short, fixed lifetimes (setting them also quiets oidc-provider's notices).
    ttl: { AccessToken: 600, AuthorizationCode: 60, IdToken: 600, Interaction: 600, Session: 3600, Grant: 3600 },
    clientBasedCORS: () => false,
    renderError(ctx, out) {
      ctx.type = 'html';
      ctx.body = page('Test OpenID provider: error', `<h1>Error</h1>${Object.entries(out)
        .map(([key, value]) => `<p><strong>${escapeHtml(key)}</strong>: ${escapeHtml(value)}</p>`).join('')}`);
    },
  });

  // The sign-in form (GET shows it, POST logs in or cancels).
  provider.use(async (ctx, next) => {
    const match = /^\/interaction\/([^/]+)$/.exec(ctx.path);
    if (!match) return next();
    const details = await provider.interactionDetails(ctx.req, ctx.res);
    if (details.uid !== match[1]) ctx.throw(400, 'interaction mismatch');
    ctx.set('cache-control', 'no-store');
    const client = details.params.client_id;
    if (ctx.method === 'GET') {
      ctx.type = 'html';
      ctx.body = loginPage(details.uid, client);
      return undefined;
    }
    if (ctx.method !== 'POST') ctx.throw(405);
    const form = new URLSearchParams(await readBody(ctx.req));
    let result;
    if (form.get('action') === 'cancel') {
      result = { error: 'access_denied', error_description: 'End-User cancelled the sign-in' };
    } else if (ACCOUNTS[form.get('login')]) {
      result = { login: { accountId: form.get('login') } };
    } else {
      ctx.type = 'html';
      ctx.status = 200;
      ctx.body = loginPage(details.uid, client, `No account '${form.get('login')}'.`);
      return undefined;
    }
    const returnTo = await provider.interactionResult(ctx.req, ctx.res, result, { mergeWithLastSubmission: false });
    ctx.status = 303;
    ctx.redirect(returnTo);
    return undefined;
  });

  // The token endpoint's answer, spoiled as `mode` says. Runs after
  // oidc-provider has built the JSON body and before Koa sends it.
  provider.use(async (ctx, next) => {
    await next();
    if (ctx.method === 'POST' && ctx.path === '/token' && ctx.status === 200
        && mode !== 'normal' && typeof ctx.body?.id_token === 'string') {
      ctx.body = { ...ctx.body, id_token: tamper(ctx.body.id_token, mode, realKey, forgedKey) };
    }
  });

  // The answer that sends the browser back to the client, made a page with
  // a link instead while `holdBack` is on. A browser test cannot stop that
  // redirect itself: Playwright's page.route sees only the first request of
  // a chain of redirects, and this one is always a later one.
  provider.use(async (ctx, next) => {
    await next();
    const location = ctx.response.get('location');
    if (!holdingBack || ![302, 303].includes(ctx.status) || !redirectUris.has(location.split('?')[0])) return;
    ctx.remove('location');
    ctx.status = 200;
    ctx.type = 'html';
    ctx.body = page('Test OpenID provider: held back', `<h1>Held back</h1>
<p>The way back to the client: <a class="held-back-callback" href="${escapeHtml(location)}">${escapeHtml(location)}</a></p>`);
  });

  const control = {
    setMode(next) {
      if (!MODES.includes(next)) throw new Error(`unknown mode '${next}' (one of ${MODES.join(', ')})`);
      mode = next;
    },
    autoLogin(name) {
      if (name !== null && !ACCOUNTS[name]) throw new Error(`unknown account '${name}'`);
      autoLoginAs = name;
    },
    /** While on, the provider shows the redirect back to the client as a
     *  link `a.held-back-callback` rather than following it (for a test to
     *  change the callback URL, or use it twice). */
    holdBack(on) {
      holdingBack = Boolean(on);
    },
  };

  if (controlRoute) {
    // For tests only (the command line's): lets a test in another process
    // switch the mode and auto-login. Bound to loopback like the rest.
    provider.use(async (ctx, next) => {
      if (ctx.path !== '/__test/mode') return next();
      if (ctx.method !== 'POST') ctx.throw(405);
      let body;
      try {
        body = JSON.parse(await readBody(ctx.req));
        if ('mode' in body) control.setMode(body.mode);
        if ('auto_login' in body) control.autoLogin(body.auto_login);
      } catch (err) {
        ctx.throw(400, err.message);
      }
      ctx.body = { mode, auto_login: autoLoginAs };
      return undefined;
    });
  }

  server.on('request', provider.callback());

  return {
    issuer,
    ...control,
    /** Stops listening and drops open connections (browsers keep them alive). */
    async close() {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

// RP-initiated logout without oidc-provider's pages (web fonts again): the
// question is answered "yes" by the page itself, as no test wants to stop there.
async function logoutSource(ctx, form) {
  ctx.type = 'html';
  ctx.body = page('Test OpenID provider: sign out', `${form}
<button type="submit" form="op.logoutForm" name="logout" value="yes">Sign out</button>
<script>document.querySelector('button[name=logout]').click()</script>`);
}

async function postLogoutSuccessSource(ctx) {
  ctx.type = 'html';
  ctx.body = page('Test OpenID provider: signed out', '<h1>Signed out</h1>');
}

/**
 * `node oidc/provider.mjs --port 0 --client-id pvedeck --client-secret s3cret
 *    --redirect http://127.0.0.1:9999/auth/callback [--redirect …] [--auto-login alice]`
 * prints `{"issuer":"http://127.0.0.1:<port>"}` once listening, and nothing
 * else on stdout; exits on SIGTERM/SIGINT or when its stdin (a pipe) closes,
 * so it cannot outlive the test that started it.
 */
async function main() {
  const { values } = parseArgs({
    options: {
      port: { type: 'string', default: '0' },
      'client-id': { type: 'string' },
      'client-secret': { type: 'string' },
      redirect: { type: 'string', multiple: true },
      'auto-login': { type: 'string' },
    },
  });
  if (!values['client-id'] || !values['client-secret'] || !values.redirect) {
    throw new Error('usage: provider.mjs --port N --client-id ID --client-secret SECRET --redirect URI [--auto-login NAME]');
  }
  // oidc-provider's notices go to console.info; stdout is the JSON line's alone.
  console.info = console.error;
  console.log = console.error;
  const provider = await startProvider({
    port: Number(values.port),
    clients: [{
      client_id: values['client-id'],
      client_secret: values['client-secret'],
      redirect_uris: values.redirect,
    }],
    controlRoute: true,
  });
  if (values['auto-login']) provider.autoLogin(values['auto-login']);

  const stop = async () => {
    await provider.close();
    process.exit(0);
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
  // Only a pipe's end means the parent is gone; /dev/null ends at once.
  const stdin = fstatSync(0);
  if (stdin.isFIFO() || stdin.isSocket()) {
    process.stdin.on('end', stop).on('close', stop).resume();
  }
  process.stdout.write(`${JSON.stringify({ issuer: provider.issuer })}\n`);
}

if (process.argv[1] && realpathSync(process.argv[1]) === realpathSync(fileURLToPath(import.meta.url))) {
  main().catch((err) => {
    console.error(err.message);
    process.exit(1);
  });
}
