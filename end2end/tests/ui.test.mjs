// The browser UI on the simulated cluster: create a VM and watch it, the
// overview's actions, the VM page, the job history; every test fails on a
// browser console error and leaves a screenshot.
import { after, afterEach, before, test } from 'node:test';
import assert from 'node:assert/strict';
import {
  BASE_URL, getJson, launch, openPage, post, postJson, screenshot, sim, vmAddress, waitForHydration,
} from '../lib/browser.mjs';

let browser;
before(async () => { browser = await launch(); });
afterEach(async () => { await sim.clearFaults(); });
after(async () => { await browser?.close(); });

/** Fills the create form's name and submits; resolves on the job's URL. */
async function createVm(page, name) {
  await page.goto(BASE_URL + '/new');
  await waitForHydration(page);
  await page.fill('#name', name);
  await page.getByRole('button', { name: 'Create VM' }).click();
  await page.waitForURL(/\/new\?job=\d+$/);
}

test('create a VM through the form and watch its timeline to the end', async () => {
  const { page, errors } = await openPage(browser);
  await createVm(page, 'web');
  const result = page.locator('.result-ok');
  await result.waitFor({ timeout: 60_000 });
  assert.equal(await page.locator('.step[data-step="finalizing"].step-done').count(), 1);
  const stages = await page.locator('.stage h3').allTextContents();
  assert.deepEqual(stages, ['preparation', 'OS preparation', 'SSH preparation', 'VM creation', 'VM initialization']);
  const vmid = await result.locator('.vmid').textContent();
  assert.match(vmid, /^\d{3}$/);
  assert.equal(await result.locator('.ip').textContent(), vmAddress(vmid));
  assert.equal(await result.locator('.copy-line code').textContent(), `ssh debian@${vmAddress(vmid)}`);
  // Relayed command output is folded under its step.
  const output = page.locator('.step[data-step="SSH initialization"] details.step-output');
  await output.locator('summary').click();
  assert.match(await output.locator('pre').textContent(), /\[pvedeck\] initialization complete/);
  await screenshot(page, 'create-done');
  assert.deepEqual(errors, []);
});

test('a reload mid-install replays the timeline and follows it on', async () => {
  // The import takes 5 s of real time: long enough to reload during it.
  await sim.fault({ op: 'importdisk', action: 'delay', delay_ms: 250_000, times: 1 });
  const { page, errors } = await openPage(browser);
  await createVm(page, 'reload');
  await page.locator('.step[data-step="importing disk image"]').waitFor();
  const url = page.url();
  await page.reload();
  await waitForHydration(page);
  // The steps so far came back with the page, before anything new arrived.
  assert.equal(await page.locator('.step[data-step="checking VMID"].step-done').count(), 1);
  assert.equal(await page.locator('.result').count(), 0, 'the job still runs');
  assert.equal(await page.locator('.timeline[data-live="true"]').count(), 1, 'and is followed live');
  // A live install as the README shows it: the import under way, with the
  // steps done before it above.
  await page.locator('.step[data-step="importing disk image"]').scrollIntoViewIfNeeded();
  await screenshot(page, 'install-live', { fullPage: false });
  await page.locator('.result-ok').waitFor({ timeout: 60_000 });
  assert.equal(page.url(), url);
  assert.equal(await page.locator('.step[data-step="finalizing"]').count(), 1);
  await screenshot(page, 'reload-continued');
  assert.deepEqual(errors, []);
});

test('a failed install says which step failed and what became of the VM', async () => {
  const { page, errors } = await openPage(browser);

  await sim.fault({ op: 'importdisk', action: 'fail', times: 1 });
  await createVm(page, 'broken');
  const failed = page.locator('.result-failed');
  await failed.waitFor({ timeout: 60_000 });
  assert.match(await failed.locator('.failed-step').textContent(), /VM creation > importing disk image/);
  assert.match(await failed.locator('.failed-message').textContent(), /^\[-\] failed to import disk image/);
  assert.match(await failed.locator('.outcome').textContent(), /^VM \d+ was destroyed .*no half-made VM is left/);
  // A job that ended shows no step still running.
  assert.equal(await page.locator('.step-running').count(), 0);
  await screenshot(page, 'failure-destroyed');

  await sim.fault({ op: 'start', action: 'fail', times: 1 });
  await createVm(page, 'nostart');
  await failed.waitFor({ timeout: 60_000 });
  assert.match(await failed.locator('.failed-step').textContent(), /waiting for ready/);
  assert.match(await failed.locator('.outcome').textContent(), /^VM \d+ was kept for debugging/);
  // The cleanup that kept the VM ended with the job: done, not running.
  const keeping = page.locator('.step[data-step="keeping VM"]');
  assert.equal(await keeping.locator('.step-status').textContent(), 'done');
  assert.equal(await page.locator('.step-running').count(), 0);
  assert.equal(await page.locator('.timeline[data-live="false"]').count(), 1);
  await screenshot(page, 'failure-kept');
  assert.deepEqual(errors, []);
});

test('a field error shows next to its field and blocks the submit', async () => {
  const { page, errors } = await openPage(browser);
  const before = (await getJson('/api/jobs')).length;
  await page.goto(BASE_URL + '/new');
  await waitForHydration(page);
  await page.fill('#name', '-bad');
  await page.fill('#cpu', '999');
  assert.equal(
    await page.locator('#name-error').textContent(),
    "name '-bad' is not a valid host name (letters, digits and inner '-', at most 59)",
  );
  // What the install clamps, the form says it will clamp (the server's rule),
  // and does not refuse.
  assert.equal(await page.locator('#cpu-note').textContent(), 'will be clamped to 32');
  assert.equal(await page.locator('#cpu-error').textContent(), '');
  assert.equal(await page.locator('#cpu').getAttribute('aria-invalid'), 'false');
  await page.fill('#ram', '1.5');
  assert.equal(await page.locator('#ram-error').textContent(), 'ram must be an integer');
  assert.equal(await page.locator('#name').getAttribute('aria-invalid'), 'true');
  await page.getByRole('button', { name: 'Create VM' }).click();
  await page.locator('.form-error', { hasText: 'Fix the fields' }).waitFor();
  assert.equal(new URL(page.url()).search, '', 'no job was started');
  assert.equal((await getJson('/api/jobs')).length, before);
  await screenshot(page, 'field-errors');
  assert.deepEqual(errors, []);
});

test('stop, start and destroy from the overview', async () => {
  const { page, errors } = await openPage(browser);
  await page.goto(BASE_URL + '/');
  await waitForHydration(page);
  const badge = (id) => page.locator(`tr[data-vmid="${id}"] .badge`);

  assert.equal(await badge(104).textContent(), 'running');
  assert.equal(await page.getByRole('button', { name: 'Start VM 104' }).isDisabled(), true);
  await page.getByRole('button', { name: 'Stop VM 104' }).click();
  await page.locator('tr[data-vmid="104"] .badge', { hasText: 'stopped' }).waitFor();
  await page.locator('.note-ok', { hasText: 'Stop: VM 104 done' }).waitFor();

  await page.getByRole('button', { name: 'Start VM 104' }).click();
  await page.locator('.note-ok a', { hasText: 'follow job' }).waitFor();
  await page.locator('tr[data-vmid="104"] .badge', { hasText: 'running' }).waitFor();

  await page.getByRole('button', { name: 'Destroy VM 105' }).click();
  const confirm = page.locator('.confirm');
  assert.equal(await confirm.locator('span').textContent(), 'Destroy VM 105 "legacy-105" and purge its disks?');
  await screenshot(page, 'overview-confirm-destroy');
  await confirm.locator('button.danger').click();
  await page.locator('tr[data-vmid="105"]').waitFor({ state: 'detached' });
  const list = await getJson('/api/vm/list');
  assert.equal(list.list.some((vm) => vm.vmid === 105), false);
  await screenshot(page, 'overview-actions');
  assert.deepEqual(errors, []);
});

test('resize a stopped VM from its page, the limits checked as you type', async () => {
  const { page, errors } = await openPage(browser);
  await page.goto(BASE_URL + '/vm/103');
  await waitForHydration(page);
  assert.equal(await page.locator('.cpu').textContent(), '8');
  await page.fill('#new-cpu', '99');
  assert.equal(await page.locator('#new-cpu-error').textContent(), 'cpu must be an integer from 1 to 32');
  await page.fill('#new-cpu', '4');
  assert.equal(await page.locator('#new-cpu-error').textContent(), '');
  await page.getByRole('button', { name: 'Set vCPUs' }).click();
  await page.locator('.cpu', { hasText: /^4$/ }).waitFor();
  await page.fill('#grow-disk', '10');
  await page.getByRole('button', { name: 'Grow disk' }).click();
  await page.locator('.disk', { hasText: '74 GiB' }).waitFor();
  await screenshot(page, 'vm-resized');
  assert.deepEqual(errors, []);
});

test('starting a VM from its page fetches the job timeline then and follows the job', async () => {
  const { page, errors } = await openPage(browser);
  const fetched = [];
  page.on('request', (r) => { if (r.url().endsWith('.wasm')) fetched.push(r.url()); });
  await page.goto(BASE_URL + '/vm/103');
  await waitForHydration(page);
  // Its own module, or the bundle of what the page lacks of it (xtask/src/site/loader.rs).
  const panelModule = (url) => /\/(split|bundle)_job_panel_\d+[^/]*\.wasm$/.test(url);
  assert.equal(fetched.some(panelModule), false, 'the timeline is not part of the page load');
  await page.getByRole('button', { name: 'Start VM 103' }).click();
  const job = page.locator('.job[data-state="succeeded"]');
  await job.waitFor();
  assert.equal(await job.locator('.step[data-step="starting VM"]').count(), 1);
  assert.equal(fetched.some(panelModule), true, 'the timeline came when the job started');
  await page.locator('.vm-detail .badge', { hasText: 'running' }).waitFor();
  await screenshot(page, 'vm-started');
  assert.deepEqual(errors, []);
});

test('a refusal of the server shows as a message', async () => {
  const { page, errors } = await openPage(browser);
  await page.goto(BASE_URL + '/vm/101');
  await waitForHydration(page);
  // Someone else stops the VM after the page was drawn.
  await post('/api/vm/101/stop');
  await page.getByRole('button', { name: 'Stop VM 101' }).click();
  const note = page.locator('.note.error');
  await note.waitFor();
  assert.equal(await note.textContent(), 'Stop VM 101: VM is not running');
  await screenshot(page, 'vm-refused');
  assert.deepEqual(errors, []);
});

test('the job history lists every job and replays one', async () => {
  const { page, errors } = await openPage(browser);
  await page.goto(BASE_URL + '/jobs');
  await waitForHydration(page);
  const rows = page.locator('.jobs-table tbody tr');
  const jobs = await getJson('/api/jobs');
  assert.equal(await rows.count(), jobs.length);
  assert.equal(await rows.first().getAttribute('data-job'), String(jobs[0].id), 'newest first');
  const firstInstall = jobs.filter((j) => j.kind === 'install').at(-1);
  await page.locator(`tr[data-job="${firstInstall.id}"] a`).click();
  await page.waitForURL(new RegExp(`/jobs/${firstInstall.id}$`));
  await page.locator('.result-ok').waitFor();
  assert.equal(await page.locator('.step[data-step="finalizing"]').count(), 1);
  await screenshot(page, 'job-replayed');
  assert.deepEqual(errors, []);
});

test('pages fit a 390 px wide screen', async () => {
  const { page, errors } = await openPage(browser, { viewport: { width: 390, height: 844 } });
  for (const [path, name] of [['/', 'narrow-overview'], ['/new', 'narrow-new'], ['/vm/102', 'narrow-vm'], ['/templates', 'narrow-templates']]) {
    await page.goto(BASE_URL + path);
    await waitForHydration(page);
    const width = await page.evaluate(() => document.documentElement.scrollWidth);
    assert.ok(width <= 390, `${path} is ${width}px wide`);
    await screenshot(page, name);
  }
  assert.deepEqual(errors, []);
});

test('at 390 px the VMs are cards, their actions at hand', async () => {
  const { page, errors } = await openPage(browser, { viewport: { width: 390, height: 844 } });
  await page.goto(BASE_URL + '/');
  await waitForHydration(page);
  const wrap = page.locator('.vms .table-wrap');
  const overflow = await wrap.evaluate((w) => w.scrollWidth - w.clientWidth);
  assert.ok(overflow <= 0, `the VM list scrolls sideways by ${overflow}px`);
  const card = page.locator('tr[data-vmid="102"]');
  await card.scrollIntoViewIfNeeded();
  const box = await card.boundingBox();
  assert.ok(box.x >= 0 && box.x + box.width <= 390, `card from ${box.x} to ${box.x + box.width}`);
  assert.ok(box.height <= 200, `a card ${box.height}px tall`);
  // Name, state and figures are there, each figure with its word.
  assert.match(await card.locator('.vm-name').innerText(), /^db-01-102/);
  assert.equal(await card.locator('.badge').innerText(), 'running');
  const node = card.locator('td[data-label="Node"]');
  assert.equal(await node.innerText(), 'pve1');
  assert.match(await node.evaluate((td) => getComputedStyle(td, '::before').content), /^"Node/);
  const group = card.getByRole('group', { name: 'actions for VM 102' });
  const buttons = group.getByRole('button');
  assert.equal(await buttons.count(), 5);
  for (const button of await buttons.all()) {
    const b = await button.boundingBox();
    const name = await button.getAttribute('aria-label');
    assert.ok(await button.isVisible(), `${name} visible`);
    assert.ok(b.x >= box.x && b.x + b.width <= box.x + box.width, `${name} inside its card`);
    assert.ok(b.y >= box.y && b.y + b.height <= box.y + box.height, `${name} inside its card`);
    // Nothing lies over it: a click at its middle reaches it (the boxes
    // are the viewport's, as elementFromPoint reads them).
    const hit = await page.evaluate(({ x, y }) => document.elementFromPoint(x, y)?.getAttribute('aria-label'),
      { x: b.x + b.width / 2, y: b.y + b.height / 2 });
    assert.equal(hit, name);
  }
  await screenshot(page, 'narrow-cards');
  await group.getByRole('button', { name: 'Reboot VM 102' }).click();
  await page.locator('.note-ok', { hasText: 'Reboot' }).waitFor();
  assert.deepEqual(errors, []);
});

test('with a ready template the form installs by linked clone and shows the host key', async () => {
  // postJson reads the whole stream: the template is built when it returns.
  await postJson('/api/templates', { os: 'ubuntu', version: '24.04' });
  const { page, errors } = await openPage(browser);
  await page.goto(BASE_URL + '/new');
  await waitForHydration(page);
  const note = page.locator('.method-note');
  assert.equal(await note.getAttribute('data-clone'), 'false');
  await page.selectOption('#os', 'ubuntu');
  await page.selectOption('#version', '24.04');
  assert.equal(await note.textContent(), 'A linked clone of template tpl-ubuntu-24.04: ready in seconds.');
  await page.fill('#name', 'cloned');
  await page.getByRole('button', { name: 'Create VM' }).click();
  await page.waitForURL(/\/new\?job=\d+$/);
  const result = page.locator('.result-ok');
  await result.waitFor({ timeout: 60_000 });
  const stages = await page.locator('.stage h3').allTextContents();
  assert.deepEqual(stages, ['preparation', 'template', 'SSH preparation', 'VM creation', 'VM initialization']);
  assert.equal(await page.locator('.step[data-step="cloning template"].step-done').count(), 1);
  const fingerprint = await result.locator('.host-key').textContent();
  assert.match(fingerprint, /^SHA256:[A-Za-z0-9+/]{43}$/);
  await screenshot(page, 'create-by-clone');
  // The VM's page shows the key SSH will require there.
  await result.getByRole('link', { name: "Open the VM's page" }).click();
  await page.waitForURL(/\/vm\/\d+$/);
  assert.equal(await page.locator('.vm-detail .host-key').textContent(), fingerprint);
  assert.deepEqual(errors, []);
});

test('the templates page builds a template, shows its age and image, and rebuilds it', async () => {
  const { page, errors } = await openPage(browser);
  await page.goto(BASE_URL + '/templates');
  await waitForHydration(page);
  // Rocky Linux 9: a release no other test builds a template of.
  const row = page.locator('tr[data-release="rockylinux 9"]');
  assert.equal(await row.locator('.badge').textContent(), 'not built');
  await row.getByRole('button', { name: 'Build the template of rockylinux 9' }).click();
  const note = page.locator('.note-ok');
  await note.waitFor();
  assert.match(await note.textContent(), /^building the template of rockylinux 9 — follow job #\d+$/);
  // The table reads the server again by itself: building, then ready.
  await row.locator('.badge.tpl-ready').waitFor({ timeout: 60_000 });
  assert.equal(await row.getAttribute('data-template'), 'tpl-rockylinux-9');
  const cells = row.locator('td');
  assert.equal(await cells.nth(3).textContent(), 'just now');
  assert.match(await cells.nth(4).textContent(), /\.qcow2$/);
  const first = await row.getAttribute('data-vmid');
  // The note follows the build to its end: no job to follow once it is ready.
  await page.locator('.note-ok', {
    hasText: `building the template of rockylinux 9: done — tpl-rockylinux-9 (VM ${first}) is ready`,
  }).waitFor();
  assert.equal(await page.getByText(/follow job #\d+$/).count(), 0);
  // Every button of the table looks alike: Build as Rebuild and Delete.
  const look = (button) => button.evaluate((b) => {
    const s = getComputedStyle(b);
    return [s.fontSize, s.padding, s.borderRadius, s.borderColor, s.backgroundColor, s.color, s.cursor].join(' | ');
  });
  const build = page.getByRole('button', { name: /^Build the template of / }).first();
  const rebuild = row.getByRole('button', { name: `Rebuild template ${first}` });
  assert.equal(await look(build), await look(rebuild));
  const [buildBox, rebuildBox] = [await build.boundingBox(), await rebuild.boundingBox()];
  assert.equal(Math.round(buildBox.height), Math.round(rebuildBox.height), 'Build is as tall as Rebuild');
  await screenshot(page, 'templates');

  // A rebuild makes a new one; the old one, with no linked clone, goes.
  await row.getByRole('button', { name: `Rebuild template ${first}` }).click();
  await page.getByText(`rebuilding template ${first} — follow job #`).waitFor();
  const rebuilt = page.locator(
    `tr[data-release="rockylinux 9"]:not([data-vmid="${first}"]) .badge.tpl-ready`,
  );
  await rebuilt.waitFor({ timeout: 60_000 });
  await page.locator(`tr[data-vmid="${first}"]`).waitFor({ state: 'detached' });
  await page.getByText(new RegExp(`^rebuilding template ${first}: done — tpl-rockylinux-9 \\(VM \\d+\\) is ready$`)).waitFor();
  const listed = await getJson('/api/templates');
  assert.ok(!listed.some((t) => String(t.vmid) === first), JSON.stringify(listed));
  assert.deepEqual(errors, []);
});
