// Accessibility: every page of the shared server (no sign-in) audited by
// axe-core for WCAG 2.1 A and AA once hydrated, at desktop width and on a
// 390 px wide phone, where it must not scroll sideways either. Every test
// fails on a browser console error.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { BASE_URL, getJson, launch, openPage, waitForHydration } from '../lib/browser.mjs';
import { audit } from '../lib/axe.mjs';

const NARROW = { width: 390, height: 844 };

/** The first node of the cluster, as the server names it (the sim's names
 *  are its business, not this file's). */
async function firstNode() {
  const { cluster } = await getJson('/api/vm/list');
  const node = cluster?.[0]?.node;
  assert.ok(node, `the cluster lists a node: ${JSON.stringify(cluster)}`);
  return node;
}

// Each page by a name and its path, or how to learn it. VM 102 is one of
// the sim's demo VMs that no other test destroys.
const PAGES = [
  ['overview', '/'],
  ['new VM', '/new'],
  ['VM 102', '/vm/102'],
  ['templates', '/templates'],
  ['jobs', '/jobs'],
  ['login', '/login'],
  ['account', '/account'],
  ['users', '/users'],
  ['audit', '/audit'],
  ['node', async () => `/node/${await firstNode()}`],
];

let browser;
before(async () => { browser = await launch(); });
after(async () => { await browser?.close(); });

/** `path` opened in a fresh page of `viewport`, hydrated; closed when test
 *  `t` ends (the pages poll the server: twenty of them would add up). */
async function visit(t, path, viewport) {
  const { page, errors } = await openPage(browser, viewport ? { viewport } : {});
  t.after(() => page.context().close());
  await page.goto(BASE_URL + path);
  await waitForHydration(page);
  return { page, errors };
}

for (const [name, where] of PAGES) {
  const pathOf = async () => (typeof where === 'function' ? where() : where);

  test(`${name} page passes axe at desktop width`, async (t) => {
    const path = await pathOf();
    const { page, errors } = await visit(t, path);
    const results = await audit(page, `${path} (desktop)`);
    // The rule against pages that reload by themselves (WCAG 2.2.1) was
    // among those run: the node page once had one.
    const judged = [...results.passes, ...results.inapplicable].map((r) => r.id);
    assert.ok(judged.includes('meta-refresh'), `meta-refresh not run on ${path}`);
    assert.deepEqual(errors, []);
  });

  test(`${name} page passes axe at 390 px and does not scroll sideways`, async (t) => {
    const path = await pathOf();
    const { page, errors } = await visit(t, path, NARROW);
    // Two subtests: a page too wide still gets its audit reported.
    await t.test('no horizontal scroll', async () => {
      const width = await page.evaluate(() => document.documentElement.scrollWidth);
      assert.ok(width <= NARROW.width, `${path} is ${width}px wide`);
    });
    await t.test('axe', async () => { await audit(page, `${path} (390 px)`); });
    assert.deepEqual(errors, []);
  });
}
