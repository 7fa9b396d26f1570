// gpuslice web dashboard: DOM helpers, the formatting of figures for people, and small SVG
// charts (docs/ui.md). Loaded before report.js and app.js, which use these globals. Every
// text from the daemon is hostile input: it goes into the page only through textContent /
// text nodes, never as HTML.
'use strict';

const SVG = 'http://www.w3.org/2000/svg';

// ---- DOM (text only) ----

// Invisible and direction-formatting characters (a right-to-left override reorders what follows
// it, zero-width ones hide text) shown as escapes, as the CLI does (core/text.h ForTerminal), so a
// submitted command cannot disguise itself in others' views.
const INVISIBLE = /[\u00ad\u061c\u180e\u200b-\u200f\u2028-\u202e\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb]|\udb40[\udc01\udc20-\udc7f]/g;
function visible(text) {
  return String(text).replace(INVISIBLE, (c) => {
    const cp = c.codePointAt(0);
    return cp > 0xffff ? `\\U${cp.toString(16).padStart(8, '0')}` : `\\u${cp.toString(16).padStart(4, '0')}`;
  });
}

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined && text !== null) e.textContent = visible(text);
  return e;
}

function td(text, cls) { return el('td', cls, text); }

function svgEl(tag, attrs) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
  return e;
}

function emptyRow(cols, text) {
  const tr = el('tr');
  const c = td(text, 'empty');
  c.colSpan = cols;
  tr.appendChild(c);
  return tr;
}

function known(v) { return v !== null && v !== undefined && (typeof v !== 'number' || isFinite(v)); }

// ---- figures, spelled as the CLI spells them ("1h30m", "10GiB", "0.25 GPU") ----

// A duration in µs, as core/units FormatDuration writes it, cut to its two largest units:
// "1h30m", "2d3h", "4m5s", "45s".
function duration(us) {
  if (!known(us)) return '—';
  let s = Math.max(0, Math.round(us / 1e6));
  const parts = [];
  for (const [unit, len] of [['d', 86400], ['h', 3600], ['m', 60], ['s', 1]]) {
    const n = Math.floor(s / len);
    s -= n * len;
    if (n || (parts.length && parts.length < 2)) parts.push(`${n}${unit}`);
    if (parts.length === 2) break;
  }
  while (parts.length > 1 && /^0/.test(parts[parts.length - 1])) parts.pop();
  return parts.length ? parts.join('') : '0s';
}

function bytes(n) {
  if (!known(n)) return '—';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  let v = n;
  while (v >= 1024 && i < units.length - 1) { v /= 1024; i += 1; }
  return `${Number.isInteger(v) || v >= 100 ? v.toFixed(0) : v.toFixed(v >= 10 ? 1 : 2).replace(/\.?0+$/, '')}${units[i]}`;
}

// milli-GPU -> "0.25 GPU", "2 GPUs".
function gpus(milli) {
  if (!known(milli)) return '—';
  const v = milli / 1000;
  const t = Number.isInteger(v) ? String(v) : v.toFixed(3).replace(/0+$/, '');
  return `${t} GPU${v > 1 ? 's' : ''}`;
}

// milli-GPU as core/units FormatMilliGpu and `gpuslice teams` write it: "250m", "2", "1.5".
function milliGpu(m) {
  if (!Number.isInteger(m) || m < 0) return '—';
  if (m % 1000 === 0) return String(m / 1000);
  if (m < 1000) return `${m}m`;
  return `${Math.floor(m / 1000)}.${String(m % 1000).padStart(3, '0')}`.replace(/0+$/, '');
}

// GPU-hours (one whole GPU for an hour); under one, GPU-minutes.
function gpuHours(h) {
  if (!known(h)) return 'unknown';
  if (h < 1) return `${Math.round(h * 60)} GPU-min`;
  return `${h >= 100 ? h.toFixed(0) : h.toFixed(1)} GPU-h`;
}

function percent(p) { return known(p) ? `${Math.round(p)}%` : 'unknown'; }

// A wall-clock time for people: "14:32" today, else "Mon 14:32".
function clock(us) {
  if (!known(us) || us <= 0) return '—';
  const d = new Date(us / 1000);
  const hm = d.toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' });
  const today = new Date();
  if (d.toDateString() === today.toDateString()) return hm;
  return `${d.toLocaleDateString([], { weekday: 'short' })} ${hm}`;
}

// "in 25m" / "25m ago" from a time and now (µs).
function until(us, now) { return us >= now ? `in ${duration(us - now)}` : `${duration(now - us)} ago`; }

function argvText(argv) {
  if (!Array.isArray(argv)) return '';
  // An argument that is not UTF-8 arrives as {"b64": ...}; shown as a marker, not decoded.
  return argv.map((a) => (typeof a === 'string' ? a : '<bytes>')).join(' ');
}

// ---- charts (plain SVG: no script from elsewhere, nothing but what the CSP allows) ----

// Values over time as polylines, one per run of known values: a null (nothing measured) breaks
// the line, so "unknown" never looks like 0. `series`: [{values, cls}]; `max`: the top of the
// y axis. Returns the <svg>, with a <title> saying how much was measured.
function lineChart(series, { w = 240, h = 40, max = 100, cls = 'spark', title = null } = {}) {
  const svg = svgEl('svg', { viewBox: `0 0 ${w} ${h}`, preserveAspectRatio: 'none', class: cls });
  svg.appendChild(svgEl('line', { x1: 0, x2: w, y1: h - 0.5, y2: h - 0.5, class: 'axis' }));
  let n = 0;
  let knownCount = 0;
  for (const s of series) {
    const values = s.values;
    n = Math.max(n, values.length);
    const x = (i) => (values.length === 1 ? w : (i * w) / (values.length - 1));
    const y = (v) => h - 1 - (Math.min(max, Math.max(0, v)) / (max || 1)) * (h - 2);
    let run = [];
    const flush = () => {
      if (run.length === 1) {
        svg.appendChild(svgEl('circle', { cx: run[0][0], cy: run[0][1], r: 1.5, class: `dot ${s.cls || ''}` }));
      } else if (run.length > 1) {
        svg.appendChild(svgEl('polyline', {
          points: run.map(([a, b]) => `${a.toFixed(1)},${b.toFixed(1)}`).join(' '), class: `line ${s.cls || ''}` }));
      }
      run = [];
    };
    values.forEach((v, i) => {
      if (!known(v)) flush();
      else { run.push([x(i), y(v)]); if (s === series[0]) knownCount += 1; }
    });
    flush();
  }
  const t = svgEl('title');
  t.textContent = title || `${knownCount} of ${n} intervals measured`;
  svg.appendChild(t);
  return svg;
}

// Horizontal bars: rows of {label, parts: [{value, cls, text}]} against a common maximum.
function barChart(rows, { unit = '', w = 420 } = {}) {
  const rowH = 18, labelW = 90;
  const h = rows.length * rowH + 4;
  const max = Math.max(1e-9, ...rows.map((r) => Math.max(...r.parts.map((p) => (known(p.value) ? p.value : 0)))));
  const svg = svgEl('svg', { viewBox: `0 0 ${w} ${h}`, class: 'bars', width: w, height: h });
  rows.forEach((r, i) => {
    const y = 2 + i * rowH;
    const label = svgEl('text', { x: 0, y: y + 12, class: 'label' });
    label.textContent = r.label;
    svg.appendChild(label);
    r.parts.forEach((p, k) => {
      const bw = known(p.value) ? ((w - labelW - 150) * p.value) / max : 0;
      const bh = (rowH - 6) / r.parts.length;
      svg.appendChild(svgEl('rect', { x: labelW, y: y + k * bh, width: Math.max(0, bw), height: bh, class: p.cls }));
    });
    const v = svgEl('text', { x: w - 146, y: y + 12, class: 'value' });
    v.textContent = r.parts.map((p) => p.text).join(' / ') + unit;
    svg.appendChild(v);
  });
  return svg;
}
