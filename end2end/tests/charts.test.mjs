// Node history: sparklines on the node cards, and a node page
// with CPU, RAM, network and IO charts over hour/day/week — SVG drawn on
// the server, there with and without JavaScript.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { BASE_URL, launch, openPage, screenshot, waitForHydration } from '../lib/browser.mjs';

let browser;
before(async () => { browser = await launch(); });
after(async () => { await browser?.close(); });

async function chartsOf(page) {
  const charts = page.locator('figure.chart');
  const titles = await charts.locator('figcaption').allTextContents();
  const lines = await page.locator('figure.chart path.chart-line').evaluateAll(
    (paths) => paths.map((p) => p.getAttribute('d') || ''));
  const words = await charts.locator('.chart-words li').allTextContents();
  return { titles, lines, words };
}

test('node cards carry CPU and RAM sparklines; a card leads to its node page', async () => {
  const { page, errors } = await openPage(browser);
  await page.goto(BASE_URL + '/');
  await waitForHydration(page);
  const card = page.locator('article.node-card[data-node="pve1"]');
  const sparks = card.locator('.spark svg');
  assert.equal(await sparks.count(), 2);
  const labels = await sparks.evaluateAll((svgs) => svgs.map((s) => s.getAttribute('aria-label')));
  assert.match(labels[0], /^CPU, last hour: now [\d.]+%, average [\d.]+%, peak [\d.]+%$/);
  assert.match(labels[1], /^RAM, last hour: now /);
  const d = await card.locator('.spark path').first().getAttribute('d');
  assert.ok(d.split(' L').length >= 60, `an hour of points: ${d.slice(0, 40)}…`);

  await card.getByRole('link', { name: 'pve1: history' }).click();
  await page.waitForURL(BASE_URL + '/node/pve1');
  await waitForHydration(page);
  const hour = await chartsOf(page);
  assert.deepEqual(hour.titles, ['CPU', 'RAM', 'Network', 'Disk IO delay']);
  assert.equal(hour.lines.length, 5, 'network has in and out');
  assert.ok(hour.lines.every((l) => l.startsWith('M') && l.includes(' L')), 'every line drawn');
  assert.equal(await page.locator('.charts').getAttribute('data-points'), '70');
  assert.match(hour.words[0], /^CPU usage: now [\d.]+%, average/);
  assert.match(await page.locator('.chart-axis span').first().textContent(), /^69 min ago$/);

  await page.getByRole('navigation', { name: 'timeframe' }).getByRole('link', { name: 'week' }).click();
  await page.waitForURL(BASE_URL + '/node/pve1?tf=week');
  await waitForHydration(page);
  assert.equal(await page.locator('.charts').getAttribute('data-timeframe'), 'week');
  assert.equal(await page.locator('.timeframes a[aria-current="page"]').textContent(), 'week');
  assert.match(await page.locator('.chart-axis span').first().textContent(), /^8 d ago$/);
  await screenshot(page, 'node-page');
  assert.deepEqual(errors, []);
});

test('the node page reads fine with JavaScript off', async () => {
  const { page, errors } = await openPage(browser, { javaScriptEnabled: false });
  const res = await page.goto(BASE_URL + '/node/pve2?tf=day');
  assert.equal(res.status(), 200);
  const day = await chartsOf(page);
  assert.deepEqual(day.titles, ['CPU', 'RAM', 'Network', 'Disk IO delay']);
  assert.ok(day.lines.every((l) => l.startsWith('M')), 'drawn by the server');
  assert.equal(day.words.length, 5);
  assert.ok(day.words.every((w) => / now /.test(w)), day.words.join(' | '));
  assert.equal(await page.locator('main').getAttribute('data-hydrated'), 'false');
  await screenshot(page, 'node-page-no-js');
  assert.deepEqual(errors.filter((e) => !e.endsWith('/pkg/pvedeck.js')), []);
});

test('the node page redraws its charts in place every minute, and the reader can pause that', async () => {
  const { page, errors } = await openPage(browser);
  // The page's timer runs on a clock the test moves: a minute without waiting one.
  await page.clock.install();
  const reads = [];
  page.on('request', (r) => {
    if (r.resourceType() === 'fetch' && new URL(r.url()).pathname === '/node/pve1') reads.push(r.url());
  });
  await page.goto(BASE_URL + '/node/pve1?tf=hour');
  await waitForHydration(page);
  // No timed reload: it would lose the reader's place (WCAG 2.2.1).
  assert.equal(await page.locator('meta[http-equiv="refresh" i]').count(), 0);
  const mark = () => page.evaluate(() => {
    window.__sameDocument = true;
    document.querySelector('.charts').dataset.drawn = 'before';
  });
  await mark();

  await page.clock.runFor(61_000);
  // A fresh drawing from the server took the old one's place.
  await page.locator('.charts:not([data-drawn])').waitFor();
  assert.deepEqual(reads, [BASE_URL + '/node/pve1?tf=hour']);
  const redrawn = await chartsOf(page);
  assert.deepEqual(redrawn.titles, ['CPU', 'RAM', 'Network', 'Disk IO delay']);
  assert.ok(redrawn.lines.every((l) => l.startsWith('M') && l.includes(' L')), 'every line drawn');
  assert.equal(await page.locator('.charts').getAttribute('data-timeframe'), 'hour');
  assert.equal(await page.evaluate(() => window.__sameDocument), true, 'no reload happened');

  // Paused, a minute passes without a read; resumed, the next one comes.
  const pause = page.getByRole('button', { name: 'Pause updates' });
  assert.equal(await pause.getAttribute('aria-pressed'), 'false');
  await pause.click();
  assert.equal(await pause.getAttribute('aria-pressed'), 'true');
  await mark();
  await page.clock.runFor(61_000);
  assert.equal(reads.length, 1, 'no read while paused');
  assert.equal(await page.locator('.charts[data-drawn]').count(), 1);
  await pause.click();
  assert.equal(await pause.getAttribute('aria-pressed'), 'false');
  await page.clock.runFor(61_000);
  await page.locator('.charts:not([data-drawn])').waitFor();
  assert.equal(reads.length, 2);
  assert.equal(await page.evaluate(() => window.__sameDocument), true, 'no reload happened');
  assert.deepEqual(errors, []);
});

test('an unknown node says so', async () => {
  const { page } = await openPage(browser);
  await page.goto(BASE_URL + '/node/nope');
  await waitForHydration(page);
  assert.match(await page.locator('p.error').textContent(), /node 'nope' not found/);
});
