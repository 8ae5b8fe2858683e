// The VM console page: the graphical console (noVNC) and the serial one
// (xterm.js), both through pvedeck's own WebSocket. Run on the sim lane
// and again on the api lane (the simulator's REST face, vncproxy and
// termproxy behind pvedeck).
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { BASE_URL, getJson, launch, openPage, post, screenshot } from '../lib/browser.mjs';
import { audit } from '../lib/axe.mjs';

let browser;
before(async () => { browser = await launch(); });
after(async () => { await browser?.close(); });

/** Whether the console's canvas shows anything but black. */
async function litPixels(page) {
  return page.evaluate(() => {
    const canvas = document.querySelector('#console-screen canvas');
    if (!canvas || canvas.width === 0) return 0;
    const data = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height).data;
    let lit = 0;
    for (let i = 0; i < data.length; i += 4) if (data[i] + data[i + 1] + data[i + 2] > 60) lit += 1;
    return lit;
  });
}

/** A digest of the canvas, to see it change. */
async function canvasDigest(page) {
  return page.evaluate(() => {
    const canvas = document.querySelector('#console-screen canvas');
    const data = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height).data;
    let h = 0;
    for (let i = 0; i < data.length; i += 1) h = (h * 31 + data[i]) | 0;
    return h;
  });
}

test('the graphical console draws the VM within a second and takes typed keys', { timeout: 60_000 }, async () => {
  const { page, errors } = await openPage(browser);
  const wasm = [];
  page.on('request', (r) => { if (new URL(r.url()).pathname.endsWith('.wasm')) wasm.push(r.url()); });
  const started = Date.now();
  await page.goto(`${BASE_URL}/vm/101/console`);
  await page.waitForFunction(() => {
    const canvas = document.querySelector('#console-screen canvas');
    if (!canvas || canvas.width === 0) return false;
    const data = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height).data;
    for (let i = 0; i < data.length; i += 4) if (data[i] + data[i + 1] + data[i + 2] > 60) return true;
    return false;
  }, null, { timeout: 10_000, polling: 'raf' });
  const firstFrame = Date.now() - started;
  console.log(`# console first frame ${firstFrame} ms after navigation`);
  assert.ok(firstFrame <= 1_000, `first frame after ${firstFrame} ms`);
  assert.ok((await litPixels(page)) > 100, 'text on the screen');
  assert.equal(await page.locator('#console-status').textContent(), 'Connected.');
  assert.equal(await page.locator('#console-cad').isDisabled(), false);
  const before = await canvasDigest(page);
  await page.locator('#console-screen canvas').click();
  await page.keyboard.type('root');
  await page.waitForFunction((b) => {
    const canvas = document.querySelector('#console-screen canvas');
    const data = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height).data;
    let h = 0;
    for (let i = 0; i < data.length; i += 1) h = (h * 31 + data[i]) | 0;
    return h !== b;
  }, before, { timeout: 10_000 });
  await screenshot(page, 'console-vnc');
  await audit(page, 'the graphical console');
  // The page hydrates no island of its own: the shell's main module (every
  // page's, cached) is the only WASM it fetches.
  assert.deepEqual(wasm.map((url) => new URL(url).pathname), ['/pkg/pvedeck_bg.wasm']);
  assert.deepEqual(errors, []);
});

test('the serial console shows the login prompt and echoes what is typed', { timeout: 60_000 }, async () => {
  const { page, errors } = await openPage(browser);
  await page.goto(`${BASE_URL}/vm/101/console?kind=serial`);
  const rows = page.locator('#console-screen .xterm-rows');
  await rows.filter({ hasText: 'login:' }).waitFor({ timeout: 10_000 });
  await page.locator('#console-screen').click();
  await page.keyboard.type('admin');
  await rows.filter({ hasText: 'login: admin' }).waitFor({ timeout: 10_000 });
  await screenshot(page, 'console-serial');
  await audit(page, 'the serial console');
  assert.deepEqual(errors, []);
});

test('on a 390 px phone the serial console fits: no sideways scroll', { timeout: 60_000 }, async () => {
  // VM 104: no other console test opens one of it (one per VM and user).
  const { page, errors } = await openPage(browser, { viewport: { width: 390, height: 844 } });
  await page.goto(`${BASE_URL}/vm/104/console?kind=serial`);
  await page.locator('#console-screen .xterm-rows').filter({ hasText: 'login:' }).waitFor({ timeout: 10_000 });
  const width = await page.evaluate(() => document.documentElement.scrollWidth);
  assert.ok(width <= 390, `the console page is ${width}px wide`);
  await audit(page, 'the serial console at 390 px');
  assert.deepEqual(errors, []);
});

test('a stopped VM\'s console page says so and opens no WebSocket', { timeout: 60_000 }, async () => {
  const { page, errors } = await openPage(browser);
  const sockets = [];
  page.on('websocket', (ws) => sockets.push(ws.url()));
  await page.goto(`${BASE_URL}/vm/103/console`);
  await page.waitForFunction(() => window.pvedeckConsole?.state === 'refused');
  assert.equal(
    await page.locator('#console-status').textContent(),
    'VM 103 is stopped: start it to use its console.',
  );
  assert.deepEqual(sockets, []);
  await audit(page, 'a stopped VM\'s console');
  assert.deepEqual(errors, []);
});

test('a console WebSocket from another site is refused', { timeout: 60_000 }, async () => {
  const { page } = await openPage(browser);
  // A page of no site of pvedeck's (its Origin is not this server's).
  await page.goto('about:blank');
  const outcome = await page.evaluate((target) => new Promise((resolve) => {
    let ws;
    try {
      ws = new WebSocket(`${target.replace('http', 'ws')}/api/vm/101/console`);
    } catch (e) {
      resolve(`refused: ${e}`);
      return;
    }
    ws.onopen = () => resolve('opened');
    ws.onclose = () => resolve('refused');
    setTimeout(() => resolve('no answer'), 20_000);
  }), BASE_URL);
  assert.match(outcome, /^refused/);
});

test('a console closes with the reason when its VM stops and is destroyed', { timeout: 120_000 }, async () => {
  const res = await fetch(`${BASE_URL}/api/vm/install`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ os: 'debian', version: '12', name: 'console' }),
  });
  await res.text();
  const job = await getJson(`/api/jobs/${res.headers.get('x-job-id')}`);
  assert.equal(job.state, 'succeeded');
  const mine = { vmid: job.vmid };
  const { page, errors } = await openPage(browser);
  await page.goto(`${BASE_URL}/vm/${mine.vmid}/console?kind=serial`);
  await page.locator('#console-screen .xterm-rows').filter({ hasText: 'login:' }).waitFor({ timeout: 10_000 });
  await post(`/api/vm/${mine.vmid}/stop`);
  await post(`/api/vm/${mine.vmid}/destroy`);
  await page.waitForFunction(() => window.pvedeckConsole?.state === 'closed');
  const said = await page.locator('#console-status').textContent();
  assert.match(said, new RegExp(`VM ${mine.vmid} (is stopped|was destroyed|no longer exists)`));
  assert.equal(await page.locator('#console-reconnect').isVisible(), true);
  await screenshot(page, 'console-closed');
  assert.deepEqual(errors, []);
});
