// gpuslice web dashboard: the what-if (GET /v1/whatif, docs/whatif.md): the daemon replays its
// own last week under the built-in cures and caches the answer for 10 minutes. Shows the
// verdict, the headlines and one row per scenario; unknown figures stay "unknown". Uses
// format.js; app.js's loop calls refreshWhatif() when `whatifDue` has passed and sets it to 0
// when a new token is given (on TCP the first answer, before a token, is a 401).
'use strict';

const WHATIF_MS = 10 * 60 * 1000;  // the daemon keeps an answer 10 minutes
const WHATIF_RETRY_MS = 15000;     // after an error, e.g. another what-if being computed (HTTP 503)
let whatifDue = 0;                 // Date.now() after which the loop asks again; Infinity while asking

// Given back is negative where a scenario holds more than the recording did.
function givenBack(h) { return known(h) && h < 0 ? `${gpuHours(-h)} more held` : gpuHours(h); }

function renderWhatif(box, r) {
  if (r.status !== 200 || !r.body || typeof r.body !== 'object') {
    const why = r.status === 0 ? r.error : `HTTP ${r.status}${r.error ? `: ${r.error}` : ''}`;
    box.replaceChildren(el('p', 'muted', `what-if not available (${why})`));
    return;
  }
  const b = r.body;
  const parts = [];
  if (b.verdict && typeof b.verdict.text === 'string') parts.push(el('p', 'verdict', b.verdict.text));
  if (Array.isArray(b.headlines) && b.headlines.length) {
    const ul = el('ul');
    for (const h of b.headlines) if (typeof h === 'string') ul.append(el('li', null, h));
    parts.push(ul);
  }
  const scenarios = Array.isArray(b.scenarios) ? b.scenarios.filter((s) => s && typeof s === 'object') : [];
  const queues = [];
  for (const s of scenarios) {
    for (const w of Array.isArray(s.waits) ? s.waits : []) {
      if (w && w.jobs > 0 && typeof w.queue === 'string' && !queues.includes(w.queue)) queues.push(w.queue);
    }
  }
  const t = el('table', 'report-table');
  const head = el('tr');
  for (const c of ['scenario', 'GPUs', 'held', 'idle', 'unknown', 'given back', 'sessions cut', 'with work left',
    'owners\' cost'].concat(queues.map((q) => `p95 wait ${q}`))) head.append(el('th', null, c));
  const thead = el('thead');
  thead.append(head);
  const tbody = el('tbody');
  for (const s of scenarios) {
    const tr = el('tr');
    tr.title = typeof s.description === 'string' ? s.description : '';
    const cut = s.cut || {};
    tr.append(td(String(s.name)), td(String(s.gpus)), td(gpuHours(s.held_gpu_hours)), td(gpuHours(s.idle_gpu_hours)),
      td(gpuHours(s.unknown_gpu_hours)), td(givenBack(s.given_back_gpu_hours)), td(String(cut.sessions)),
      td(String(cut.with_work_left)), td(duration(cut.owner_cost_us)));
    for (const q of queues) {
      const w = (Array.isArray(s.waits) ? s.waits : []).find((x) => x && x.queue === q);
      tr.append(td(w && w.jobs > 0 ? duration(w.p95_us) : '—'));
    }
    tbody.append(tr);
  }
  t.append(thead, tbody);
  parts.push(t);
  const notes = (Array.isArray(b.notes) ? b.notes : []).filter((n) => typeof n === 'string');
  if (notes.length) parts.push(el('p', 'muted small', notes.join(' · ')));
  box.replaceChildren(...parts);
}

async function refreshWhatif() {
  whatifDue = Infinity;
  const r = await api('GET', '/v1/whatif?since=7d');
  renderWhatif(document.getElementById('whatif'), r);
  whatifDue = Date.now() + (r.status === 200 ? WHATIF_MS : WHATIF_RETRY_MS);
}
