// The web dashboard in a real headless Chromium (Debian's /usr/bin/chromium, driven by
// playwright-core) against a real `gpuslice serve --simulate 8xH100-80GB` on TCP with a token
// file naming two users. One state of the dashboard after another (docs/ui.md, "Tests"):
//   the page and its headers; the token prompt; devices; a new job without a reload; a hostile
//   command as text; a waiting job's plain reason, place in the queue and the admin's line;
//   per-person caps; "used" by its one definition (a 250m slice at 30 % of its GPU used 0.25
//   GPU); idle apart from the time limit: idle with its warning time, kept by a notebook cell
//   (never a frozen "warning in 0s"), warned with its reclaim time, a training job's time-limit
//   warning in amber (never a red "reclaim in"); the same in `gpuslice top`; a MIG device with
//   its instances and what it holds; "mine" against "everyone's"; a refused and an allowed
//   cancel; recently ended jobs with how and why; the report in words (no raw keys, no µs),
//   day and week with their own periods, its charts, a verdict that weighs waits; the what-if
//   panel with the daemon's verdict once a token is given; no teams panel without [teams]. Then
//   a second daemon with [teams]: the teams panel's figures, bars, note, usage and rank, a
//   hostile teams answer as text, the config refusing hostile names (teamsPanel below).
// Leaves screenshots at <artifacts>/ui.png (docs/ui.png) and <artifacts>/ui-teams.png.
//
// Usage: node ui_test.js <gpuslice binary> <artifacts dir>. Exit 77 (skipped) without
// chromium or playwright-core.
'use strict';

const fs = require('fs');
const os = require('os');
const path = require('path');
const net = require('net');
const { spawn, spawnSync, execFileSync } = require('child_process');

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
const ROOT = 'root-token-0123456789abcdef0';  // an admin (uid 0)
const HOSTILE = '<img src=x onerror="window.__pwned=1">';
// Short idle windows so that every idle state shows within the test.
const WINDOW_S = 5, GRACE_S = 40;

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

const cellText = (page, job, cls) => page.textContent(`tr[data-job="${job}"] td.${cls}`);

// A `gpuslice serve` on TCP with the test's three tokens, its state, socket and config (TOML
// text) in `dir`, its log at <artifacts>/<name>.log; `args` add to its command line. Returns
// {base, sock, call, stop}: call(method, path, token, body) is the API as the token's holder;
// stop() ends the daemon's jobs, then the daemon.
async function startServe(dir, name, config, args) {
  fs.writeFileSync(path.join(dir, 'gpuslice.toml'), config);
  fs.writeFileSync(path.join(dir, 'tokens'), `alice 1000 ${ALICE}\nbob 1001:1001 ${BOB}\nroot 0 ${ROOT}\n`, { mode: 0o600 });
  const port = await freePort();
  const base = `http://127.0.0.1:${port}`;
  const sock = path.join(dir, 'sock');
  const log = fs.openSync(path.join(artifacts, `${name}.log`), 'w');
  const serve = spawn(binary, ['serve', '--state-dir', path.join(dir, 'state'), '--socket', sock,
    '--config', path.join(dir, 'gpuslice.toml'), '--tcp', `127.0.0.1:${port}`, '--token-file', path.join(dir, 'tokens'),
    ...args], { stdio: ['ignore', log, log] });
  const call = async (method, p, token, body) => {
    const r = await fetch(base + p, {
      method, headers: { Authorization: `Bearer ${token}`, 'Content-Type': 'application/json' },
      body: body ? JSON.stringify(body) : undefined });
    return { status: r.status, headers: r.headers, body: await r.json().catch(() => null) };
  };
  const stop = async () => {
    // The daemon leaves running jobs running when it stops (a restart must not kill work), so
    // this test ends its own first: no `sleep` of uid 1000 or 1001 outlives it, where another
    // test counting a uid's processes (the JupyterHub one's throwaway users) would find them.
    try {
      for (const j of ((await call('GET', '/v1/jobs?state=active', ROOT)).body || {}).jobs || []) {
        await call('POST', `/v1/jobs/${j.id}/cancel`, ROOT);
      }
      for (const deadline = Date.now() + 15000; Date.now() < deadline; await sleep(200)) {
        if ((((await call('GET', '/v1/jobs?state=active', ROOT)).body || {}).jobs || []).length === 0) break;
      }
    } catch (e) {
      console.log(`cleanup: ${e}`);
    }
    const exited = new Promise((r) => { serve.on('exit', r); setTimeout(r, 5000); });
    serve.kill('SIGTERM');
    await exited;
  };
  for (let i = 0; i < 100; i += 1) {
    try {
      if ((await call('GET', '/v1/health', ALICE)).status === 200) return { base, sock, call, stop };
    } catch (e) { /* not listening yet */ }
    await sleep(100);
  }
  await stop();
  throw new Error(`gpuslice serve did not answer on TCP (see ${name}.log)`);
}

// Submits a job (`sleep 600` unless body says otherwise) and returns its id.
async function submitJob(call, token, body) {
  const r = await call('POST', '/v1/jobs', token, { argv: ['sleep', '600'], cwd: '/tmp', env: { PATH: '/usr/bin:/bin' }, ...body });
  if (r.status !== 201) throw new Error(`submit: ${r.status} ${JSON.stringify(r.body)}`);
  return r.body.job.id;
}

// The teams panel (docs/teams.md) against a second daemon whose config has [teams], on 4
// simulated GPUs: vision (alice) guaranteed 1.5 in training, limit 2, holds 2 (500m borrowed) and
// waits for a third (its limit); nlp (root, weight 3) guaranteed 2 in training and 250m in
// interactive, holds 1 and lends; infra (a group) guaranteed 2, holds nothing, lends; bob's job
// is in no team (his uid has no name here, "uid:1001", which no team can list); 5.5 GPUs
// guaranteed on 4: a note. Then the panel drawing a hostile answer
// (replaced at the network edge) as text, and the config refusing such names in the first place.
async function teamsPanel(browser, dir, alice) {
  const config = '[queues.training]\n[queues.interactive]\n[teams]\nhalf_life = "7d"\n' +
    `[teams.vision]\nmembers = ["${alice}"]\nguarantee = { training = 1.5 }\nlimit = { training = 2 }\n` +
    '[teams.nlp]\nmembers = ["root"]\nguarantee = { training = 2, interactive = "250m" }\nweight = 3\n' +
    '[teams.infra]\nmembers = ["@gpuslice-infra"]\nguarantee = { training = 2 }\n';
  const d = await startServe(dir, 'ui-teams-serve', config, ['--simulate', '4xH100-80GB', '--grace', '1s', '--tick', '50ms']);
  const page = await (await browser.newContext({ viewport: { width: 1500, height: 900 } })).newPage();
  const errors = [];
  page.on('console', (m) => { if (m.type() === 'error' && !/Failed to load resource/.test(m.text())) errors.push(m.text()); });
  page.on('pageerror', (e) => errors.push(String(e)));
  try {
    const whole = (gpus) => ({ queue: 'training', kind: 'whole', gpus });
    await submitJob(d.call, ALICE, whole(2));
    await submitJob(d.call, ALICE, whole(1));  // past vision's limit: waits
    await submitJob(d.call, ROOT, whole(1));
    await submitJob(d.call, BOB, whole(1));   // bob is in no team
    let api = null;
    const queueOf = (team, queue) => ((api.teams.find((t) => t.name === team) || {}).queues || []).find((q) => q.queue === queue) || {};
    for (const deadline = Date.now() + 20000; ; await sleep(200)) {
      api = (await d.call('GET', '/v1/teams', ALICE)).body;
      if (queueOf('vision', 'training').held === 2000 && queueOf('vision', 'training').waiting === 1 &&
          queueOf('nlp', 'training').held === 1000 && (api.no_team[0] || {}).held === 1000) break;
      if (Date.now() > deadline) throw new Error(`the teams did not reach the scenario: ${JSON.stringify(api)}`);
    }

    await page.goto(`${d.base}/ui`);
    await page.fill('#token', ALICE);
    await page.click('#token-form button[type=submit]');
    // A cell of a team's row in a queue (by the rows' data, so that any name can be looked up).
    const cell = (team, queue, cls) => page.evaluate(([t, q, c]) => {
      const row = [...document.querySelectorAll('#teams tbody tr')].find((r) =>
        (t === null ? r.classList.contains('no-team') : r.dataset.team === t) && (q === null || r.dataset.queue === q));
      const e = row && row.querySelector(`.${c}`);
      return e ? { text: e.textContent, title: e.title, label: e.getAttribute('aria-label') || '' } : null;
    }, [team, queue, cls]);
    await waitFor(page, () => document.getElementById('teams-panel').dataset.enabled === 'true', null, 10000);
    check(await page.locator('#teams-panel').isVisible(), 'with [teams] the page shows the teams panel');
    const figures = async (team, queue) => {
      const out = [];
      for (const c of ['guaranteed', 'held', 'borrowed', 'lent', 'limit', 'waiting']) out.push((await cell(team, queue, c) || {}).text);
      return out.join(' ');
    };
    const expect = [['vision', 'training', '1.5 2 500m 0 2 1'], ['nlp', 'training', '2 1 0 1 none 0'],
      ['nlp', 'interactive', '250m 0 0 0 none 0'], ['infra', 'training', '2 0 0 1.5 none 0'], [null, 'training', '0 1 1 0 none 0']];
    for (const [team, queue, want] of expect) {
      const got = await figures(team, queue);
      check(got === want, `${team || '(no team)'} in ${queue}: guaranteed held borrowed lent limit waiting = ${got} (want ${want})`);
    }
    check((await cell('nlp', null, 'weight')).text === '3' && (await cell('nlp', null, 'members')).text === 'root',
          'nlp: weight 3 and its member');
    // The bar: the part past the guarantee is borrowed, drawn hatched (not only another colour),
    // the limit a mark; a team within its guarantee has no borrowed part.
    const bar = (team, queue) => page.evaluate(([t, q]) => {
      const row = [...document.querySelectorAll('#teams tbody tr')].find((r) => r.dataset.team === t && r.dataset.queue === q);
      const b = row.querySelector('.team-bar');
      const part = (c) => { const e = b.querySelector(`.${c}`); return e ? e.getBoundingClientRect().width : null; };
      const borrowed = b.querySelector('.borrowed');
      return { label: b.getAttribute('aria-label'), within: part('within'), borrowed: part('borrowed'), unused: part('unused'),
               limit: part('limit-mark'), hatched: borrowed ? getComputedStyle(borrowed).backgroundImage : '' };
    }, [team, queue]);
    const vb = await bar('vision', 'training');
    check(vb.borrowed > 0 && vb.within > 0 && Math.abs(vb.within / vb.borrowed - 3) < 0.05 && vb.limit !== null &&
          /gradient/.test(vb.hatched) && vb.label === 'holds 2 of 1.5 guaranteed, 500m borrowed, limit 2',
          `vision's bar: 1.5 within, 500m borrowed (hatched), its limit marked: ${JSON.stringify(vb)}`);
    const nb = await bar('nlp', 'training');
    check(nb.borrowed === null && nb.within > 0 && nb.unused > 0 && nb.limit === null,
          `nlp's bar: within its guarantee, part of it unused, no limit: ${JSON.stringify(nb)}`);
    const notes = await page.$$eval('#team-notes li', (ls) => ls.map((l) => l.textContent));
    check(notes.length === api.notes.length && notes.length === 1 && /guaranteed 5\.5 GPUs, more than the 4/.test(notes[0]),
          `the daemon's note is shown as a warning: ${notes.join(' | ')}`);
    // Decayed usage and rank: as the daemon gives them, else "—" said to be unknown, never 0.
    for (const t of api.teams) {
      const usage = await cell(t.name, null, 'usage');
      const rank = await cell(t.name, null, 'rank');
      const usageOk = typeof t.usage_gpu_hours === 'number' ? /GPU-(h|min)$/.test(usage.text)
        : usage.text === '—' && /not known/.test(usage.title);
      const rankOk = Number.isInteger(t.rank) ? rank.text === String(t.rank) : rank.text === '—' && /not known/.test(rank.title);
      check(usageOk && rankOk, `${t.name}: usage "${usage.text}" (${usage.title}), rank "${rank.text}" for ${t.usage_gpu_hours}, ${t.rank}`);
    }
    await page.screenshot({ path: path.join(artifacts, 'ui-teams.png'), fullPage: true });

    // A hostile answer, replaced at the network edge: every name drawn as text; usage and rank
    // known (0 is 0) apart from unknown (null: "—").
    await page.route('**/v1/teams', (r) => r.fulfill({ status: 200, contentType: 'application/json',
      body: JSON.stringify({ enabled: true, half_life_us: 604800000000, cluster_milli: 4000, simulated: true,
        teams: [
          { name: HOSTILE, members: [HOSTILE, `@${HOSTILE}`], weight: 2, usage_gpu_hours: 12.4, rank: 2,
            queues: [{ queue: HOSTILE, guaranteed: 1000, held: 1250, borrowed: 250, lent: 0, limit: null, waiting: 0 }] },
          { name: 'idle-team', members: ['z'], weight: 1, usage_gpu_hours: 0, rank: 1, queues: [] },
          { name: 'new-team', members: ['u'], weight: 1, usage_gpu_hours: null, rank: null, queues: [] }],
        no_team: [], notes: [`note ${HOSTILE}`] }) }));
    await waitFor(page, (h) => [...document.querySelectorAll('#teams th.team')].some((e) => e.textContent === h), HOSTILE, 10000);
    const hostileMembers = await cell(HOSTILE, HOSTILE, 'members');
    const hostileNote = await page.textContent('#team-notes');
    check(hostileMembers.text === `${HOSTILE}, @${HOSTILE}` && hostileNote.includes(HOSTILE) &&
          (await cell(HOSTILE, HOSTILE, 'queue')).text === HOSTILE, 'hostile team, member, queue and note are shown as text');
    check(await page.locator('img').count() === 0 && await page.evaluate(() => window.__pwned === undefined),
          'the hostile teams answer ran nothing');
    const said = async (t) => `${(await cell(t, null, 'usage')).text} / ${(await cell(t, null, 'rank')).text}`;
    const unknownUsage = await cell('new-team', null, 'usage');
    check(await said(HOSTILE) === '12.4 GPU-h / 2' && await said('idle-team') === '0 GPU-min / 1' &&
          await said('new-team') === '— / —' && /not known/.test(unknownUsage.title),
          `usage and rank: known, zero, unknown: ${await said(HOSTILE)}; ${await said('idle-team')}; ${await said('new-team')}`);
    await page.unroute('**/v1/teams');

    // The config refuses such names, which is what keeps them out of a real answer.
    for (const [bad, why] of [[`[teams."${HOSTILE.replace(/"/g, '\\"')}"]\nmembers = ["x"]\n`, 'not a team name'],
      [`[teams.a]\nmembers = ["${HOSTILE.replace(/"/g, '\\"')}"]\n`, 'is not a user or @group name']]) {
      const file = path.join(dir, 'hostile.toml');
      fs.writeFileSync(file, `[queues.interactive]\n[queues.training]\n[teams]\n${bad}`);
      const r = spawnSync(binary, ['config', 'check', file], { encoding: 'utf8' });
      check(r.status !== 0 && (r.stderr + r.stdout).includes(why), `config check refuses a hostile name (${why}): ${r.status} ${(r.stderr + r.stdout).trim().slice(0, 200)}`);
    }
    check(errors.length === 0, `teams page: no script errors or CSP violations: ${errors.join(' | ')}`);
  } finally {
    await page.context().close();
    await d.stop();
  }
}

async function main() {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'gsui-'));
  fs.mkdirSync(artifacts, { recursive: true });
  const config =
    '[queues.interactive]\ntime_limit = "1h"\n[queues.interactive.idle]\n' +
    `window = "${WINDOW_S}s"\ngrace = "${GRACE_S}s"\nsignals = ["sm", "memory", "jupyter"]\n` +
    '[queues.training]\nwarn_before = "20s"\n[queues.inference]\n';
  const script = { jobs: {} };
  const scriptPath = path.join(dir, 'script.json');
  const setScript = (id, sm) => {
    script.jobs[id] = { sm, memory: '2GiB' };
    fs.writeFileSync(`${scriptPath}.tmp`, JSON.stringify(script));
    fs.renameSync(`${scriptPath}.tmp`, scriptPath);
  };
  fs.writeFileSync(scriptPath, JSON.stringify(script));
  let browser;
  let daemon = null;
  try {
    daemon = await startServe(dir, 'ui-serve', config, ['--simulate', '8xH100-80GB', '--simulate-script', scriptPath,
      '--grace', '1s', '--tick', '50ms', '--sample-interval', '200ms']);
    const { base, sock, call } = daemon;
    const submit = async (token, body, sm) => {
      const id = await submitJob(call, token, body);
      if (sm !== undefined) setScript(id, sm);
      return id;
    };
    const job = async (id) => (await call('GET', `/v1/jobs/${id}`, ALICE)).body.job;
    const waitJob = async (id, pred, what, timeout = 20000) => {
      const end = Date.now() + timeout;
      for (;;) {
        const j = await job(id);
        if (pred(j)) return j;
        if (Date.now() > end) throw new Error(`job ${id}: timed out waiting for ${what} (${JSON.stringify(j).slice(0, 300)})`);
        await sleep(200);
      }
    };

    // The page and its headers.
    const page0 = await fetch(`${base}/ui`);
    check(page0.status === 200, '/ui answers 200 without a token');
    const csp = page0.headers.get('content-security-policy') || '';
    check(csp.includes("script-src 'self'") && !csp.includes('unsafe-inline'), `CSP forbids inline script: ${csp}`);
    check(page0.headers.get('x-content-type-options') === 'nosniff', 'X-Content-Type-Options: nosniff');
    const jsonHead = await call('GET', '/v1/jobs', ALICE);
    check(jsonHead.headers.get('cache-control') === 'no-store', 'JSON views are not cached');

    // The work the dashboard shows (job ids in submission order).
    const idle = await submit(ALICE, { argv: ['sleep', '600'], queue: 'interactive', gpu: '250m', mem: '10GiB' }, 0);
    const kept = await submit(BOB, { argv: ['sleep', '603'], queue: 'interactive', gpu: '250m', mem: '10GiB' }, 0);
    const used30 = await submit(ALICE, { argv: ['sh', '-c', 'sleep 600', HOSTILE], queue: 'interactive', gpu: '250m', mem: '10GiB' }, 30);
    const train = await submit(ALICE, { argv: ['sleep', '601'], queue: 'training', kind: 'whole', gpus: 2, time: '50s' }, 90);
    const mig = await submit(ALICE, { argv: ['sleep', '602'], queue: 'inference', mem: '9GiB' }, 40);
    // Bob's notebook runs a silent cell: its Jupyter report keeps it although its GPU is idle.
    await waitJob(kept, (j) => j.state === 'running', 'running');
    const rep = await call('POST', `/v1/jobs/${kept}/activity`, BOB, { source: 'jupyter', busy: true, kernels: 1 });
    check(rep.status === 200, `bob reports a busy notebook cell: HTTP ${rep.status}`);

    browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox'] });
    const ctx = await browser.newContext({ viewport: { width: 1500, height: 1000 } });
    const page = await ctx.newPage();
    const consoleErrors = [];
    // (The browser logs every 4xx answer as an error; those are expected here: 401 before the
    // token, 403 for bob, 503 for the replaced report.)
    page.on('console', (m) => {
      if (m.type() === 'error' && !/Failed to load resource/.test(m.text())) consoleErrors.push(m.text());
    });
    page.on('pageerror', (e) => consoleErrors.push(String(e)));
    let dialogs = 0, acceptDialogs = false;
    page.on('dialog', (d) => { dialogs += 1; if (acceptDialogs) d.accept(); else d.dismiss(); });

    await page.goto(`${base}/ui`);
    await waitFor(page, () => /bearer token/.test(document.getElementById('updated').textContent));
    check(true, 'without a token the page asks for one');
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
    // Without [teams] the daemon says so and the page shows no teams panel, not an empty one.
    await waitFor(page, () => document.getElementById('teams-panel').dataset.enabled === 'false', null, 10000);
    const noTeams = (await call('GET', '/v1/teams', ALICE)).body;
    check(noTeams.enabled === false && await page.locator('#teams-panel').isHidden() &&
          await page.locator('#teams tbody tr').count() === 0, 'without [teams] the page has no teams panel');
    // The daemon names a caller by its uid (alice's token is uid 1000), as it names its jobs.
    const aliceIs = (await call('GET', '/v1/whoami', ALICE)).body;
    const bobIs = (await call('GET', '/v1/whoami', BOB)).body;
    check(aliceIs.uid === 1000 && bobIs.uid === 1001 && aliceIs.user !== bobIs.user && aliceIs.admin === false,
          `/v1/whoami names each token's user: ${JSON.stringify(aliceIs)} ${JSON.stringify(bobIs)}`);
    await waitFor(page, (u) => document.getElementById('me').textContent === `you: ${u}`, aliceIs.user, 5000);
    check(true, `the page says who is looking (you: ${aliceIs.user})`);

    // Per-person caps in the queues table (the built-in interactive caps).
    const caps = await page.textContent('#queues tr[data-queue="interactive"] td.caps');
    check(caps === '2 GPUs, 8 jobs', `interactive queue's per-person cap: ${caps}`);

    // A newly submitted job with a hostile command appears without a reload, as text.
    const row = `#running tr[data-job="${used30}"]`;
    await page.waitForSelector(row, { timeout: 10000 });
    const cmd = await page.textContent(`${row} td.cmd`);
    check(cmd.includes(HOSTILE), `the hostile command is shown as text: ${cmd}`);
    check(await page.locator('img').count() === 0, 'no <img> element was made from it');
    check(await page.evaluate(() => window.__pwned === undefined), 'its onerror never ran');

    // "Used", one definition: a 250m shared slice driving its GPU at 30 % used all 0.25.
    await waitFor(page, (r) => /0\.25 GPU \(100% of held\)/.test(document.querySelector(`${r} td.used`).textContent), row, 15000)
      .catch(async (e) => { console.log('used cell:', await page.textContent(`${row} td.used`)); throw e; });
    const slices = (await call('GET', '/v1/slices', ALICE)).body.slices;
    const s30 = slices.find((s) => s.job === used30);
    check(s30 && s30.used_milli === 250 && s30.util_percent === 30, `/v1/slices: used_milli ${s30 && s30.used_milli} at ${s30 && s30.util_percent} %`);

    // A waiting job: plain words, the admin's line, its place in the queue.
    const pending = await submit(ALICE, { argv: ['sleep', '600'], queue: 'training', kind: 'whole', gpus: 8 });
    const prow = `#pending tr[data-job="${pending}"]`;
    await page.waitForSelector(prow, { timeout: 10000 });
    await waitFor(page, (r) => !/not yet examined/.test(document.querySelector(`${r} td.reason`).textContent), prow, 10000);
    const apiReason = (await job(pending)).pending_reason;
    const reason = await page.textContent(`${prow} td.reason`);
    check(apiReason && reason.startsWith(apiReason.plain) && reason.includes(apiReason.message) &&
          /all GPUs are in use/.test(apiReason.plain) && !/node/.test(apiReason.plain),
          `pending reason in plain words, the admin's line under it: "${reason}"`);
    const place = await page.textContent(`${prow} td.place`);
    check(/^1 of 1/.test(place) && apiReason.position === 1, `place in the queue: ${place}`);

    // Idle, kept and warned, each as its own fact.
    await waitJob(idle, (j) => j.warning_kind === 'idle', 'the idle warning', 20000);
    await waitFor(page, (j) => /warned: reclaimed in \d/.test(document.querySelector(`tr[data-job="${j}"] td.idle`).textContent), idle, 10000);
    const idleCell = await cellText(page, idle, 'idle');
    check(await page.$eval(`tr[data-job="${idle}"] td.idle`, (c) => c.classList.contains('warned')), `idle, warned: "${idleCell}"`);
    const keptCell = await cellText(page, kept, 'idle');
    check(/^kept: a running notebook cell \(its GPU is idle\)/.test(keptCell) && !/warning in 0s/.test(keptCell),
          `kept by a notebook cell, not "warning in 0s": "${keptCell}"`);
    const usedIdle = await cellText(page, used30, 'idle');
    check(/^in use/.test(usedIdle), `a busy slice is in use: "${usedIdle}"`);
    // The MIG device shows its instance and what it holds.
    await waitJob(mig, (j) => j.state === 'running', 'the MIG job running', 30000);
    await waitFor(page, () => [...document.querySelectorAll('#devices ul.mig li.used')].length >= 1, null, 10000);
    const migCard = await page.evaluate(() => document.querySelector('#devices ul.mig li.used').closest('.card').textContent);
    check(/1g\.10gb: slice #\d+/.test(migCard) && /held 0\.142 GPU(?!s)/.test(migCard), `a MIG device shows what it holds: ${migCard}`);
    const migSlice = await cellText(page, mig, 'used').catch(() => '');
    check(migSlice !== '', `the MIG job has a running row: ${migSlice}`);

    // `gpuslice top` says the same, from the same figures.
    const top = execFileSync(binary, ['top', '--once', '--socket', sock], { encoding: 'utf8' });
    const topLine = (j) => top.split('\n').find((l) => new RegExp(`^\\d+\\s+${j}\\s`).test(l)) || '';
    check(/kept: a running notebook cell/.test(topLine(kept)), `top: the kept slice: ${topLine(kept).replace(/\s+/g, ' ')}`);
    check(/reclaim in \d/.test(topLine(idle)), `top: the warned slice: ${topLine(idle).replace(/\s+/g, ' ')}`);
    check(/\s250m\s/.test(topLine(used30)), `top: USED of the busy 250m slice: ${topLine(used30).replace(/\s+/g, ' ')}`);

    // Mine against everyone's (bob sees only his notebook).
    await useToken(BOB);
    await waitFor(page, (u) => document.getElementById('me').textContent === `you: ${u}`, bobIs.user, 5000);
    await page.click('button[data-show="mine"]');
    await waitFor(page, (k) => document.querySelectorAll('#running tbody tr[data-job]').length === 1 &&
                   !!document.querySelector(`#running tr[data-job="${k}"]`), kept, 10000);
    check(await page.locator('#pending tbody tr[data-job]').count() === 0, "bob's own jobs only: none pending");
    await page.click('button[data-show="all"]');
    await waitFor(page, () => document.querySelectorAll('#running tbody tr[data-job]').length >= 4, null, 10000);
    check(true, "everyone's jobs again");

    // Another user is refused, and the page says why (the daemon's words).
    await cancelTwice(prow);
    await waitFor(page, () => /cancel refused/.test(document.getElementById('message').textContent), null, 10000);
    const refused = await page.textContent('#message');
    const direct = await call('POST', `/v1/jobs/${pending}/cancel`, BOB);
    check(direct.status === 403 && refused.includes(direct.body.error.message),
          `another user is refused with the daemon's reason: ${refused}`);
    check((await job(pending)).state === 'pending', 'the job is still pending after the refusal');

    // The owner cancels from the page; the job leaves the list and shows among the ended ones.
    await useToken(ALICE);
    await sleep(300);
    await cancelTwice(prow);
    await waitJob(pending, (j) => j.state === 'cancelled', 'cancelled', 10000);
    await page.waitForSelector(prow, { state: 'detached', timeout: 10000 });
    check(true, `the owner cancelled job ${pending} from the page`);
    await page.waitForSelector(`#ended tr[data-job="${pending}"]`, { timeout: 10000 });
    check(/cancelled/.test(await page.textContent(`#ended tr[data-job="${pending}"]`)), 'the cancelled job is among the recently ended');
    check(dialogs === 0, 'no dialog was opened');

    // The training job's time limit: warned in amber, apart from idle (never "reclaim in").
    await waitJob(train, (j) => j.warning_kind === 'time-limit', 'the time-limit warning', 60000);
    await waitFor(page, (j) => /time limit: stops at/.test(document.querySelector(`tr[data-job="${j}"] td.limit`).textContent), train, 10000);
    const limitCell = await cellText(page, train, 'limit');
    const trainIdle = await cellText(page, train, 'idle');
    check(await page.$eval(`tr[data-job="${train}"] td.limit`, (c) => c.classList.contains('limit-warned')) &&
          !/reclaim/.test(limitCell) && !/warned|reclaimed in/.test(trainIdle),
          `time limit apart from idle: limit "${limitCell}", idle "${trainIdle}"`);
    const tj = await job(train);
    check(/reaches its time limit of 50s in \d+s$/.test(tj.warning), `the time-limit warning is said as of now: ${tj.warning}`);
    // A second idle notebook, so the picture shows a warned one (the first is reclaimed soon).
    const idle2 = await submit(BOB, { argv: ['sleep', '600'], queue: 'interactive', gpu: '500m' }, 0);
    await waitJob(idle, (j) => j.state === 'reclaimed', 'the idle reclaim', 40000);
    await page.waitForSelector(`#ended tr[data-job="${idle}"]`, { timeout: 10000 });
    const endedRow = await page.textContent(`#ended tr[data-job="${idle}"]`);
    check(/reclaimed \(idle\)/.test(endedRow) && /idle reclaim: idle for/.test(endedRow), `ended with how and why: ${endedRow}`);
    await waitJob(idle2, (j) => j.warning_kind === 'idle', 'the second idle warning', 20000);
    await waitFor(page, (j) => /warned/.test(document.querySelector(`tr[data-job="${j}"] td.idle`).textContent), idle2, 10000);

    // The report, rendered for people: no raw keys, no microseconds, its own period per panel.
    // The page's report is read again at once on a new token; the old panel is marked stale
    // first so the wait sees the new one. The history moves on while the test reads it (a
    // sample can land between the page's read and the test's), so up to three tries.
    let day = '';
    let week = '';
    let repApi = null;
    let shownCode = null;
    for (let attempt = 0; attempt < 3; attempt += 1) {
      await page.evaluate(() => { for (const v of document.querySelectorAll('.verdict')) v.removeAttribute('data-code'); });
      await useToken(ALICE);
      await waitFor(page, () => !!document.querySelector('#report-1d .verdict[data-code]') &&
                                !!document.querySelector('#report-7d .verdict[data-code]'), null, 20000);
      day = await page.textContent('#report-1d');
      week = await page.textContent('#report-7d');
      repApi = await call('GET', '/v1/report?since=1d&by=queue', ALICE);
      shownCode = await page.getAttribute('#report-1d .verdict', 'data-code');
      if (repApi.status === 200 && shownCode === repApi.body.verdict.code) break;
    }
    check(repApi.status === 200 && shownCode === repApi.body.verdict.code && /GPUs?: \d+% held/.test(day),
          `the day panel shows the daemon's verdict (${shownCode}): ${day.slice(0, 200)}`);
    for (const raw of ['held_gpu_hours', 'coverage_percent', 'p95_us', 'used_percent_of_measured', '[object Object]']) {
      check(!day.includes(raw) && !week.includes(raw), `no raw key "${raw}" in the report`);
    }
    check(/\(1d\)/.test(day) && /\(7d\)/.test(week) && /history only since/.test(day),
          `day and week say their own periods: "${day.match(/\d\d:\d\d[^)]*\)/)}" / "${week.match(/\d\d:\d\d[^)]*\)/)}"`);
    check(await page.locator('#report-1d svg.timeline').count() === 1, 'the day panel charts held and used');

    // The what-if: asked again at once with the token (the first try, before it, was a 401);
    // the daemon's own verdict and a row per built-in scenario, no raw keys.
    // Like the report, the history moves on between the page's read and the test's: up to
    // three tries, each after the page asked again (its old panel emptied first).
    let wiApi = null;
    let wi = '';
    for (let attempt = 0; attempt < 3; attempt += 1) {
      if (attempt > 0) {
        await page.evaluate(() => document.getElementById('whatif').replaceChildren());
        await useToken(ALICE);
      }
      await waitFor(page, () => /as-recorded/.test(document.getElementById('whatif').textContent), null, 20000)
        .catch(async (e) => { console.log('whatif:', await page.textContent('#whatif')); throw e; });
      wiApi = await call('GET', '/v1/whatif?since=7d', ALICE);
      wi = await page.textContent('#whatif');
      if (wiApi.status === 200 && wi.includes(wiApi.body.verdict.text)) break;
    }
    check(wiApi.status === 200 && typeof wiApi.body.verdict.text === 'string' && wi.includes(wiApi.body.verdict.text),
          `the what-if panel shows the daemon's verdict: ${wi.slice(0, 200)}`);
    check(wiApi.body.scenarios.every((sc) => wi.includes(sc.name)) && !/not available|held_gpu_hours|undefined/.test(wi),
          `the what-if panel has a row per scenario (${wiApi.body.scenarios.length}), no raw keys`);

    // A job that waits, for the picture.
    await submit(ALICE, { argv: ['sleep', '600'], queue: 'training', kind: 'whole', gpus: 8 });
    await sleep(2500);  // one more refresh: the charts' lines and the countdowns move
    await page.screenshot({ path: path.join(artifacts, 'ui.png'), fullPage: true });
    console.log(`screenshot: ${path.join(artifacts, 'ui.png')}`);

    // A report with long waits and a job that could never run, replaced at the network edge:
    // drawn in words, the verdict as text (hostile), waits in minutes.
    await page.route('**/v1/report?*', (r) => r.fulfill({ status: 200, contentType: 'application/json',
      body: JSON.stringify({
        period: { from_us: 1795996800000000, to_us: 1796083200000000, history_from_us: 1795996800000000 },
        by: 'queue', devices: 8,
        verdict: { code: 'long_waits', text: `8 GPUs: 61% held, 70% used — yet jobs waited long ${HOSTILE}` },
        totals: { held_gpu_hours: 117.1, capacity_gpu_hours: 192, held_percent: 61, used_gpu_hours: 80.2,
                  used_percent_of_measured: 70, coverage_percent: 98, idle_gpu_hours: 3.25, jobs: 41 },
        groups: [{ key: 'training', held_gpu_hours: 100, used_gpu_hours: 3.25, coverage_percent: 99, jobs: 4, reclaimed: 0 }],
        wait: [{ queue: 'training', jobs: 4, p50_us: 600000000, p95_us: 1980000000, total_us: 3600000000 }],
        long_wait_us: 600000000,
        never_ran: { jobs: 1, list: [{ job: 9, user: 'carol', queue: 'training', why: 'no host has 16 GPUs' }] },
        timeline: { bucket_us: 3600000000, points: [{ t_us: 1, held_gpus: 5, used_gpus: 3 }, { t_us: 2, held_gpus: 6, used_gpus: null }] },
      }) }));
    await useToken(ALICE);  // also refreshes the report at once
    await waitFor(page, () => /61% held/.test(document.getElementById('report-7d').textContent), null, 10000);
    const fake = await page.textContent('#report-7d');
    check(fake.includes(HOSTILE) && fake.includes('training') && /33m \(long\)/.test(fake) &&
          /no host has 16 GPUs/.test(fake) && /117 GPU-h/.test(fake) && !/1980000000/.test(fake),
          `a report is drawn in words (p95 33m, long; never ran): ${fake.slice(0, 400)}`);
    check(await page.locator('img').count() === 0 && await page.evaluate(() => window.__pwned === undefined),
          'the hostile verdict ran nothing');
    // A report the daemon cannot give (here 503, e.g. no history yet) says so, with the status.
    await page.unroute('**/v1/report?*');
    await page.route('**/v1/report?*', (r) => r.fulfill({ status: 503, contentType: 'application/json',
      body: JSON.stringify({ error: { code: 'UNAVAILABLE', message: 'store busy' } }) }));
    await useToken(ALICE);
    await waitFor(page, () => /report not available \(HTTP 503/.test(document.getElementById('report-7d').textContent),
                  null, 10000);
    // An admin's orders from the page: a user sees no order buttons (and the daemon refuses
    // the order anyway); an admin drains a GPU, puts it in MIG mode, gives it back to the
    // planner and undrains it.
    const card = '#devices .card[data-device="7"]';
    const device7 = async () => (await call('GET', '/v1/devices', ALICE)).body.devices.find((d) => d.index === 7);
    acceptDialogs = true;
    await page.unroute('**/v1/report?*');
    await waitFor(page, (c) => !!document.querySelector(`${c} .mig-admin`), card, 10000);
    const userOrders = await page.$$eval('button.order', (bs) => bs.map((b) => b.textContent));
    check(userOrders.length === 0, `a user sees no admin order buttons: [${userOrders.join(', ')}]`);
    check(/the planner decides/.test(await page.textContent(`${card} .mig-admin`)),
          'a user still sees who decides a GPU\'s MIG mode');
    const userDrain = await call('POST', '/v1/devices/7/drain', ALICE, {});
    check(userDrain.status === 403 && typeof (await device7()).drained !== 'string',
          `a user's drain is refused by the daemon: HTTP ${userDrain.status}`);
    await useToken(ROOT);
    await waitFor(page, (c) => !!document.querySelector(`${c} .mig-admin`), card, 10000);
    check(/the planner decides/.test(await page.textContent(`${card} .mig-admin`)), 'a MIG-capable GPU says who decides its MIG mode');
    await page.click(`${card} button.order >> text="Drain"`);
    await waitFor(page, (c) => /drained/.test(document.querySelector(c).textContent), card, 10000);
    check((await device7()).drained === '', 'an admin drains GPU 7 from the page');
    await page.click(`${card} button.order >> text="MIG on"`);
    await waitFor(page, (c) => /MIG mode on by an admin/.test(document.querySelector(`${c} .mig-admin`).textContent), card, 10000);
    check((await device7()).mig_admin === 'on', 'an admin puts GPU 7 in MIG mode from the page');
    await page.click(`${card} button.order >> text="MIG auto"`);
    await waitFor(page, (c) => /the planner decides/.test(document.querySelector(`${c} .mig-admin`).textContent), card, 10000);
    await page.click(`${card} button.order >> text="Undrain"`);
    await waitFor(page, (c) => /takes new slices/.test(document.querySelector(c).textContent), card, 10000);
    const d7 = await device7();
    check(d7.mig_admin === 'auto' && d7.drained === null, `given back to the planner and undrained: ${JSON.stringify(d7).slice(0, 200)}`);
    const ev = (await call('GET', '/v1/events?limit=1000', ROOT)).body;
    const orders = JSON.stringify(ev).match(/device 7[^"]*\(by root\)/g) || [];
    check(orders.length === 4, `each order is journaled with who gave it: ${orders.join(' | ')}`);
    check(consoleErrors.length === 0, `no script errors or CSP violations: ${consoleErrors.join(' | ')}`);
    const teamsDir = path.join(dir, 'teams');
    fs.mkdirSync(teamsDir);
    await teamsPanel(browser, teamsDir, aliceIs.user);
  } finally {
    if (browser) await browser.close();
    if (daemon) await daemon.stop();
    fs.rmSync(dir, { recursive: true, force: true });
  }
  if (failures) { console.log(`${failures} check(s) failed`); process.exit(1); }
  console.log('all checks passed');
}

main().catch((e) => { console.error(e); process.exit(1); });
