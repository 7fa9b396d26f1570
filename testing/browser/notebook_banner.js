// gpuslice's notebook banner in a real browser (run by tests/jupyterhub/hub_test.py, which
// started the hub, the daemon and the user's server, and owns the timing).
// Env: HUB_URL, NB_USER, NB_PASSWORD, NB_FILE (the notebook on disk), SCREENSHOT (png path).
// Logs in through the hub, opens banner.ipynb through the proxy, edits the cell with autosave
// off, waits for the idle warning's banner with its countdown, checks the text, that the
// notebook was saved to disk by the banner, and keeps a screenshot.
const fs = require('fs');
const { chromium } = require('playwright-core');

const env = (k) => { if (!process.env[k]) throw new Error(`${k} unset`); return process.env[k]; };
const MARK = 'print("edited in the browser, saved by gpuslice")';

(async () => {
  const hub = env('HUB_URL'), user = env('NB_USER'), file = env('NB_FILE'), shot = env('SCREENSHOT');
  let page = null;
  const browser = await chromium.launch({ executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
                                          args: ['--no-sandbox', '--disable-gpu'] });
  try {
    page = await browser.newPage({ viewport: { width: 1200, height: 700 } });
    await page.goto(`${hub}/hub/login`);
    await page.fill('#username_input', user);
    await page.fill('#password_input', env('NB_PASSWORD'));
    await Promise.all([page.waitForNavigation(), page.click('#login_submit')]);
    await page.goto(`${hub}/user/${user}/notebooks/banner.ipynb`);
    await page.waitForFunction(() => window.Jupyter && Jupyter.notebook && Jupyter.notebook._fully_loaded &&
                               Jupyter.notebook.kernel && Jupyter.notebook.kernel.is_connected(),
                               null, { timeout: 60000 });
    const loaded = await page.evaluate(() => require.defined && require.defined('nbextensions/gpuslice/main'));
    if (!loaded) throw new Error('the gpuslice nbextension was not loaded');
    await page.evaluate((mark) => {
      Jupyter.notebook.set_autosave_interval(0);  // only gpuslice's save may write the edit
      Jupyter.notebook.get_cell(0).set_text(mark);
      Jupyter.notebook.set_dirty(true);
    }, MARK);
    console.log('EDITED');  // the test makes the GPU idle now
    const t0 = Date.now();
    await page.waitForSelector('#gpuslice-banner', { state: 'visible', timeout: 60000 });
    const countdown = await page.textContent('#gpuslice-countdown');
    if (!/Stopping in \d+:\d\d\./.test(countdown)) throw new Error(`no countdown: ${countdown}`);
    const text = await page.textContent('#gpuslice-text');
    if (!/kernel state/.test(text) || !/files stay/.test(text)) throw new Error(`banner text: ${text}`);
    await page.waitForFunction(() => /Notebook saved/.test(document.querySelector('#gpuslice-note').textContent),
                               null, { timeout: 10000 });
    await page.screenshot({ path: shot });
    const disk = fs.readFileSync(file, 'utf8');
    if (!disk.includes('saved by gpuslice')) throw new Error('the edit is not on disk');
    // "Keep my session": the extension reports activity as the user (needs the daemon's
    // activity API; the test says which answer to expect).
    await page.click('#gpuslice-keep');
    await page.waitForFunction(() => /Activity reported|Could not report/.test(
      document.querySelector('#gpuslice-note').textContent), null, { timeout: 10000 });
    console.log('KEEP: ' + await page.textContent('#gpuslice-note'));
    console.log(`banner after ${((Date.now() - t0) / 1000).toFixed(1)}s idle: "${countdown}" ${text}`);
  } catch (e) {
    if (page) await page.screenshot({ path: shot.replace(/\.png$/, '') + '-failed.png' }).catch(() => {});
    throw e;
  } finally {
    await browser.close();
  }
})().catch((e) => { console.error(e); process.exit(1); });
