// gpuslice web dashboard (docs/ui.md). Reads the daemon's JSON views every few seconds and
// draws them; cancels through the ordinary API, so the daemon decides who may. Every text
// from the daemon (job commands, user and queue names, reasons) is hostile input: it goes
// into the page only through textContent / text nodes, never as HTML.
'use strict';

const POLL_MS = 2000;
const REPORT_MS = 30000;
const TOKEN_KEY = 'gpuslice-token';
const SVG = 'http://www.w3.org/2000/svg';

const state = {
  token: sessionStorage.getItem(TOKEN_KEY) || '',  // only this tab's session; never stored elsewhere
  clockOffsetUs: 0,      // daemon clock minus browser clock
  armed: null,           // {id, until}: a cancel button clicked once, waiting for the confirm
  queues: new Map(),
  lastReport: 0,
  minutes: 60,           // the devices' chart window
};

// ---- small DOM helpers (text only) ----

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined && text !== null) e.textContent = String(text);
  return e;
}

function td(text, cls) { return el('td', cls, text); }

let messageTimer = null;
function showMessage(text, info) {
  const m = document.getElementById('message');
  clearTimeout(messageTimer);
  if (info && text) messageTimer = setTimeout(() => { m.hidden = true; }, 8000);  // errors stay
  m.textContent = text;
  m.className = info ? 'info' : '';
  m.hidden = !text;
}

// ---- formatting ----

function argvText(argv) {
  if (!Array.isArray(argv)) return '';
  // An argument that is not UTF-8 arrives as {"b64": ...}; shown as a marker, not decoded.
  return argv.map((a) => (typeof a === 'string' ? a : '<bytes>')).join(' ');
}

function duration(us) {
  if (us === null || us === undefined || !isFinite(us)) return '—';
  let s = Math.max(0, Math.round(us / 1e6));
  const d = Math.floor(s / 86400); s -= d * 86400;
  const h = Math.floor(s / 3600); s -= h * 3600;
  const m = Math.floor(s / 60); s -= m * 60;
  if (d) return `${d}d ${h}h`;
  if (h) return `${h}h ${String(m).padStart(2, '0')}m`;
  if (m) return `${m}m ${String(s).padStart(2, '0')}s`;
  return `${s}s`;
}

function bytes(n) {
  if (n === null || n === undefined) return '—';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  let v = n;
  while (v >= 1024 && i < units.length - 1) { v /= 1024; i += 1; }
  return `${v >= 10 || i === 0 ? v.toFixed(0) : v.toFixed(1)} ${units[i]}`;
}

function gpus(milli) { return `${(milli / 1000).toFixed(milli % 1000 === 0 ? 0 : 2)} GPU`; }

function nowUs() { return Date.now() * 1000 + state.clockOffsetUs; }

// ---- the API ----

async function api(method, path) {
  const headers = { Accept: 'application/json' };
  if (state.token) headers.Authorization = `Bearer ${state.token}`;
  let r;
  try {
    r = await fetch(path, { method, headers, cache: 'no-store', credentials: 'omit' });
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

// Utilisation over time as an SVG polyline per run of known buckets: a null bucket (nothing
// measured) breaks the line, so "unknown" never looks like 0.
function sparkline(values) {
  const w = 240, h = 40;
  const svg = document.createElementNS(SVG, 'svg');
  svg.setAttribute('viewBox', `0 0 ${w} ${h}`);
  svg.setAttribute('preserveAspectRatio', 'none');
  svg.setAttribute('class', 'spark');
  const axis = document.createElementNS(SVG, 'line');
  axis.setAttribute('x1', '0'); axis.setAttribute('x2', String(w));
  axis.setAttribute('y1', String(h - 0.5)); axis.setAttribute('y2', String(h - 0.5));
  axis.setAttribute('class', 'axis');
  svg.appendChild(axis);
  const n = values.length;
  if (n === 0) return svg;
  const x = (i) => (n === 1 ? w : (i * w) / (n - 1));
  const y = (v) => h - 1 - (Math.min(100, Math.max(0, v)) / 100) * (h - 2);
  let run = [];
  const flush = () => {
    if (run.length === 1) {
      const c = document.createElementNS(SVG, 'circle');
      c.setAttribute('cx', String(run[0][0])); c.setAttribute('cy', String(run[0][1]));
      c.setAttribute('r', '1.5'); c.setAttribute('class', 'dot');
      svg.appendChild(c);
    } else if (run.length > 1) {
      const p = document.createElementNS(SVG, 'polyline');
      p.setAttribute('points', run.map(([a, b]) => `${a.toFixed(1)},${b.toFixed(1)}`).join(' '));
      p.setAttribute('class', 'line');
      svg.appendChild(p);
    }
    run = [];
  };
  values.forEach((v, i) => {
    if (v === null || v === undefined) flush();
    else run.push([x(i), y(v)]);
  });
  flush();
  const title = document.createElementNS(SVG, 'title');
  const known = values.filter((v) => v !== null && v !== undefined).length;
  title.textContent = `${known} of ${n} intervals measured`;
  svg.appendChild(title);
  return svg;
}

function renderDevices(devs, history) {
  const box = document.getElementById('devices');
  const byIndex = new Map();
  if (history) for (const d of history.devices || []) byIndex.set(d.index, d);
  const cards = (devs.devices || []).map((d) => {
    const c = el('div', 'card');
    c.dataset.device = String(d.index);
    c.appendChild(el('h3', null, `GPU ${d.index} · ${d.model}`));
    const row = (a, b) => { const r = el('div', 'row'); r.append(el('span', null, a), el('span', null, b)); return r; };
    const mode = d.draining ? `${d.mode} (draining)` : d.mode;
    const sl = d.slices || [];
    c.appendChild(row(`mode ${mode}`, sl.length ? `${sl.length} slice${sl.length > 1 ? 's' : ''} (${sl.map((x) => `#${x}`).join(', ')})` : 'no slice'));
    c.appendChild(row(`held ${gpus(d.used_milli || 0)}`, `memory ${bytes(d.memory_used)} / ${bytes(d.memory)}`));
    const bar = el('div', 'bar');
    const fill = el('div');
    fill.style.width = `${Math.min(100, (d.used_milli || 0) / 10)}%`;  // CSSOM: allowed by the CSP
    bar.appendChild(fill);
    c.appendChild(bar);
    c.appendChild(row('SM now', d.util_percent === null || d.util_percent === undefined ? 'not measured' : `${d.util_percent.toFixed(0)} %`));
    const h = byIndex.get(d.index);
    c.appendChild(sparkline(h ? h.sm_util_percent : []));
    c.appendChild(row(`−${state.minutes} min`, 'now'));
    c.lastChild.classList.add('axis-labels');
    return c;
  });
  box.replaceChildren(...cards);
}

// ---- queues and jobs ----

function renderQueues(qs) {
  state.queues = new Map((qs.queues || []).map((q) => [q.name, q]));
  const rows = (qs.queues || []).map((q) => {
    const tr = el('tr');
    tr.append(td(q.name), td(q.default_kind), td(q.pending), td(q.running),
              td(q.pending ? duration(q.oldest_wait_us) : '—'),
              td(q.idle_reclaim ? `after ${duration(q.idle_window_us)} idle, ${duration(q.idle_grace_us)} grace` : 'no'));
    return tr;
  });
  document.querySelector('#queues tbody').replaceChildren(...rows);
}

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

function emptyRow(cols, text) {
  const tr = el('tr');
  const c = td(text, 'empty');
  c.colSpan = cols;
  tr.appendChild(c);
  return tr;
}

function asked(j) {
  const parts = [];
  if (j.kind) parts.push(j.kind);
  if (j.gpus) parts.push(`${j.gpus} GPU`);
  if (j.milli) parts.push(gpus(j.milli));
  if (j.memory) parts.push(bytes(j.memory));
  if (j.model) parts.push(j.model);
  return parts.join(' ') || 'queue default';
}

function renderPending(jobs) {
  const now = nowUs();
  const rows = jobs.filter((j) => j.state === 'pending').map((j) => {
    const tr = el('tr');
    tr.dataset.job = String(j.id);
    const why = j.pending_reason ? j.pending_reason.message : 'not yet examined by the scheduler';
    const act = td();
    act.appendChild(cancelButton(j));
    tr.append(td(j.id), td(j.user), td(j.queue), td(argvText(j.argv), 'cmd'), td(asked(j)),
              td(duration(now - j.submit_time_us)), td(why, 'reason'), act);
    return tr;
  });
  document.querySelector('#pending tbody').replaceChildren(...(rows.length ? rows : [emptyRow(8, 'no job is waiting')]));
}

// When the idle policy acts next: a warned job's reclaim deadline, else the warning that
// comes when the idle window fills. Unmeasured: never reclaimed for idleness (not known).
function idleCountdown(j, s, q) {
  const now = nowUs();
  if (j.warn_deadline_us > 0) {
    return { text: `reclaim in ${duration(j.warn_deadline_us - now)}`, cls: 'warned' };
  }
  if (!s) return { text: '—' };
  if (s.idle_state === 'unmeasured' || s.idle_seconds === null || s.idle_seconds === undefined) {
    return { text: 'not measured: not reclaimed' };
  }
  if (!q || !q.idle_reclaim) {
    return { text: s.activity === 'active' ? 'active (no idle reclaim)' : `idle ${duration(s.idle_seconds * 1e6)} (no reclaim)` };
  }
  if (s.activity === 'active') return { text: `active (warning after ${duration(q.idle_window_us)} idle)` };
  return { text: `idle ${duration(s.idle_seconds * 1e6)}; warning in ${duration(q.idle_window_us - s.idle_seconds * 1e6)}` };
}

function renderRunning(jobs, slices) {
  const bySlice = new Map((slices.slices || []).map((s) => [s.id, s]));
  const now = nowUs();
  const rows = jobs.filter((j) => j.state !== 'pending').map((j) => {
    const s = bySlice.get(j.slice);
    const tr = el('tr');
    tr.dataset.job = String(j.id);
    let slice = '—', held = '—', used = '—';
    if (s) {
      const devs = s.devices || [];
      slice = `${s.kind} on GPU ${devs.join(',')}`;
      const heldMilli = (s.milli || 0) * Math.max(1, devs.length);
      held = gpus(heldMilli) + (s.memory_cap ? `, ${bytes(s.memory_cap)}` : '');
      used = s.util_percent === null || s.util_percent === undefined
        ? 'not measured'
        : `${gpus(Math.round((heldMilli * s.util_percent) / 100))} (${s.util_percent} %)`;
    }
    const cd = idleCountdown(j, s, state.queues.get(j.queue));
    const activity = j.state === 'running' ? (j.activity || 'not sampled yet') : j.state;
    const act = td();
    act.appendChild(cancelButton(j));
    const left = j.time_left_us === null || j.time_left_us === undefined ? 'no limit' : duration(j.deadline_us - now);
    tr.append(td(j.id), td(j.user), td(j.queue), td(argvText(j.argv), 'cmd'), td(slice), td(held), td(used),
              td(activity), td(cd.text, cd.cls), td(left), act);
    return tr;
  });
  document.querySelector('#running tbody').replaceChildren(...(rows.length ? rows : [emptyRow(11, 'nothing is running')]));
}

// ---- report (GET /v1/report; shown only where the daemon has it) ----

function scalar(v) { return v === null || ['string', 'number', 'boolean'].includes(typeof v); }

function fmtValue(v) {
  if (v === null) return '—';
  if (typeof v === 'number') return Number.isInteger(v) ? String(v) : v.toFixed(2);
  return String(v);
}

function renderReportInto(box, title, r) {
  const parts = [el('h3', null, title)];
  if (r.status !== 200 || !r.body || typeof r.body !== 'object') {
    const why = r.status === 0 ? r.error : `HTTP ${r.status}${r.error ? `: ${r.error}` : ''}`;
    parts.push(el('p', 'muted report-missing', `report not available (${why})`));
    box.replaceChildren(...parts);
    return;
  }
  const b = r.body;
  // The verdict is {code, text} (docs/report.md); a plain string is shown as it is.
  const verdict = b.verdict && typeof b.verdict === 'object' ? b.verdict.text : b.verdict;
  parts.push(el('p', 'verdict', verdict ? verdict : 'no verdict in the report'));
  const dl = el('dl', 'figures');
  // The period's totals (held, used, idle GPU-hours...; null: not measured), then any other
  // plain figure of the answer.
  const figures = Object.entries(b.totals && typeof b.totals === 'object' ? b.totals : {})
    .concat(Object.entries(b));
  for (const [k, v] of figures) {
    if (k === 'verdict' || k === 'simulated' || !scalar(v)) continue;
    dl.append(el('dt', null, k), el('dd', null, v === null ? 'unknown' : fmtValue(v)));
  }
  if (dl.childElementCount) parts.push(dl);
  // Each list of records (e.g. one per queue) as a table of its plain fields.
  for (const [k, v] of Object.entries(b)) {
    if (!Array.isArray(v) || !v.length || typeof v[0] !== 'object' || v[0] === null) continue;
    const cols = [];
    for (const row of v) for (const [ck, cv] of Object.entries(row)) if (scalar(cv) && !cols.includes(ck)) cols.push(ck);
    const t = el('table');
    const head = el('tr');
    for (const c of cols) head.appendChild(el('th', null, c));
    const thead = el('thead'); thead.appendChild(head);
    const tbody = el('tbody');
    for (const row of v.slice(0, 50)) {
      const tr = el('tr');
      for (const c of cols) tr.appendChild(td(c in row ? fmtValue(row[c]) : ''));
      tbody.appendChild(tr);
    }
    t.append(thead, tbody);
    parts.push(el('p', 'muted small', k), t);
  }
  box.replaceChildren(...parts);
}

async function refreshReport() {
  state.lastReport = Date.now();
  const [day, week] = await Promise.all([api('GET', '/v1/report?since=1d&by=queue'),
                                         api('GET', '/v1/report?since=7d&by=queue')]);
  renderReportInto(document.getElementById('report-1d'), 'Last day', day);
  renderReportInto(document.getElementById('report-7d'), 'Last week', week);
}

// ---- the loop ----

let busy = false;
async function refresh() {
  if (busy) return;
  busy = true;
  try {
    const [devs, hist, qs, jobs, slices] = await Promise.all([
      api('GET', '/v1/devices'), api('GET', `/v1/devices/history?minutes=${state.minutes}`), api('GET', '/v1/queues'),
      api('GET', '/v1/jobs?state=active'), api('GET', '/v1/slices')]);
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
    if (hist.body && typeof hist.body.now_us === 'number') state.clockOffsetUs = hist.body.now_us - Date.now() * 1000;
    document.getElementById('simulated').hidden = !devs.body.simulated;
    renderDevices(devs.body, hist.error ? null : hist.body);
    renderQueues(qs.body);
    const list = jobs.body.jobs || [];
    renderPending(list);
    renderRunning(list, slices.body);
    upd.textContent = `updated ${new Date().toLocaleTimeString()}`;
    if (Date.now() - state.lastReport > REPORT_MS) refreshReport();
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
    showMessage('');
    refresh();
  });
  document.getElementById('token-forget').addEventListener('click', () => {
    state.token = '';
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
  refresh();
  setInterval(refresh, POLL_MS);
}

document.addEventListener('DOMContentLoaded', init);
