// The node page's charts, read again in place every minute (Proxmox adds a
// row of history a minute at most). Not a page reload: a page that reloads
// itself loses the reader's place (WCAG 2.2.1; axe's `meta-refresh`). Not
// WASM either: an island on this page made every page's bundle larger
// (docs/development.md#bench-figures), and these lines cost no other page
// anything. The server draws the charts; this swaps its fresh drawing for
// the old one. Without JavaScript the page is whole as served, with its
// Reload link.
{
  const EVERY_MS = 60_000;
  const toggle = document.querySelector('button.charts-pause');
  let paused = false;

  // Charts that change by themselves can be stopped (WCAG 2.2.2).
  if (toggle) {
    toggle.hidden = false;
    toggle.addEventListener('click', () => {
      paused = !paused;
      toggle.setAttribute('aria-pressed', String(paused));
    });
  }

  async function refresh() {
    const charts = document.querySelector('.charts');
    if (!charts || paused || document.hidden) return;
    const answer = await fetch(location.href, { cache: 'no-store', credentials: 'same-origin' });
    if (!answer.ok) return;
    const page = new DOMParser().parseFromString(await answer.text(), 'text/html');
    const fresh = page.querySelector('.charts');
    // Signed out meanwhile, or the node went away: the charts shown stay.
    if (fresh) charts.replaceWith(document.adoptNode(fresh));
  }

  // One read at a time: the next is timed from the end of the last.
  function later() {
    setTimeout(() => refresh().catch(() => {}).finally(later), EVERY_MS);
  }
  later();
}
