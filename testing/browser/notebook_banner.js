// gpuslice's notebook pages in a real browser (run by tests/jupyterhub/hub_test.py, which
// started the hub, the daemon and the user's server, and owns the timing).
// Env: HUB_URL, NB_USER, NB_PASSWORD, ART (the screenshot directory); for `banner` also NB_FILE
// (the notebook on disk). Usage: node notebook_banner.js form|banner
//   form    the spawn form: presets offered; a bad value comes back on the form, next to its
//           field, with what was typed kept (not an HTTP 500); screenshot spawn-form-error.png.
//   banner  opens banner.ipynb through the proxy, edits it with autosave off; the GPU goes idle
//           (the test is told by "EDITED"); the warning's banner with its countdown, the edit
//           saved by the banner; "Keep my session" -> the "kept" state; a second edit, the
//           second warning saves it too; no keep -> "stopping", then "stopped": when, after how
//           long idle, files kept, in the hub's words, with Jupyter's dead-kernel dialog closed
//           (screenshot notebook-reclaimed.png); the hub's home page says the same
//           (hub-home-reclaimed.png).
const fs = require('fs');
const path = require('path');
const { chromium } = require('playwright-core');

const env = (k) => { if (!process.env[k]) throw new Error(`${k} unset`); return process.env[k]; };
const MARK1 = 'print("edited in the browser, saved by gpuslice")';
const MARK2 = 'print("edited again after keep, saved by the second warning")';

async function login(page, hub, user) {
  await page.goto(`${hub}/hub/login`);
  await page.fill('#username_input', user);
  await page.fill('#password_input', env('NB_PASSWORD'));
  await Promise.all([page.waitForNavigation(), page.click('#login_submit')]);
}

async function bannerState(page) {
  return page.evaluate(() => {
    const b = document.getElementById('gpuslice-banner');
    return b && b.style.display !== 'none' ? b.getAttribute('data-state') : 'hidden';
  });
}

async function waitState(page, want, timeout) {
  const end = Date.now() + timeout;
  let s;
  while (Date.now() < end) {
    s = await bannerState(page);
    if (s === want) return;
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error(`banner state ${s}, want ${want} (after ${timeout} ms)`);
}

async function form(page, hub, user, art) {
  await login(page, hub, user);
  const resp = await page.goto(`${hub}/hub/spawn/${user}`);
  if (resp.status() !== 200) throw new Error(`spawn form: HTTP ${resp.status()}`);
  const presets = await page.$$eval('input[name=preset]', (xs) => xs.map((x) => x.value));
  if (presets.length < 2) throw new Error(`presets offered: ${presets}`);
  await page.fill('#gs-fraction', '2');
  const [answer] = await Promise.all([page.waitForNavigation(), page.click('#spawn_form input[type=submit]')]);
  if (answer.status() >= 500) throw new Error(`a bad value answered HTTP ${answer.status()}`);
  const fieldError = await page.textContent('#gs-fraction-error');
  if (!/fraction '2'/.test(fieldError)) throw new Error(`no error under the field: ${fieldError}`);
  const kept = await page.inputValue('#gs-fraction');
  if (kept !== '2') throw new Error(`the typed value was not kept: ${kept}`);
  const top = await page.textContent('.spawn-error-msg');
  console.log(`FORM: HTTP ${answer.status()}, presets ${presets.join(',')}; field: ${fieldError.trim()}; top: ${top.trim()}`);
  await page.screenshot({ path: path.join(art, 'spawn-form-error.png'), fullPage: true });
}

async function edit(page, mark) {
  await page.evaluate((m) => {
    Jupyter.notebook.get_cell(0).set_text(m);
    Jupyter.notebook.set_dirty(true);
  }, mark);
}

async function banner(page, hub, user, art) {
  const file = env('NB_FILE');
  await login(page, hub, user);
  await page.goto(`${hub}/user/${user}/notebooks/banner.ipynb`);
  await page.waitForFunction(() => window.Jupyter && Jupyter.notebook && Jupyter.notebook._fully_loaded &&
                             Jupyter.notebook.kernel && Jupyter.notebook.kernel.is_connected(),
                             null, { timeout: 60000 });
  const loaded = await page.evaluate(() => require.defined && require.defined('nbextensions/gpuslice/main'));
  if (!loaded) throw new Error('the gpuslice nbextension was not loaded');
  await page.evaluate(() => Jupyter.notebook.set_autosave_interval(0));  // only gpuslice's saves write
  await edit(page, MARK1);
  console.log('EDITED');  // the test makes the GPU idle now
  const t0 = Date.now();
  // 1. The warning, its countdown, the save.
  await waitState(page, 'warning', 60000);
  const countdown = await page.textContent('#gpuslice-countdown');
  if (!/Stopping in \d+:\d\d\./.test(countdown)) throw new Error(`no countdown: ${countdown}`);
  const text = await page.textContent('#gpuslice-text');
  if (!/kernel state/.test(text) || !/files stay/.test(text)) throw new Error(`banner text: ${text}`);
  await page.waitForFunction(() => /Notebook saved/.test(document.querySelector('#gpuslice-note').textContent),
                             null, { timeout: 10000 });
  if (!fs.readFileSync(file, 'utf8').includes('saved by gpuslice')) throw new Error('the first edit is not on disk');
  await page.screenshot({ path: path.join(art, 'notebook-banner.png') });
  console.log(`WARNED after ${((Date.now() - t0) / 1000).toFixed(1)}s idle: "${countdown}" ${text}`);
  // 2. "Keep my session": the kept state, no stale countdown, no Keep button.
  await page.click('#gpuslice-keep');
  await waitState(page, 'kept', 10000);
  const keptNote = await page.textContent('#gpuslice-note');
  if (!/warned again only after/.test(keptNote)) throw new Error(`kept note: ${keptNote}`);
  if (await page.isVisible('#gpuslice-keep')) throw new Error('Keep button still shown after keeping');
  console.log(`KEEP: ${keptNote}`);
  // 3. A second edit; the second warning saves it as well.
  await edit(page, MARK2);
  await waitState(page, 'warning', 60000);
  await page.waitForFunction(() => /Notebook saved/.test(document.querySelector('#gpuslice-note').textContent),
                             null, { timeout: 10000 });
  if (!fs.readFileSync(file, 'utf8').includes('saved by the second warning')) throw new Error('the second edit is not on disk');
  console.log('SECOND WARNING saved the second edit');
  // 4. No keep: stopping, then stopped (the banner keeps the states it went through), told
  // why and that files are kept.
  await waitState(page, 'stopped', 90000);
  const seen = await page.getAttribute('#gpuslice-banner', 'data-seen');
  if (!/warning stopping stopped$/.test(seen)) throw new Error(`the banner went ${seen}, want ... warning stopping stopped`);
  console.log(`STATES: ${seen}`);
  await page.waitForFunction(() => /idle/.test(document.querySelector('#gpuslice-text').textContent) &&
                             /files are kept/.test(document.querySelector('#gpuslice-text').textContent) &&
                             /UTC/.test(document.querySelector('#gpuslice-text').textContent),
                             null, { timeout: 30000 })
    .catch(async (e) => { console.log('banner text: ' + await page.textContent('#gpuslice-text')); throw e; });
  const told = await page.textContent('#gpuslice-text');
  await new Promise((r) => setTimeout(r, 2000));  // Jupyter's own dialog would be up by now
  const dialogs = await page.$$eval('.modal', (ms) => ms.filter((m) => m.offsetParent !== null && getComputedStyle(m).display !== 'none').length);
  if (dialogs) throw new Error(`${dialogs} Jupyter dialog(s) still shown over the stopped notebook`);
  if (!(await page.isVisible('#gpuslice-home'))) throw new Error('no way back to the hub');
  await page.screenshot({ path: path.join(art, 'notebook-reclaimed.png') });
  console.log(`STOPPED: ${told}`);
  // 5. The hub's home page says the same.
  await page.goto(`${hub}/hub/home`);
  const home = await page.textContent('#gpuslice-notice');
  if (!/idle/.test(home) || !/files are kept/.test(home)) throw new Error(`hub home: ${home}`);
  await page.screenshot({ path: path.join(art, 'hub-home-reclaimed.png') });
  console.log(`HOME: ${home.replace(/\s+/g, ' ').trim()}`);
}

(async () => {
  const mode = process.argv[2];
  const hub = env('HUB_URL'), user = env('NB_USER'), art = env('ART');
  let page = null;
  const browser = await chromium.launch({ executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
                                          args: ['--no-sandbox', '--disable-gpu'] });
  try {
    page = await browser.newPage({ viewport: { width: 1200, height: 700 } });
    if (mode === 'form') await form(page, hub, user, art);
    else if (mode === 'banner') await banner(page, hub, user, art);
    else throw new Error(`mode ${mode}: expected form or banner`);
  } catch (e) {
    if (page) await page.screenshot({ path: path.join(art, `${mode}-failed.png`) }).catch(() => {});
    throw e;
  } finally {
    await browser.close();
  }
})().catch((e) => { console.error(e); process.exit(1); });
