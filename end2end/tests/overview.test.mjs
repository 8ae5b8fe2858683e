// The cluster overview: server-rendered, hydrated, and live.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { BASE_URL, launch, openPage, screenshot, sim, waitForHydration } from '../lib/browser.mjs';

let browser;
before(async () => { browser = await launch(); });
after(async () => {
  await sim.node('pve3', 'online');
  await browser?.close();
});

test('overview shows the three nodes and the VMs, hydrates, and follows the cluster live', async () => {
  const { page, errors } = await openPage(browser);
  await page.goto(BASE_URL + '/');
  await waitForHydration(page);

  const cards = page.locator('article.node-card');
  assert.equal(await cards.count(), 3);
  assert.deepEqual(await cards.locator('h2').allTextContents(), ['pve1', 'pve2', 'pve3']);
  for (const id of [101, 102, 103, 104, 105, 110]) {
    assert.equal(await page.locator(`tr[data-vmid="${id}"]`).count(), 1, `VM ${id} listed`);
  }
  // Containers and templates are not VMs pvedeck manages.
  assert.equal(await page.locator('tr[data-vmid="200"], tr[data-vmid="9000"]').count(), 0);
  // 110 was made by go-pve-qemu: listed, marked, no actions (MANAGE=pvedeck).
  const monitor = page.locator('tr[data-vmid="110"]');
  assert.equal(await monitor.locator('.unmanaged').textContent(), 'not managed by pvedeck');
  assert.equal(await monitor.locator('button').count(), 0);
  assert.ok(await page.locator('tr[data-vmid="101"] button').count() > 0);

  // The page reacts to a click (it is hydrated, not just HTML).
  await page.getByRole('button', { name: 'Running' }).click();
  await page.locator('tr[data-vmid="103"]').waitFor({ state: 'detached' });
  assert.equal(await page.locator('tr[data-vmid="101"]').count(), 1);
  await page.getByRole('button', { name: 'All' }).click();
  await page.locator('tr[data-vmid="103"]').waitFor();

  // A change to the cluster after the page loaded shows up without a reload.
  await page.evaluate(() => { window.__sameDocument = true; });
  const pve3 = page.locator('article.node-card[data-node="pve3"] .badge');
  assert.equal(await pve3.textContent(), 'online');
  await sim.node('pve3', 'offline');
  await page.locator('article.node-card[data-node="pve3"] .badge', { hasText: 'offline' }).waitFor();
  await page.locator('tr[data-vmid="110"] .badge', { hasText: 'unknown' }).waitFor();
  assert.equal(await page.evaluate(() => window.__sameDocument), true, 'no reload happened');

  await screenshot(page, 'overview');
  assert.deepEqual(errors, []);
});

test('overview reads fine with JavaScript off', async () => {
  const { page, errors } = await openPage(browser, { javaScriptEnabled: false });
  const res = await page.goto(BASE_URL + '/');
  assert.equal(res.status(), 200);
  assert.equal(await page.locator('article.node-card').count(), 3);
  assert.equal(await page.locator('tr[data-vmid="102"] td').nth(1).textContent(), 'db-01-102');
  assert.equal(await page.locator('main').getAttribute('data-hydrated'), 'false');
  await screenshot(page, 'overview-no-js');
  // With scripting off Chromium cancels the module preload; nothing else may fail.
  assert.deepEqual(errors.filter((e) => !e.endsWith('/pkg/pvedeck.js')), []);
});

test('an unknown page is a 404 page, in the app layout', async () => {
  const { page, errors } = await openPage(browser);
  const res = await page.goto(BASE_URL + '/no/such/page');
  assert.equal(res.status(), 404);
  await waitForHydration(page);
  await page.getByRole('heading', { name: /404/ }).waitFor();
  await screenshot(page, 'not-found');
  // The document itself answered 404; Chromium logs that as a console error.
  assert.deepEqual(errors.filter((e) => !e.includes('404')), []);
});
