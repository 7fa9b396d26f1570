// gpuslice web dashboard: the teams panel (GET /v1/teams, docs/teams.md), the page's form of
// `gpuslice teams`. Per team and queue what the config guarantees and allows and what the
// scheduler sees now, a bar of held against guarantee and limit (the part past the guarantee,
// borrowed, hatched), the team's weight, decayed usage and fair-share rank, the notes as
// warnings and the jobs of no team. The section stays hidden on a site without [teams]. Team
// names and members are written by the site and treated as hostile like every other text: they
// reach the page through textContent only (format.js). Uses format.js; app.js's loop calls
// renderTeams() with each answer.
'use strict';

const UNKNOWN = '—';

// A figure the daemon may not know (absent, null, not a number of the right kind): when `ok`,
// its text with `title` saying what it is; else "—" with `unknownTitle`, never 0.
function figureTd(ok, text, cls, title, unknownTitle) {
  const c = td(ok ? text : UNKNOWN, ok ? cls : `${cls} unknown`);
  c.title = ok ? title : unknownTitle;
  return c;
}

function usageTd(t, halfLifeUs) {
  const h = t.usage_gpu_hours;
  return figureTd(typeof h === 'number' && isFinite(h) && h >= 0, gpuHours(h), 'usage',
                  `GPU-hours used, decayed with a half-life of ${duration(halfLifeUs)}`,
                  'decayed usage not known (the daemon did not give it)');
}

function rankTd(t) {
  return figureTd(Number.isInteger(t.rank) && t.rank >= 1, String(t.rank), 'rank',
                  'place in the fair-share order of the over-quota pool (1: served first)',
                  'fair-share rank not known (the daemon did not give it)');
}

// The bar of one team in one queue against `scale` milli-GPU (the largest figure in the queue,
// so that the teams of a queue compare): held within the guarantee, borrowed past it (hatched,
// not only another colour), the unused guarantee as an outline, the limit as a mark. The
// figures are in the row's cells; the bar's label says them in words for screen readers.
function teamBar(q, scale) {
  const g = Math.max(0, q.guaranteed || 0), h = Math.max(0, q.held || 0);
  const limit = Number.isInteger(q.limit) ? q.limit : null;
  const bar = el('div', 'team-bar');
  bar.setAttribute('role', 'img');
  const words = [`holds ${milliGpu(h)} of ${milliGpu(g)} guaranteed`];
  if (h > g) words.push(`${milliGpu(h - g)} borrowed`);
  words.push(limit === null ? 'no limit' : `limit ${milliGpu(limit)}`);
  bar.setAttribute('aria-label', words.join(', '));
  bar.title = words.join(', ');
  const pct = (m) => `${(100 * m) / (scale || 1)}%`;
  const part = (cls, from, len) => {
    const p = el('div', cls);
    p.style.left = pct(from);  // CSSOM: allowed by the CSP (no inline style attribute)
    p.style.width = pct(len);
    bar.appendChild(p);
  };
  if (g > h) part('unused', h, g - h);
  if (Math.min(h, g) > 0) part('within', 0, Math.min(h, g));
  if (h > g) part('borrowed', g, h - g);
  if (limit !== null) part('limit-mark', limit, 0);
  return bar;
}

function teamRow(cells) {
  const tr = el('tr');
  tr.append(...cells);
  return tr;
}

// A queue's figures, "—" where one is missing (milliGpu), never 0; a null limit is "none".
function queueCells(q, scale) {
  const n = (v) => td(milliGpu(v));
  const cells = [td(q.queue, 'queue'), n(q.guaranteed), n(q.held), n(q.borrowed), n(q.lent),
    td(q.limit === null || q.limit === undefined ? 'none' : milliGpu(q.limit)),
    td(Number.isInteger(q.waiting) ? String(q.waiting) : UNKNOWN)];
  ['guaranteed', 'held', 'borrowed', 'lent', 'limit', 'waiting'].forEach((k, i) => cells[i + 1].classList.add(k));
  const bar = td(null, 'bar-cell');
  bar.appendChild(teamBar(q, scale));
  cells.push(bar);
  return cells;
}

function renderTeams(r) {
  const section = document.getElementById('teams-panel');
  const b = r.body;
  if (r.error || !b || typeof b !== 'object') {
    // A daemon without the view (or an error) hides nothing that was never shown; once shown,
    // the panel says it could not be updated rather than keeping old figures silently.
    if (!section.hidden) {
      document.getElementById('teams-status').textContent = visible(`not updated: ${r.error || 'no answer'}`);
    }
    return;
  }
  section.dataset.enabled = String(b.enabled === true);
  section.hidden = b.enabled !== true;
  if (b.enabled !== true) return;
  const halfLife = known(b.half_life_us) ? duration(b.half_life_us) : UNKNOWN;
  document.getElementById('teams-status').textContent =
    `cluster ${gpus(b.cluster_milli)}; usage decays with a half-life of ${halfLife}`;
  const teams = (Array.isArray(b.teams) ? b.teams : []).filter((t) => t && typeof t === 'object');
  const noTeam = (Array.isArray(b.no_team) ? b.no_team : []).filter((q) => q && typeof q === 'object');
  // The common scale of each queue's bars.
  const scale = new Map();
  const grow = (queue, v) => { if (known(v)) scale.set(queue, Math.max(scale.get(queue) || 0, v)); };
  for (const t of teams) {
    for (const q of Array.isArray(t.queues) ? t.queues : []) {
      for (const k of ['guaranteed', 'held', 'limit']) grow(q.queue, q[k]);
    }
  }
  for (const q of noTeam) grow(q.queue, q.held);
  const rows = [];
  for (const t of teams) {
    const queues = (Array.isArray(t.queues) ? t.queues : []).filter((q) => q && typeof q === 'object');
    const name = el('th', 'team', t.name);
    name.scope = 'row';
    const members = td((Array.isArray(t.members) ? t.members : []).map(String).join(', '), 'members');
    const teamCells = [name, members, figureTd(Number.isInteger(t.weight), String(t.weight), 'weight',
      'its weight in the fair share of what lies past the guarantees', 'weight not known'),
      usageTd(t, b.half_life_us), rankTd(t)];
    const span = Math.max(1, queues.length);
    for (const c of teamCells) c.rowSpan = span;
    if (!queues.length) {
      const empty = td('nothing guaranteed, held or waiting', 'empty');
      empty.colSpan = 8;
      const tr = teamRow([...teamCells, empty]);
      tr.dataset.team = String(t.name);
      rows.push(tr);
    }
    queues.forEach((q, i) => {
      const tr = teamRow([...(i === 0 ? teamCells : []), ...queueCells(q, scale.get(q.queue))]);
      tr.dataset.team = String(t.name);
      tr.dataset.queue = String(q.queue);
      rows.push(tr);
    });
  }
  noTeam.forEach((q, i) => {
    const cells = [];
    if (i === 0) {
      const name = el('th', 'team', '(no team)');
      name.scope = 'row';
      name.title = 'jobs of users in no team: guaranteed nothing, all they hold is borrowed';
      cells.push(name, td('', 'members'));
      for (const k of ['weight', 'usage', 'rank']) cells.push(figureTd(false, '', k, '', `no ${k}: these jobs are in no team`));
      for (const c of cells) c.rowSpan = noTeam.length;
    }
    // As `gpuslice teams` shows them: guaranteed nothing, all they hold borrowed.
    const figures = { ...q, guaranteed: 0, borrowed: q.held, lent: 0, limit: null };
    const tr = teamRow([...cells, ...queueCells(figures, scale.get(q.queue))]);
    tr.classList.add('no-team');
    tr.dataset.queue = String(q.queue);
    rows.push(tr);
  });
  document.querySelector('#teams tbody').replaceChildren(...(rows.length ? rows : [emptyRow(13, 'no team is configured')]));
  const notes = (Array.isArray(b.notes) ? b.notes : []).filter((n) => typeof n === 'string');
  document.getElementById('team-notes').replaceChildren(...notes.map((n) => el('li', 'team-note', `warning: ${n}`)));
}
