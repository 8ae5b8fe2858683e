// Accessibility audits with axe-core: its script evaluated in the page as it is,
// run over the whole document for WCAG 2.0 and 2.1, levels A and AA.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
// Read once: every audit injects the same few hundred kB.
const AXE_SOURCE = readFileSync(require.resolve('axe-core/axe.min.js'), 'utf8');

/** The rules of these tags only: the best-practice ones (landmarks, heading
 *  order) are advice, not the standard the pages are held to. */
const TAGS = ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa'];
/** Enough of each violation's elements to find it; the count says the rest. */
const NODES_SHOWN = 3;
const HTML_SHOWN = 200;

/** axe-core's results for the document in `page` (injected first if this
 *  document has none: a navigation drops it). */
export async function axeResults(page) {
  if (!(await page.evaluate(() => typeof window.axe === 'object'))) {
    // Evaluated through the DevTools protocol, as an extension would: the
    // pages' Content-Security-Policy lets no inline <script> run that lacks
    // their nonce, an injected one included (and is tested as it is).
    await page.evaluate(AXE_SOURCE);
  }
  return page.evaluate((values) => window.axe.run(document, { runOnly: { type: 'tag', values } }), TAGS);
}

/** One line per rule broken, then where: selector, markup and what axe
 *  measured (a contrast ratio says more than "insufficient contrast"). */
export function describeViolations(name, violations) {
  const lines = [`${name}: ${violations.length} accessibility violation(s)`];
  for (const v of violations) {
    lines.push(`- ${v.id} (${v.impact}): ${v.help} [${v.helpUrl}]`);
    for (const node of v.nodes.slice(0, NODES_SHOWN)) {
      const html = node.html.length > HTML_SHOWN ? `${node.html.slice(0, HTML_SHOWN)}…` : node.html;
      lines.push(`    ${node.target.join(' >>> ')}`);
      lines.push(`      ${html.replace(/\s+/g, ' ')}`);
      const why = [...node.any, ...node.all, ...node.none].map((c) => c.message).find(Boolean);
      if (why) lines.push(`      ${why}`);
    }
    if (v.nodes.length > NODES_SHOWN) lines.push(`    …and ${v.nodes.length - NODES_SHOWN} more`);
  }
  return lines.join('\n');
}

/** Audits the document in `page` (hydrated: the markup the visitor gets)
 *  and fails, naming it `name`, on any violation; the full results else. */
export async function audit(page, name) {
  const results = await axeResults(page);
  assert.ok(results.violations.length === 0, describeViolations(name, results.violations));
  return results;
}
