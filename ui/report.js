// gpuslice web dashboard: the usage report (GET /v1/report, docs/report.md) for people: the
// verdict, the period's figures in GPU-hours and hours/minutes, held vs used over time, per
// queue, waits and the jobs that could never run. Never a raw key of the JSON: every figure
// shown has a name written here. Uses format.js.
'use strict';

// Each period's own span is said, and where the stored history begins inside it, so that a
// day and a week over a young daemon cannot look like the same figures by accident.
function periodLine(b) {
  const p = b.period || {};
  const span = known(p.to_us) && known(p.from_us) ? p.to_us - p.from_us : null;
  let s = `${clock(p.from_us)} – ${clock(p.to_us)} (${duration(span)})`;
  if (known(p.history_from_us) && known(p.from_us) && p.history_from_us > p.from_us) {
    s += `; history only since ${clock(p.history_from_us)}: the figures cover the last ${duration(p.to_us - p.history_from_us)}`;
  }
  return s;
}

function figureList(items) {
  const dl = el('dl', 'figures');
  for (const [name, value, note] of items) {
    const dd = el('dd', null, value);
    if (note) dd.appendChild(el('span', 'muted small', ` ${note}`));
    dl.append(el('dt', null, name), dd);
  }
  return dl;
}

function table(headers, rows, cls) {
  const t = el('table', cls || 'report-table');
  const head = el('tr');
  for (const h of headers) head.appendChild(el('th', null, h));
  const thead = el('thead');
  thead.appendChild(head);
  const tbody = el('tbody');
  for (const r of rows) {
    const tr = el('tr');
    for (const c of r) tr.appendChild(td(c));
    tbody.appendChild(tr);
  }
  t.append(thead, tbody);
  return t;
}

// Held and used GPUs over the period (the report's timeline), with the host's size as the top.
function timelineChart(b) {
  const pts = (b.timeline && Array.isArray(b.timeline.points)) ? b.timeline.points : [];
  const max = Math.max(1, b.devices || 1);
  const box = el('div', 'chart');
  const svg = lineChart([
    { values: pts.map((p) => p.held_gpus), cls: 'held' },
    { values: pts.map((p) => p.used_gpus), cls: 'used' },
  ], { w: 480, h: 90, max, cls: 'timeline',
       title: `held and used GPUs, ${pts.length} buckets of ${duration(b.timeline ? b.timeline.bucket_us : null)}` });
  box.appendChild(svg);
  const legend = el('div', 'legend');
  legend.append(el('span', 'key held', 'held'), el('span', 'key used', 'used'),
                el('span', 'muted', `GPUs, 0 – ${max}; gaps: not measured`));
  box.appendChild(legend);
  return box;
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
  if (b.period) parts.push(el('p', 'muted small period', periodLine(b)));
  // The verdict is {code, text} (docs/report.md); a plain string is shown as it is.
  const verdict = b.verdict && typeof b.verdict === 'object' ? b.verdict.text : b.verdict;
  const v = el('p', 'verdict', verdict ? verdict : 'no verdict in the report');
  if (b.verdict && typeof b.verdict.code === 'string') v.dataset.code = b.verdict.code;
  parts.push(v);
  const t = b.totals && typeof b.totals === 'object' ? b.totals : {};
  const never = b.never_ran && typeof b.never_ran === 'object' ? b.never_ran : null;
  parts.push(figureList([
    ['held', gpuHours(t.held_gpu_hours), known(t.capacity_gpu_hours) ? `of ${gpuHours(t.capacity_gpu_hours)} (${percent(t.held_percent)})` : ''],
    ['used', gpuHours(t.used_gpu_hours), known(t.used_percent_of_measured) ? `${percent(t.used_percent_of_measured)} of the measured held time` : ''],
    ['measured', percent(t.coverage_percent), known(t.unknown_gpu_hours) && t.unknown_gpu_hours > 0 ? `of held time; ${gpuHours(t.unknown_gpu_hours)} unknown` : 'of held time'],
    ['idle', gpuHours(t.idle_gpu_hours), known(t.idle_percent_of_held) ? `${percent(t.idle_percent_of_held)} of held` : ''],
    ['idle reclaim returned', gpuHours(t.reclaim_returned_gpu_hours), ''],
    ['jobs', known(t.jobs) ? String(t.jobs) : '—', `${t.timed_out || 0} hit their time limit, ${t.reclaimed || 0} reclaimed when idle`],
    ['could never run', never ? String(never.jobs) : '—', never && never.jobs ? 'jobs (see below)' : ''],
  ]));
  if (b.timeline) parts.push(timelineChart(b));
  const groups = Array.isArray(b.groups) ? b.groups : [];
  if (groups.length) {
    parts.push(el('h4', null, `By ${b.by || 'queue'}`));
    parts.push(barChart(groups.slice(0, 8).map((g) => ({
      label: String(g.key),
      parts: [{ value: g.held_gpu_hours, cls: 'held', text: gpuHours(g.held_gpu_hours) },
              { value: g.used_gpu_hours, cls: 'used', text: gpuHours(g.used_gpu_hours) }],
    }))));
    parts.push(table([b.by || 'queue', 'held', 'used', 'measured', 'idle', 'jobs', 'reclaimed'],
      groups.slice(0, 20).map((g) => [String(g.key), gpuHours(g.held_gpu_hours), gpuHours(g.used_gpu_hours),
                                      percent(g.coverage_percent), gpuHours(g.idle_gpu_hours), String(g.jobs),
                                      String(g.reclaimed)])));
  }
  const waits = Array.isArray(b.wait) ? b.wait : [];
  if (waits.length) {
    parts.push(el('h4', null, 'Waits'));
    const long = known(b.long_wait_us) ? b.long_wait_us : null;
    parts.push(table(['queue', 'started', 'median wait', 'p95 wait'],
      waits.map((w) => [String(w.queue), String(w.jobs), duration(w.p50_us),
                        duration(w.p95_us) + (long !== null && w.p95_us >= long ? ' (long)' : '')])));
  }
  const reasons = Array.isArray(b.wait_by_reason) ? b.wait_by_reason : [];
  if (reasons.length) {
    parts.push(table(['why jobs waited', 'jobs', 'median', 'p95', 'in all'],
      reasons.map((w) => [String(w.reason), String(w.jobs), duration(w.p50_us), duration(w.p95_us), duration(w.total_us)])));
  }
  if (never && Array.isArray(never.list) && never.list.length) {
    parts.push(el('h4', null, 'Could never run on this host'));
    parts.push(table(['job', 'user', 'queue', 'why'],
      never.list.map((j) => [String(j.job), String(j.user), String(j.queue), String(j.why)])));
  }
  const top = Array.isArray(b.top_idle) ? b.top_idle : [];
  if (top.length) {
    parts.push(el('h4', null, 'Held most while idle'));
    parts.push(table(['job', 'user', 'queue', 'ended as', 'held', 'idle'],
      top.map((j) => [String(j.job), String(j.user), String(j.queue), String(j.state), gpuHours(j.held_gpu_hours),
                      gpuHours(j.idle_gpu_hours)])));
  }
  box.replaceChildren(...parts);
}
