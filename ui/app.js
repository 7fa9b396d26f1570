// gpuslice web dashboard (docs/ui.md). Reads the daemon's JSON views every few seconds and
// draws them; cancels through the ordinary API, so the daemon decides who may. Every text
// from the daemon (job commands, user and queue names, reasons) is hostile input: it goes
// into the page only through textContent / text nodes, never as HTML (format.js has the
// helpers; report.js draws the report, whatif.js the what-if, teams.js the teams).
'use strict';

const POLL_MS = 2000;
const REPORT_MS = 30000;
const TOKEN_KEY = 'gpuslice-token';
const ENDED_SHOWN = 15;

const state = {
  token: sessionStorage.getItem(TOKEN_KEY) || '',  // only this tab's session; never stored elsewhere
  clockOffsetUs: 0,      // daemon clock minus browser clock
  armed: null,           // {id, until}: a cancel button clicked once, waiting for the confirm
  queues: new Map(),
  lastReport: 0,
  minutes: 60,           // the devices' chart window
  me: null,              // GET /v1/whoami: {user, uid, admin}
  mine: false,           // show only the viewer's jobs
  migNames: new Map(),   // slice id -> its MIG instance's profile name
};

let messageTimer = null;
function showMessage(text, info) {
  const m = document.getElementById('message');
  clearTimeout(messageTimer);
  if (info && text) messageTimer = setTimeout(() => { m.hidden = true; }, 8000);  // errors stay
  m.textContent = visible(text || '');
  m.className = info ? 'info' : '';
  m.hidden = !text;
}

function nowUs() { return Date.now() * 1000 + state.clockOffsetUs; }

// ---- the API ----

async function api(method, path, payload) {
  const headers = { Accept: 'application/json' };
  if (state.token) headers.Authorization = `Bearer ${state.token}`;
  if (payload !== undefined) headers['Content-Type'] = 'application/json';
  let r;
  try {
    r = await fetch(path, { method, headers, cache: 'no-store', credentials: 'omit',
                            body: payload === undefined ? undefined : JSON.stringify(payload) });
  } catch (e) {
    return { status: 0, body: null, error: `the daemon cannot be reached (${e.message})` };
  }
  let body = null;
  try { body = await r.json(); } catch (e) { body = null; }
  let error = null;
  if (!r.ok) {
    error = body && body.error && body.error.message ? body.error.message : `HTTP ${r.status}`;
  }
  return { status: r.status, body, error };
}

// ---- devices ----

function renderDevices(devs, history) {
  const box = document.getElementById('devices');
  const byIndex = new Map();
  if (history) for (const d of history.devices || []) byIndex.set(d.index, d);
  state.migNames = new Map();
  const cards = (devs.devices || []).map((d) => {
    const c = el('div', 'card');
    c.dataset.device = String(d.index);
    c.appendChild(el('h3', null, `GPU ${d.index} · ${d.model}`));
    const row = (a, b) => { const r = el('div', 'row'); r.append(el('span', null, a), el('span', null, b)); return r; };
    const mode = d.draining ? `${d.mode} (draining)` : d.mode;
    const drained = typeof d.drained === 'string';
    const admin = row(drained ? `drained${d.drained ? `: ${d.drained}` : ''}` : 'takes new slices', '');
    if (isAdmin()) {
      admin.lastChild.appendChild(drained
        ? orderButton('Undrain', `/v1/devices/${d.index}/undrain`, `GPU ${d.index}: undrain`, false)
        : orderButton('Drain', `/v1/devices/${d.index}/drain`, `GPU ${d.index}: drain`, true));
    }
    c.appendChild(admin);
    if (d.mig_capable) {
      // Who decides its MIG mode: the planner ("auto") or an admin (on / off, through a drain).
      const who = d.mig_admin === 'auto' ? 'MIG mode: the planner decides' : `MIG mode ${d.mig_admin} by an admin`;
      const mig = row(who, '');
      mig.classList.add('mig-admin');
      for (const m of ['on', 'off', 'auto']) {
        if (m === d.mig_admin || !isAdmin()) continue;
        mig.lastChild.appendChild(orderButton(m === 'auto' ? 'MIG auto' : `MIG ${m}`, `/v1/devices/${d.index}/mig`,
                                              `GPU ${d.index}: MIG mode ${m}`, m !== 'auto', { mode: m }));
      }
      c.appendChild(mig);
    }
    const sl = d.slices || [];
    c.appendChild(row(`mode ${mode}`, sl.length ? `${sl.length} slice${sl.length > 1 ? 's' : ''} (${sl.map((x) => `#${x}`).join(', ')})` : 'no slice'));
    // What its slices hold, whatever the mode (a MIG device: its used instances).
    const held = known(d.held_milli) ? d.held_milli : (d.used_milli || 0);
    c.appendChild(row(`held ${gpus(held)}`, `memory ${bytes(d.memory_used)} / ${bytes(d.memory)}`));
    // An MPS server serves one user per GPU; the driver gives no per-client utilisation under it.
    if (d.mps_user) c.appendChild(row(`MPS server for ${d.mps_user}`, 'per-client SM not measurable'));
    if (d.cap_shared) c.appendChild(row('memory caps', d.mode === 'mps' ? d.cap_mps : d.cap_shared));
    const bar = el('div', 'bar');
    const fill = el('div');
    fill.style.width = `${Math.min(100, held / 10)}%`;  // CSSOM: allowed by the CSP
    bar.appendChild(fill);
    c.appendChild(bar);
    const layout = Array.isArray(d.mig_layout) ? d.mig_layout : [];
    if (d.mode === 'mig' && layout.length) {
      const ul = el('ul', 'mig');
      for (const p of layout) {
        const name = p.name || `profile ${p.profile}`;
        if (p.slice) state.migNames.set(p.slice, name);
        const li = el('li', p.slice ? 'used' : 'free', `${name}: ${p.slice ? `slice #${p.slice}` : 'free'}`);
        ul.appendChild(li);
      }
      c.appendChild(ul);
    }
    c.appendChild(row('SM now', known(d.util_percent) ? `${d.util_percent.toFixed(0)}%` : 'not measured'));
    const h = byIndex.get(d.index);
    c.appendChild(lineChart([{ values: h ? h.sm_util_percent : [] }]));
    c.appendChild(row(`−${state.minutes} min`, 'now'));
    c.lastChild.classList.add('axis-labels');
    return c;
  });
  box.replaceChildren(...cards);
}

// ---- queues ----

function perUserCaps(q) {
  const caps = [];
  if (q.user_max_milli > 0) caps.push(gpus(q.user_max_milli));
  if (q.user_max_jobs > 0) caps.push(`${q.user_max_jobs} job${q.user_max_jobs === 1 ? '' : 's'}`);
  return caps.length ? caps.join(', ') : 'no cap';
}

function renderQueues(qs) {
  state.queues = new Map((qs.queues || []).map((q) => [q.name, q]));
  const rows = (qs.queues || []).map((q) => {
    const tr = el('tr');
    tr.dataset.queue = String(q.name);
    const limit = q.time_limit_us || q.max_duration_us;
    const idle = q.idle_reclaim
      ? `after ${duration(q.idle_window_us)} idle + ${duration(q.idle_grace_us)} warning${q.idle_reclaim_mode === 'on-demand' ? ', on demand' : ''}`
      : 'no';
    tr.append(td(q.name), td(q.default_kind), td(q.pending), td(q.running),
              td(q.pending ? duration(q.oldest_wait_us) : '—'), td(limit ? duration(limit) : 'none'), td(idle),
              td(perUserCaps(q), 'caps'));
    return tr;
  });
  document.querySelector('#queues tbody').replaceChildren(...rows);
}

// ---- jobs ----

function cancelButton(job) {
  const b = el('button', 'cancel', 'Cancel');
  b.type = 'button';
  b.dataset.job = String(job.id);
  const armed = state.armed && state.armed.id === job.id && state.armed.until > Date.now();
  if (armed) { b.textContent = 'Confirm cancel'; b.classList.add('armed'); }
  b.addEventListener('click', () => onCancel(job.id));
  return b;
}

async function onCancel(id) {
  if (!(state.armed && state.armed.id === id && state.armed.until > Date.now())) {
    state.armed = { id, until: Date.now() + 5000 };  // second click within 5 s confirms
    for (const b of document.querySelectorAll(`button.cancel[data-job="${id}"]`)) {
      b.textContent = 'Confirm cancel';
      b.classList.add('armed');
    }
    return;
  }
  state.armed = null;
  const r = await api('POST', `/v1/jobs/${id}/cancel`);
  if (r.error) showMessage(`job ${id}: cancel refused: ${r.error}`);
  else showMessage(`job ${id}: cancel requested`, true);
  refresh();
}

// An admin's order (drain, MIG mode, hold, requeue): shown to admins only (GET /v1/whoami),
// and the daemon refuses anyone else anyway; a refusal is shown as it gives it.
function orderButton(label, path, what, confirmFirst, body) {
  const b = el('button', 'order', label);
  b.type = 'button';
  b.addEventListener('click', async () => {
    if (confirmFirst && !window.confirm(`${what}?`)) return;
    const r = await api('POST', path, body);
    if (r.error) showMessage(`${what}: refused: ${r.error}`);
    else showMessage(`${what}: done`, true);
    refresh();
  });
  return b;
}

function isAdmin() { return Boolean(state.me && state.me.admin); }

function asked(j) {
  const parts = [];
  if (j.kind) parts.push(j.kind);
  if (j.gpus) parts.push(`${j.gpus} GPU${j.gpus === 1 ? '' : 's'}`);
  if (j.milli) parts.push(gpus(j.milli));
  if (j.memory) parts.push(bytes(j.memory));
  if (j.time_limit_us) parts.push(duration(j.time_limit_us));
  if (j.model) parts.push(j.model);
  return parts.join(' ') || 'queue default';
}

function mineOnly(list) {
  if (!state.mine || !state.me) return list;
  return list.filter((j) => j.user === state.me.user);
}

function renderPending(jobs) {
  const now = nowUs();
  const rows = mineOnly(jobs.filter((j) => j.state === 'pending')).map((j) => {
    const tr = el('tr');
    tr.dataset.job = String(j.id);
    const pr = j.pending_reason;
    // In plain words for the person who waits; the scheduler's own line under it for admins.
    const why = td(pr ? (pr.plain || pr.message) : 'not yet examined by the scheduler', 'reason');
    if (pr && pr.plain && pr.message) why.appendChild(el('div', 'muted small admin-reason', pr.message));
    let place = '—';
    if (pr && known(pr.position) && known(pr.queue_length)) {
      place = `${pr.position} of ${pr.queue_length}`;
      if (known(pr.ready_by_us)) place += `; room by ${clock(pr.ready_by_us)} at the latest`;
    }
    const act = td();
    act.appendChild(cancelButton(j));
    const held = j.pending_reason && j.pending_reason.kind === 'held';
    if (isAdmin()) {
      act.appendChild(held ? orderButton('Release', `/v1/jobs/${j.id}/release`, `job ${j.id}: release`, false)
                           : orderButton('Hold', `/v1/jobs/${j.id}/hold`, `job ${j.id}: hold`, false));
    }
    tr.append(td(j.id), td(j.user), td(j.queue), td(argvText(j.argv), 'cmd'), td(asked(j)),
              td(duration(now - j.submit_time_us)), why, td(place, 'place'), act);
    return tr;
  });
  document.querySelector('#pending tbody').replaceChildren(...(rows.length ? rows : [emptyRow(9, 'no job is waiting')]));
}

// The idle policy, on its own: how long the slice has been idle, when the warning comes,
// what keeps it although its GPU is idle (a notebook cell), or after a warning when it is
// reclaimed. Never the time limit (its own column).
function idleCell(j, s, q) {
  const now = nowUs();
  if (j.state !== 'running') return { text: j.state };
  if (!s) return { text: '—' };
  if (s.idle_state === 'unmeasured' || !known(s.idle_seconds)) return { text: 'not measured: not reclaimed for idleness' };
  const idleFor = s.idle_seconds * 1e6;
  if (!q || !q.idle_reclaim) {
    return { text: s.activity === 'idle' ? `idle ${duration(idleFor)} (reported, not reclaimed)` : 'in use (no idle reclaim)' };
  }
  if (known(s.idle_reclaim_at_us)) {
    return { text: `warned: reclaimed ${until(s.idle_reclaim_at_us, now)} unless used`, cls: 'warned' };
  }
  if (s.idle_state === 'reclaimable') return { text: 'idle; reclaimed when a waiting job needs the room', cls: 'warned' };
  if (s.protected_by) {
    return { text: `kept: ${s.protected_by}${s.activity === 'idle' ? ' (its GPU is idle)' : ''}`, cls: 'kept' };
  }
  if (!known(s.idle_warning_at_us)) return { text: `idle ${duration(idleFor)}` };
  const warn = s.idle_warning_at_us <= now ? 'warning due now' : `warning at ${clock(s.idle_warning_at_us)} (${until(s.idle_warning_at_us, now)})`;
  if (idleFor < 5e6) return { text: `in use; ${duration(q.idle_window_us)} idle before a warning` };
  return { text: `idle ${duration(idleFor)}; ${warn}` };
}

// The time limit, on its own: when the job ends, and whether its warning has come.
function limitCell(j) {
  const now = nowUs();
  if (!known(j.deadline_us) || j.deadline_us <= 0 || !known(j.time_left_us)) return { text: 'no limit' };
  if (j.warning_kind === 'time-limit') {
    return { text: `time limit: stops at ${clock(j.deadline_us)} (${until(j.deadline_us, now)})`, cls: 'limit-warned' };
  }
  return { text: `ends ${clock(j.deadline_us)} (${until(j.deadline_us, now)})` };
}

function renderRunning(jobs, slices) {
  const bySlice = new Map((slices.slices || []).map((s) => [s.id, s]));
  const rows = mineOnly(jobs.filter((j) => j.state !== 'pending')).map((j) => {
    const s = bySlice.get(j.slice);
    const tr = el('tr');
    tr.dataset.job = String(j.id);
    let slice = '—', held = '—', used = '—';
    if (s) {
      const devs = s.devices || [];
      const mig = state.migNames.get(s.id);
      slice = `${s.kind}${mig ? ` ${mig}` : ''} on GPU ${devs.join(',')}`;
      const heldMilli = (s.milli || 0) * Math.max(1, devs.length);
      held = gpus(heldMilli) + (s.memory_cap ? `, ${bytes(s.memory_cap)}` : '');
      // "Used", one definition (docs/report.md): whole/MIG held x utilisation; shared/MPS its
      // processes' share of the device, at most what it holds.
      used = known(s.used_milli)
        ? `${gpus(s.used_milli)} (${heldMilli ? Math.round((100 * s.used_milli) / heldMilli) : 0}% of held)`
        : 'not measured';
    }
    const idle = idleCell(j, s, state.queues.get(j.queue));
    const limit = limitCell(j);
    const act = td();
    act.appendChild(cancelButton(j));
    if (j.state === 'running' && isAdmin()) {
      act.appendChild(orderButton('Requeue', `/v1/jobs/${j.id}/requeue`, `job ${j.id}: requeue`, true));
    }
    tr.append(td(j.id), td(j.user), td(j.queue), td(argvText(j.argv), 'cmd'), td(slice), td(held), td(used, 'used'),
              td(idle.text, `idle ${idle.cls || ''}`), td(limit.text, `limit ${limit.cls || ''}`), act);
    return tr;
  });
  document.querySelector('#running tbody').replaceChildren(...(rows.length ? rows : [emptyRow(10, 'nothing is running')]));
}

const ENDED_AS = {
  succeeded: 'finished', failed: 'failed', cancelled: 'cancelled', timed_out: 'time limit reached',
  reclaimed: 'reclaimed (idle)', rejected: 'refused', lost: 'lost',
};

function renderEnded(jobs) {
  const now = nowUs();
  const rows = mineOnly(jobs).map((j) => {
    const tr = el('tr');
    tr.dataset.job = String(j.id);
    tr.append(td(j.id), td(j.user), td(j.queue), td(argvText(j.argv), 'cmd'),
              td(j.end_time_us ? `${clock(j.end_time_us)} (${until(j.end_time_us, now)})` : '—'),
              td(ENDED_AS[j.state] || j.state, `state ${j.state}`), td(j.reason || '—', 'end-reason'));
    return tr;
  });
  document.querySelector('#ended tbody').replaceChildren(...(rows.length ? rows : [emptyRow(7, 'no job has ended yet')]));
}

function renderMe() {
  const who = document.getElementById('me');
  who.textContent = state.me ? `you: ${state.me.user}${state.me.admin ? ' (admin)' : ''}` : '';
  for (const b of document.querySelectorAll('button[data-show]')) b.classList.toggle('on', (b.dataset.show === 'mine') === state.mine);
}

// A report, asked again once after a short pause when the daemon is busy with another of ours
// (another tab, say) rather than showing "not available" until the next refresh.
async function reportOnce(path) {
  const r = await api('GET', path);
  if (r.status !== 409) return r;
  await new Promise((ok) => setTimeout(ok, 1000));
  return api('GET', path);
}

async function refreshReport() {
  state.lastReport = Date.now();
  // One after the other: the daemon builds one report per user at a time (docs/security.md) and
  // answers 409 to a second one asked while the first is built.
  const day = await reportOnce('/v1/report?since=1d&by=queue');
  const week = await reportOnce('/v1/report?since=7d&by=queue');
  renderReportInto(document.getElementById('report-1d'), 'Last day', day);
  renderReportInto(document.getElementById('report-7d'), 'Last week', week);
}

// ---- the loop ----

let busy = false;
async function refresh() {
  if (busy) return;
  busy = true;
  try {
    const [devs, hist, qs, jobs, slices, ended, me, teams] = await Promise.all([
      api('GET', '/v1/devices'), api('GET', `/v1/devices/history?minutes=${state.minutes}`), api('GET', '/v1/queues'),
      api('GET', '/v1/jobs?state=active'), api('GET', '/v1/slices'), api('GET', `/v1/jobs?state=ended&limit=${ENDED_SHOWN}`),
      state.me ? Promise.resolve(null) : api('GET', '/v1/whoami'), api('GET', '/v1/teams')]);
    const upd = document.getElementById('updated');
    const failed = [devs, qs, jobs, slices].find((r) => r.error);
    if (failed) {
      if (failed.status === 401) {
        upd.textContent = 'this listener needs a bearer token: paste yours above';
      } else {
        upd.textContent = `update failed: ${failed.error}`;
      }
      return;
    }
    if (me && me.body && typeof me.body.user === 'string') state.me = me.body;
    renderMe();
    if (hist.body && typeof hist.body.now_us === 'number') state.clockOffsetUs = hist.body.now_us - Date.now() * 1000;
    document.getElementById('simulated').hidden = !devs.body.simulated;
    renderDevices(devs.body, hist.error ? null : hist.body);
    renderQueues(qs.body);
    renderTeams(teams);  // teams.js: hidden without [teams]
    const list = jobs.body.jobs || [];
    renderPending(list);
    renderRunning(list, slices.body);
    renderEnded(ended.error ? [] : (ended.body.jobs || []));
    upd.textContent = `updated ${new Date().toLocaleTimeString()}`;
    if (Date.now() - state.lastReport > REPORT_MS) refreshReport();
    if (Date.now() >= whatifDue) refreshWhatif();
  } finally {
    busy = false;
  }
}

function init() {
  const form = document.getElementById('token-form');
  const input = document.getElementById('token');
  input.value = state.token;
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    state.token = input.value.trim();
    if (state.token) sessionStorage.setItem(TOKEN_KEY, state.token);
    else sessionStorage.removeItem(TOKEN_KEY);
    state.lastReport = 0;
    if (whatifDue !== Infinity) whatifDue = 0;  // ask again with the new token (unless asking now)
    state.me = null;  // another token may be another person
    showMessage('');
    refresh();
  });
  document.getElementById('token-forget').addEventListener('click', () => {
    state.token = '';
    state.me = null;
    input.value = '';
    sessionStorage.removeItem(TOKEN_KEY);
    refresh();
  });
  for (const b of document.querySelectorAll('button[data-minutes]')) {
    b.addEventListener('click', () => {
      state.minutes = Number(b.dataset.minutes);
      for (const o of document.querySelectorAll('button[data-minutes]')) o.classList.toggle('on', o === b);
      refresh();
    });
  }
  for (const b of document.querySelectorAll('button[data-show]')) {
    b.addEventListener('click', () => {
      state.mine = b.dataset.show === 'mine';
      renderMe();
      refresh();
    });
  }
  refresh();
  setInterval(refresh, POLL_MS);
}

document.addEventListener('DOMContentLoaded', init);
