// The web dashboard in a real headless Chromium (Debian's /usr/bin/chromium, driven by
// playwright-core) against a real `gpuslice serve --simulate 8xH100-80GB` on TCP with a token
// file naming two users. Checks: the page loads (with its CSP), asks for a token on TCP,
// shows 8 devices, shows a newly submitted job without a reload, shows a pending job's
// reason, shows a hostile command as text (its onerror never runs), refuses another user's
// cancel with the daemon's reason, lets the owner cancel (the job becomes cancelled), shows
// the report where the daemon has one and says "report not available" where it has not.
// Leaves a screenshot at <artifacts>/ui.png.
//
// Usage: node ui_test.js <gpuslice binary> <artifacts dir>. Exit 77 (skipped) without
// chromium or playwright-core.
'use strict';

const fs = require('fs');
const os = require('os');
const path = require('path');
const net = require('net');
const { spawn } = require('child_process');

const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
let chromium;
try {
  ({ chromium } = require('playwright-core'));
} catch (e) {
  console.log('SKIP: playwright-core is not installed (cp -r /tmp/browser-node_modules testing/browser/node_modules, or npm ci)');
  process.exit(77);
}
if (!fs.existsSync(CHROMIUM)) {
  console.log(`SKIP: no chromium at ${CHROMIUM} (scripts/install-deps installs it)`);
  process.exit(77);
}

const [binary, artifacts] = process.argv.slice(2);
if (!binary || !artifacts) {
  console.error('usage: node ui_test.js <gpuslice binary> <artifacts dir>');
  process.exit(2);
}

const ALICE = 'alice-token-0123456789abcdef';
const BOB = 'bob-token-0123456789abcdef00';
const HOSTILE = '<img src=x onerror="window.__pwned=1">';

let failures = 0;
function check(cond, what) {
  if (cond) console.log(`ok   ${what}`);
  else { failures += 1; console.log(`FAIL ${what}`); }
}

function freePort() {
  return new Promise((resolve) => {
    const s = net.createServer();
    s.listen(0, '127.0.0.1', () => { const p = s.address().port; s.close(() => resolve(p)); });
  });
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Polls fn(arg) in the page until it is truthy. (Playwright's waitForFunction re-evaluates its
// predicate from a string while polling, which the page's CSP rightly forbids: no eval.)
async function waitFor(page, fn, arg, timeout = 10000) {
  const deadline = Date.now() + timeout;
  for (;;) {
    if (await page.evaluate(fn, arg)) return;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${fn}`);
    await sleep(100);
  }
}

async function main() {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'gsui-'));
  fs.mkdirSync(artifacts, { recursive: true });
  fs.writeFileSync(path.join(dir, 'gpuslice.toml'),
    '[queues.interactive]\ntime_limit = "1h"\n[queues.interactive.idle]\nwindow = "10m"\ngrace = "1m"\n' +
    '[queues.training]\n[queues.inference]\n');
  // Scripted utilisation (ids in submission order): the shared notebook at 35 %, the 2-GPU
  // training job at 90 %.
  fs.writeFileSync(path.join(dir, 'script.json'), JSON.stringify(
    { jobs: { 1: { sm: 35, memory: '6GiB' }, 4: { sm: 90, memory: '60GiB' } } }));
  fs.writeFileSync(path.join(dir, 'tokens'), `alice 1000 ${ALICE}\nbob 1001:1001 ${BOB}\n`, { mode: 0o600 });
  const port = await freePort();
  const base = `http://127.0.0.1:${port}`;
  const log = fs.openSync(path.join(artifacts, 'ui-serve.log'), 'w');
  const serve = spawn(binary, ['serve', '--simulate', '8xH100-80GB', '--state-dir', path.join(dir, 'state'),
    '--socket', path.join(dir, 'sock'), '--config', path.join(dir, 'gpuslice.toml'),
    '--simulate-script', path.join(dir, 'script.json'), '--tcp', `127.0.0.1:${port}`, '--token-file', path.join(dir, 'tokens'),
    '--grace', '1s', '--tick', '50ms', '--sample-interval', '200ms'], { stdio: ['ignore', log, log] });
  let browser;
  try {
    const call = async (method, p, token, body) => {
      const r = await fetch(base + p, {
        method, headers: { Authorization: `Bearer ${token}`, 'Content-Type': 'application/json' },
        body: body ? JSON.stringify(body) : undefined });
      return { status: r.status, headers: r.headers, body: await r.json().catch(() => null) };
    };
    let up = false;
    for (let i = 0; i < 100 && !up; i += 1) {
      try { up = (await call('GET', '/v1/health', ALICE)).status === 200; } catch (e) { await sleep(100); }
    }
    if (!up) throw new Error('gpuslice serve did not answer on TCP (see ui-serve.log)');
    const submit = async (token, body) => {
      const r = await call('POST', '/v1/jobs', token, { cwd: '/tmp', env: { PATH: '/usr/bin:/bin' }, ...body });
      if (r.status !== 201) throw new Error(`submit: ${r.status} ${JSON.stringify(r.body)}`);
      return r.body.job.id;
    };
    const job = async (id) => (await call('GET', `/v1/jobs/${id}`, ALICE)).body.job;

    // The page and its headers.
    const page0 = await fetch(`${base}/ui`);
    check(page0.status === 200, '/ui answers 200 without a token');
    const csp = page0.headers.get('content-security-policy') || '';
    check(csp.includes("script-src 'self'") && !csp.includes('unsafe-inline'), `CSP forbids inline script: ${csp}`);
    check(page0.headers.get('x-content-type-options') === 'nosniff', 'X-Content-Type-Options: nosniff');
    const jsonHead = await call('GET', '/v1/jobs', ALICE);
    check(jsonHead.headers.get('cache-control') === 'no-store', 'JSON views are not cached');

    browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox'] });
    const ctx = await browser.newContext({ viewport: { width: 1400, height: 900 } });
    const page = await ctx.newPage();
    const consoleErrors = [];
    // (The browser logs every 4xx answer as an error; those are expected here: 401 before the
    // token, 403 for bob, 404 where there is no report.)
    page.on('console', (m) => {
      if (m.type() === 'error' && !/Failed to load resource/.test(m.text())) consoleErrors.push(m.text());
    });
    page.on('pageerror', (e) => consoleErrors.push(String(e)));
    let dialogs = 0;
    page.on('dialog', (d) => { dialogs += 1; d.dismiss(); });

    await page.goto(`${base}/ui`);
    await waitFor(page, () => /bearer token/.test(document.getElementById('updated').textContent));
    check(true, 'without a token the page asks for one');
    // Cancel asks for a second click within 5 s (the page re-draws every 2 s; the armed state
    // survives that).
    const cancelTwice = async (r) => {
      await page.click(`${r} button.cancel`);
      await waitFor(page, (sel) => /Confirm/.test(document.querySelector(`${sel} button.cancel`).textContent), r, 3000);
      await page.click(`${r} button.cancel`);
    };
    const useToken = async (t) => {
      await page.fill('#token', t);
      await page.click('#token-form button[type=submit]');
    };
    await useToken(ALICE);
    await waitFor(page, () => document.querySelectorAll('#devices .card').length === 8, null, 10000);
    check(true, 'the page shows 8 devices');
    const firstCard = await page.textContent('#devices .card[data-device="0"]');
    check(/H100/.test(firstCard) && /mode/.test(firstCard), `device card: ${firstCard}`);

    // A newly submitted job (with a hostile command) appears without a reload.
    const running = await submit(ALICE, { argv: ['sh', '-c', 'sleep 600', HOSTILE], queue: 'interactive', gpu: '250m', mem: '10GiB' });
    const row = `#running tr[data-job="${running}"]`;
    await page.waitForSelector(row, 10000);
    check(true, `running job ${running} appeared without a reload`);
    const cmd = await page.textContent(`${row} td.cmd`);
    check(cmd.includes(HOSTILE), `the hostile command is shown as text: ${cmd}`);
    check(await page.locator('img').count() === 0, 'no <img> element was made from it');
    check(await page.evaluate(() => window.__pwned === undefined), 'its onerror never ran');
    await waitFor(page, (r) => /GPU/.test(document.querySelector(`${r} td:nth-child(6)`).textContent), row);
    const runText = await page.textContent(row);
    check(/0\.25 GPU/.test(runText), `running row shows what it holds: ${runText}`);

    // A pending job shows why it waits: all 8 whole devices while one is shared.
    const pending = await submit(ALICE, { argv: ['sleep', '600'], queue: 'training', kind: 'whole', gpus: 8 });
    const prow = `#pending tr[data-job="${pending}"]`;
    await page.waitForSelector(prow, 10000);
    await waitFor(page, (r) => !/not yet examined/.test(document.querySelector(`${r} td.reason`).textContent), prow, 10000);
    const reason = await page.textContent(`${prow} td.reason`);
    const apiReason = (await job(pending)).pending_reason;
    check(apiReason && reason === apiReason.message, `pending reason shown: "${reason}"`);

    // Another user is refused, and the page says why (the daemon's words).
    await useToken(BOB);
    await sleep(300);
    await cancelTwice(prow);
    await waitFor(page, () => /cancel refused/.test(document.getElementById('message').textContent), null, 10000)
      .catch(async (e) => { console.log('message:', await page.textContent('#message')); throw e; });
    const refused = await page.textContent('#message');
    const direct = await call('POST', `/v1/jobs/${pending}/cancel`, BOB);
    check(direct.status === 403 && refused.includes(direct.body.error.message),
          `another user is refused with the daemon's reason: ${refused}`);
    check((await job(pending)).state === 'pending', 'the job is still pending after the refusal');

    // The report: the daemon's own, with its verdict and totals.
    const rep = await call('GET', '/v1/report?since=1d&by=queue', ALICE);
    await waitFor(page, () => document.getElementById('report-1d').textContent.length > 0, null, 10000);
    const repText = await page.textContent('#report-1d');
    check(rep.status === 200, `the daemon answers its report: HTTP ${rep.status}`);
    {
      check(rep.body.verdict && typeof rep.body.verdict.text === 'string' && rep.body.verdict.text.length > 0 &&
            repText.includes(rep.body.verdict.text) && !repText.includes('[object Object]'),
            `report panel shows the daemon's verdict text: ${repText.slice(0, 200)}`);
      check(repText.includes('held_gpu_hours') && repText.includes(String(rep.body.totals.jobs)),
            `report panel shows the period's totals: ${repText.slice(0, 300)}`);
    }

    // The owner cancels from the page; the job becomes cancelled and leaves the list.
    await useToken(ALICE);
    await sleep(300);
    await cancelTwice(prow);
    let state = '';
    for (let i = 0; i < 100 && state !== 'cancelled'; i += 1) { state = (await job(pending)).state; await sleep(100); }
    check(state === 'cancelled', `the owner cancelled job ${pending} from the page (state ${state})`);
    await page.waitForSelector(prow, { state: 'detached', timeout: 10000 });
    check(true, 'the cancelled job left the pending list');
    check(dialogs === 0, 'no dialog was opened');

    // A job that is only waiting in another queue, so the screenshot shows a reason too.
    await submit(ALICE, { argv: ['python3', 'train.py', '--epochs', '90'], queue: 'training', kind: 'whole', gpus: 8 });
    await submit(ALICE, { argv: ['sleep', '600'], queue: 'training', kind: 'whole', gpus: 2 });
    await waitFor(page, () => document.querySelectorAll('#pending td.reason').length >= 1 &&
      [...document.querySelectorAll('#pending td.reason')].every((c) => !/not yet examined/.test(c.textContent)), null, 10000);
    // The chart over the last 5 minutes: the seconds since the daemon started are drawn, the
    // time before it is a gap (null buckets), not a line at 0.
    await page.click('button[data-minutes="5"]');
    await waitFor(page, () => /−5 min/.test(document.querySelector('#devices .card').textContent), null, 5000);
    await waitFor(page, () => /35/.test(document.querySelector('#running').textContent), null, 10000);
    await sleep(6000);  // a few 2.5 s buckets for the sparklines
    const spark = await page.evaluate(() => {
      const svg = document.querySelector('#devices .card[data-device="0"] svg');
      const m = /(\d+) of (\d+)/.exec(svg.querySelector('title').textContent);
      return { known: Number(m[1]), total: Number(m[2]), lines: svg.querySelectorAll('polyline').length };
    });
    check(spark.known >= 2 && spark.known < spark.total && spark.lines >= 1,
          `device 0's chart: ${spark.known} of ${spark.total} buckets measured, ${spark.lines} line(s)`);
    const used = await page.textContent(`${row} td:nth-child(7)`);
    check(/35 %/.test(used), `held vs used for the notebook: ${used}`);
    await page.screenshot({ path: path.join(artifacts, 'ui.png'), fullPage: true });
    console.log(`screenshot: ${path.join(artifacts, 'ui.png')}`);

    // A hostile report answer, replaced at the network edge: its verdict is drawn as text.
    await page.route('**/v1/report?*', (r) => r.fulfill({ status: 200, contentType: 'application/json',
      body: JSON.stringify({ verdict: { code: 'balanced', text: `8 GPUs: 71% held ${HOSTILE}` }, totals: { held_gpu_hours: 12.5 },
                             groups: [{ queue: 'training', held_gpu_hours: 10, used_gpu_hours: 3.25 }] }) }));
    await useToken(ALICE);  // also refreshes the report at once
    await waitFor(page, () => /71% held/.test(document.getElementById('report-7d').textContent), null, 10000);
    const fake = await page.textContent('#report-7d');
    check(fake.includes(HOSTILE) && fake.includes('training') && fake.includes('3.25'),
          `a 200 report is drawn (verdict as text, per-queue table): ${fake}`);
    check(await page.locator('img').count() === 0 && await page.evaluate(() => window.__pwned === undefined),
          'the hostile verdict ran nothing');
    // A report the daemon cannot give (here 503, e.g. no history yet) says so, with the status.
    await page.unroute('**/v1/report?*');
    await page.route('**/v1/report?*', (r) => r.fulfill({ status: 503, contentType: 'application/json',
      body: JSON.stringify({ error: { code: 'UNAVAILABLE', message: 'store busy' } }) }));
    await useToken(ALICE);
    await waitFor(page, () => /report not available \(HTTP 503/.test(document.getElementById('report-7d').textContent),
                  null, 10000);
    check(consoleErrors.length === 0, `no script errors or CSP violations: ${consoleErrors.join(' | ')}`);
  } finally {
    if (browser) await browser.close();
    serve.kill('SIGTERM');
    await new Promise((r) => { serve.on('exit', r); setTimeout(r, 5000); });
    fs.rmSync(dir, { recursive: true, force: true });
  }
  if (failures) { console.log(`${failures} check(s) failed`); process.exit(1); }
  console.log('all checks passed');
}

main().catch((e) => { console.error(e); process.exit(1); });
