// The Parallax report page. It draws the data `parallax report` embedded as JSON in
// <script id="data">: every number was computed by Parallax (the definitions of `parallax simulate`
// and `parallax compare`); the page only lays them out. No libraries and no network, so that the
// file opens from file:// anywhere and can be mailed or attached to a CI run.
'use strict';

const D = JSON.parse(document.getElementById('data').textContent);
const KINDS = ['F', 'B', 'SEND_F', 'RECV_F', 'SEND_B', 'RECV_B', 'ALLREDUCE', 'OPTIM', 'I', 'W', 'OVERLAP_F_B'];  // plan::ActionKind
const LANES = ['compute', 'send', 'recv', 'allreduce'];                                  // plan::Lane
const COLORS = ['#4c9be8', '#2e9d6b', '#e8a33c', '#d9822b', '#c9a227', '#b5651d', '#8e44ad', '#7f8c8d', '#5cb85c', '#a3c644', '#3f7fbf'];
const PREDICTED = '#8a94a6', MEASURED = '#2f6fde', LIMIT = '#c0392b';

// ---- small helpers

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === 'class') e.className = v;
    else if (k === 'text') e.textContent = v;
    else e.setAttribute(k, v);
  }
  for (const c of children) e.append(c);
  return e;
}

function svg(tag, attrs) {
  const e = document.createElementNS('http://www.w3.org/2000/svg', tag);  // a namespace name, not fetched
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  return e;
}

const ms = v => v.toFixed(3) + ' ms';
const pct = v => (100 * v).toFixed(1) + '%';
const signedPct = v => (v >= 0 ? '+' : '') + (100 * v).toFixed(1) + '%';

function actionId(kind, stage, mb, bucket, overlap) {
  const k = KINDS[kind];
  if (k === 'OVERLAP_F_B' && overlap) return `(${stage}F${mb};${overlap[0]}B${overlap[1]})OVERLAP_F_B`;
  if (k === 'ALLREDUCE') return stage + k + bucket;
  if (k === 'OPTIM') return stage + k;
  return stage + k + mb;
}

/// A table from header texts and rows of cells (text, or {text, cls}).
function table(headers, rows, id) {
  const t = el('table', id ? { id } : {});
  t.append(el('tr', {}, ...headers.map(h => el('th', { text: h }))));
  for (const row of rows) {
    const tr = el('tr');
    for (const c of row) {
      if (c instanceof Node) tr.append(el('td', {}, c));
      else if (typeof c === 'object') tr.append(el('td', { class: c.cls || '', text: c.text }));
      else tr.append(el('td', { text: String(c) }));
    }
    t.append(tr);
  }
  return t;
}

function note(text) { return el('p', { class: 'note', text }); }

function lowerBound(a, x) {
  let lo = 0, hi = a.length;
  while (lo < hi) { const mid = (lo + hi) >> 1; if (a[mid] < x) lo = mid + 1; else hi = mid; }
  return lo;
}

/// A round tick step near span / count: 1, 2 or 5 times a power of ten.
function niceStep(span, count) {
  const raw = span / Math.max(1, count), p = Math.pow(10, Math.floor(Math.log10(raw)));
  return [1, 2, 5, 10].map(m => m * p).find(s => s >= raw) || raw;
}

// ---- summary and step time

function card(label, value, id, extra) {
  const v = el('div', { class: 'value', id, text: value });
  for (const [k, x] of Object.entries(extra || {})) v.dataset[k] = x;
  return el('div', { class: 'card' }, el('div', { class: 'label', text: label }), v);
}

function renderSummary() {
  const s = D.summary, p = D.plan;
  document.getElementById('title').textContent = D.title;
  const tensor = p.grid && p.grid.tensor > 1 ? p.grid.tensor : 1;
  const grid = p.grid && p.grid.data ? `${p.grid.data} x ${p.grid.pipeline}` + (tensor > 1 ? ` x ${tensor}` : '') +
                                           (p.grid.virtual > 1 ? ` x v${p.grid.virtual}` : '') : '';
  document.getElementById('subtitle').textContent = [
    `scenario ${D.scenario}`,
    (tensor > 1 ? `${D.world_size * tensor} GPUs, ${D.world_size} tensor groups of ${tensor} (one row each)` : `${D.world_size} ranks`) +
        (grid ? ` (data x pipeline${tensor > 1 ? ' x tensor' : ''} ${grid})` : ''),
    p.schedule ? `schedule ${p.schedule}` : '', p.chunks ? `${p.chunks} chunks` : '',
    s.measured ? 'predicted against measured' : 'predicted only'].filter(Boolean).join(' · ');
  const cards = document.getElementById('step-cards');
  cards.append(card('predicted step time', ms(s.predicted_step_ms), 'step-predicted', { ms: s.predicted_step_ms }));
  const stepNote = document.getElementById('step-note');
  if (!s.measured) {
    stepNote.textContent = 'No measured run given: add --measured TRACE (from parallax run -o) to compare.';
    return;
  }
  const m = s.measured_step_ms;
  cards.append(card('measured step time (undisturbed)', ms(m.undisturbed), 'step-measured', { ms: m.undisturbed }));
  cards.append(card('step time error', signedPct(s.step_error), 'step-error', { error: s.step_error }));
  stepNote.textContent = `Measured: the ${s.statistic} of the ${m.steps} steps after the warm-up step; their median ` +
    `${ms(m.median)} (error ${signedPct(s.median_error)}), min ${ms(m.min)}, max ${ms(m.max)}; ` +
    `${(100 * m.disturbed_share).toFixed(0)}% of them disturbed (over 10% slower). Error = (predicted - measured) / ` +
    `measured. Action figures are over the undisturbed steps; the timeline shows step ${s.shown_step}, the one ` +
    'closest to the measured step.';
  if (s.only_predicted || s.only_measured)
    stepNote.append(el('strong', { class: 'err-pos', text: ` The traces hold different actions (${s.only_predicted} only ` +
      `predicted, ${s.only_measured} only measured): they are not of the same plan.` }));
}

// ---- charts (SVG)

/// Grouped bars: labels[i] with one bar per series. With more bars than fit, neighbouring labels
/// are merged and the largest value of each group is drawn (the note says so).
function barChart(container, { labels, series, unit, limit, format }) {
  const width = Math.max(400, container.clientWidth || 600), height = 170, left = 64, bottom = 24, top = 10;
  const plotW = width - left - 10, plotH = height - top - bottom;
  const fit = Math.max(1, Math.floor(plotW / (4 * series.length + 2)));
  const group = Math.ceil(labels.length / fit), groups = Math.ceil(labels.length / group);
  const values = series.map(s => {
    const out = [];
    for (let g = 0; g < groups; ++g) out.push(Math.max(...s.values.slice(g * group, (g + 1) * group)));
    return out;
  });
  const max = Math.max(1e-9, ...values.flat(), limit ? limit.value : 0);
  const y = v => top + plotH * (1 - v / max);
  const root = svg('svg', { width, height, role: 'img' });
  const step = niceStep(max, 4);
  for (let v = 0; v <= max * 1.0001; v += step) {
    root.append(svg('line', { x1: left, x2: left + plotW, y1: y(v), y2: y(v), stroke: '#e3e7ee' }));
    const t = svg('text', { x: left - 6, y: y(v) + 4, 'text-anchor': 'end', 'font-size': 11, fill: '#5b6576' });
    t.textContent = format(v);
    root.append(t);
  }
  const slot = plotW / groups, barW = Math.min(48, Math.max(1, (slot - 2) / series.length));
  const labelEvery = Math.ceil(groups / Math.floor(plotW / 70));
  for (let g = 0; g < groups; ++g) {
    series.forEach((s, k) => {
      const v = values[k][g];
      const r = svg('rect', { x: left + g * slot + (slot - barW * series.length) / 2 + k * barW, y: y(v), width: Math.max(0.5, barW - (barW > 3 ? 1 : 0)),
                              height: Math.max(0, y(0) - y(v)), fill: s.color });
      const tip = svg('title');
      tip.textContent = `${labelOf(labels, g, group)}: ${s.name} ${format(v)}`;
      r.append(tip);
      root.append(r);
    });
    if (g % labelEvery === 0) {
      const t = svg('text', { x: left + g * slot + slot / 2, y: height - bottom + 14, 'text-anchor': 'middle', 'font-size': 11, fill: '#5b6576' });
      t.textContent = group > 1 ? labels[g * group] + '+' : labels[g];
      root.append(t);
    }
  }
  if (limit) {
    root.append(svg('line', { x1: left, x2: left + plotW, y1: y(limit.value), y2: y(limit.value), stroke: LIMIT, 'stroke-dasharray': '6 3' }));
    const t = svg('text', { x: left + plotW - 4, y: y(limit.value) - 4, 'text-anchor': 'end', 'font-size': 11, fill: LIMIT });
    t.textContent = limit.label;
    root.append(t);
  }
  container.append(root, legend(series), note(`${unit}` + (group > 1 ? `; ${group} neighbours per bar, the largest drawn` : '')));
}

function labelOf(labels, g, group) {
  return group > 1 ? `${labels[g * group]} .. ${labels[Math.min(labels.length, (g + 1) * group) - 1]}` : labels[g];
}

function legend(series) {
  const p = el('p', { class: 'note' });
  for (const s of series) p.append(el('span', { class: 'swatch', style: `background:${s.color}` }), s.name);
  return p;
}

function measuredSeries(name, values) {
  const out = [{ name: `${name} predicted`, color: PREDICTED, values: values.map(v => v[0]) }];
  if (D.summary.measured) out.push({ name: `${name} measured`, color: MEASURED, values: values.map(v => v[1]) });
  return out;
}

function renderCharts() {
  const stages = D.stages;
  barChart(document.getElementById('bubble-chart'), {
    labels: stages.map(s => `p${s.pipeline_rank}`),
    series: measuredSeries('bubble', stages.map(s => s.bubble_fraction)),
    unit: 'Bubble fraction of the step per pipeline rank (pN holds stages ' +
          stages.map(s => `p${s.pipeline_rank}: ${s.stages.join(',')}`).slice(0, 8).join('; ') +
          (stages.length > 8 ? '; ...' : '') + '), the mean over the replicas that play it',
    format: v => (100 * v).toFixed(0) + '%',
  });
  barChart(document.getElementById('exposed-chart'), {
    labels: D.ranks.map(r => `r${r.rank}`),
    series: measuredSeries('exposed communication', D.ranks.map(r => r.exposed_comm_ms)),
    unit: 'Milliseconds a communication lane is busy while compute is idle, per rank',
    format: v => v.toFixed(v < 10 ? 2 : 0) + ' ms',
  });
  const memory = document.getElementById('memory-chart');
  if (!D.memory.length) { memory.append(note('The trace does not carry its plan: no memory estimate.')); return; }
  const series = [{ name: 'peak memory predicted', color: PREDICTED, values: D.memory.map(m => m.total_mb) }];
  const measured = D.memory.some(m => m.measured_mb !== null);
  if (measured) series.push({ name: 'peak memory measured', color: MEASURED, values: D.memory.map(m => m.measured_mb || 0) });
  // The device's line only where the bars would still show beside it (a small model on a 16 GiB
  // device would be a row of flat bars); otherwise its size goes into the note.
  const device = D.memory[0].device_mb, deviceText = `device ${(device / 1024).toFixed(1)} GiB`;
  const largest = Math.max(...series.flatMap(s => s.values));
  const showDevice = largest >= 0.05 * device;
  barChart(memory, {
    labels: D.memory.map(m => `r${m.rank}`),
    series,
    limit: showDevice ? { value: device, label: deviceText } : null,
    unit: 'MiB per rank: parameters, gradients, optimizer state and activations at the peak, as the plan estimates ' +
          'them' + (measured ? '; measured: the peak of the run\'s live tensors less what they held before the model was built'
                             : ' (this run did not record memory)') +
          (showDevice ? '' : `. The ${deviceText} is off the scale.`),
    format: v => v >= 1024 ? (v / 1024).toFixed(1) + ' GiB' : v.toFixed(0) + ' MiB',
  });
}

// A rate with the unit that shows it: a link that carried a few MB over a long step averages
// well under 0.01 GB/s, which two decimals of GB/s would print as 0.00.
function rate(gbps) {
  const units = [[1, 'GB/s'], [1e-3, 'MB/s'], [1e-6, 'kB/s']];
  const [scale, unit] = units.find(([s]) => gbps >= s) || [1e-9, 'B/s'];
  const v = gbps / scale;
  return `${v.toFixed(v >= 100 ? 0 : v >= 10 ? 1 : 2)} ${unit}`;
}

function renderLinks() {
  const box = document.getElementById('links'), links = D.links;
  if (!links.busiest.length) { box.append(note('No link carried traffic in the prediction (or the trace has no link counters).')); return; }
  const top = links.busiest[0].avg_gbps;
  box.append(table(['link', 'average', 'peak', ''], links.busiest.map(l => [
    { text: l.name, cls: 'text' }, rate(l.avg_gbps), rate(l.peak_gbps),
    el('div', { class: 'bar-cell' }, el('div', { style: `width:${(100 * l.avg_gbps / top).toFixed(1)}%` }))]), 'links-table'));
  box.append(note(`Predicted, averaged over the step; ${links.busiest.length} busiest of ${links.count} links with traffic.`));
}

function errorCell(e) { return { text: signedPct(e), cls: e >= 0 ? 'err-pos' : 'err-neg' }; }

function renderErrors() {
  const box = document.getElementById('kinds');
  if (!D.summary.measured) {
    box.append(note('Errors need a measured run: add --measured TRACE.'));
    document.getElementById('worst-section').hidden = true;
    return;
  }
  box.append(table(['kind', 'actions', 'mean |error|', 'worst error', 'worst action', 'predicted ms', 'measured ms'],
    D.kinds.map(k => [{ text: k.kind, cls: 'text' }, k.actions, pct(k.mean_abs_error), errorCell(k.worst_error),
                      { text: k.worst_action, cls: 'text' }, k.total_ms[0].toFixed(3), k.total_ms[1].toFixed(3)]), 'kinds-table'));
  box.append(note('Duration error of each kind of action, (predicted - measured) / measured, over the actions of one step.'));
  document.getElementById('worst').append(table(['rank', 'action', 'predicted start', 'duration', 'measured start', 'duration', 'differs by'],
    D.worst.map(a => [a.rank, { text: a.action, cls: 'text' }, ms(a.predicted[0]), ms(a.predicted[1]), ms(a.measured[0]),
                      ms(a.measured[1]), ms(a.difference_ms)])));
}

function renderCritical() {
  const box = document.getElementById('critical'), cp = D.critical_path;
  if (!cp.known) {
    box.append(note('Not recorded in a trace file: run parallax report with the scenario (not --predicted) to see it.'));
    document.getElementById('show-critical').disabled = true;
    return;
  }
  const byLane = {};
  for (const a of cp.actions) byLane[a.lane] = (byLane[a.lane] || 0) + a.duration_ms;
  box.append(note(`${cp.actions.length} actions: ` + Object.entries(byLane).map(([l, t]) => `${l} ${ms(t)}`).join(', ') +
                  '. The chain of actions that set the step time: each one waited on the one before it.'));
  const shown = cp.actions.slice(0, 200);
  box.append(table(['#', 'rank', 'action', 'lane', 'start', 'duration'],
    shown.map((a, i) => [i + 1, a.rank, { text: a.action, cls: 'text' }, { text: a.lane, cls: 'text' }, ms(a.start_ms), ms(a.duration_ms)]),
    'critical-table'));
  if (cp.actions.length > shown.length) box.append(note(`... and ${cp.actions.length - shown.length} more.`));
}

// ---- tuner

function overridesText(o) {
  const parts = Object.entries(o || {}).map(([k, v]) => `${k.replace(/^parallel\./, '')}=${typeof v === 'string' ? v : JSON.stringify(v)}`);
  return parts.length ? parts.join(', ') : '(as given)';
}

function renderTune() {
  const t = D.tune;
  if (!t) return;
  document.getElementById('tune-section').hidden = false;
  const best = t.best || t.ranked[0];
  document.getElementById('tune-summary').append(note(
    `${t.configs_evaluated} configurations simulated (${t.configs_pruned} pruned, ${t.configs_over_memory} over memory) in ` +
    `${Number(t.wall_s).toFixed(1)} s. Best: ${overridesText(best.overrides)}, ${ms(best.predicted_step_ms)}` +
    (t.speedup_vs_given ? `, ${Number(t.speedup_vs_given).toFixed(2)}x the scenario as given.` : '.')));
  paretoChart(document.getElementById('pareto-chart'), t);
  document.getElementById('tune-table').append(table(['#', 'configuration', 'predicted step', 'peak memory'],
    t.ranked.map((e, i) => [i + 1, { text: overridesText(e.overrides), cls: 'text' }, ms(e.predicted_step_ms),
                            e.peak_memory_mb.toFixed(0) + ' MiB']), 'tune-table-ranked'));
}

/// Step time against peak memory: every ranked configuration, the Pareto frontier joined.
function paretoChart(container, t) {
  const points = t.ranked.concat(t.pareto || []);
  const width = Math.max(400, container.clientWidth || 600), height = 240, left = 70, bottom = 36, top = 10;
  const plotW = width - left - 20, plotH = height - top - bottom;
  const xs = points.map(p => p.peak_memory_mb), ys = points.map(p => p.predicted_step_ms);
  const [x0, x1] = [Math.min(...xs) * 0.95, Math.max(...xs) * 1.05 + 1e-9], [y0, y1] = [Math.min(...ys) * 0.95, Math.max(...ys) * 1.05 + 1e-9];
  const X = v => left + plotW * (v - x0) / (x1 - x0), Y = v => top + plotH * (1 - (v - y0) / (y1 - y0));
  const root = svg('svg', { width, height, role: 'img' });
  root.append(svg('rect', { x: left, y: top, width: plotW, height: plotH, fill: 'none', stroke: '#d6dbe3' }));
  const axis = (x, y, text, anchor) => {
    const e = svg('text', { x, y, 'font-size': 11, fill: '#5b6576', 'text-anchor': anchor });
    e.textContent = text;
    root.append(e);
  };
  axis(left + plotW / 2, height - 6, 'peak memory (MiB)', 'middle');
  axis(left - 6, top + 10, ms(y1), 'end');
  axis(left - 6, top + plotH, ms(y0), 'end');
  axis(left, top + plotH + 14, x0.toFixed(0), 'start');
  axis(left + plotW, top + plotH + 14, x1.toFixed(0), 'end');
  const dot = (p, r, fill, stroke) => {
    const c = svg('circle', { cx: X(p.peak_memory_mb), cy: Y(p.predicted_step_ms), r, fill, stroke: stroke || 'none', 'stroke-width': 2 });
    const tip = svg('title');
    tip.textContent = `${overridesText(p.overrides)}: ${ms(p.predicted_step_ms)}, ${p.peak_memory_mb.toFixed(0)} MiB`;
    c.append(tip);
    root.append(c);
  };
  t.ranked.forEach(p => dot(p, 3, PREDICTED));
  const frontier = (t.pareto || []).slice().sort((a, b) => a.peak_memory_mb - b.peak_memory_mb);
  if (frontier.length)
    root.append(svg('polyline', { points: frontier.map(p => `${X(p.peak_memory_mb)},${Y(p.predicted_step_ms)}`).join(' '),
                                  fill: 'none', stroke: LIMIT, 'stroke-width': 1.5 }));
  frontier.forEach(p => dot(p, 4, LIMIT));
  if (t.best) dot(t.best, 8, 'none', MEASURED);
  container.append(root, note('Each dot a ranked configuration; red: the Pareto frontier (nothing both faster and smaller); ' +
                              'ringed: the pick.'));
}

// ---- timeline

/// One timeline's events indexed by (rank, lane), each list sorted by start, for drawing only what
/// is in view.
function indexLayer(cols) {
  if (!cols) return null;
  const lists = new Map();
  for (let i = 0; i < cols.start.length; ++i) {
    const key = cols.rank[i] * 4 + cols.lane[i];
    if (!lists.has(key)) lists.set(key, []);
    lists.get(key).push(i);
  }
  for (const [key, idx] of lists) {
    idx.sort((a, b) => cols.start[a] - cols.start[b]);
    let maxDur = 0;
    for (const i of idx) maxDur = Math.max(maxDur, cols.end[i] - cols.start[i]);
    lists.set(key, { idx, starts: Float64Array.from(idx, i => cols.start[i]), maxDur });
  }
  return { cols, lists };
}

/// The zoomable timeline. Rows are (rank, lane) while they fit; zoomed out over many ranks, one row
/// stands for a group of neighbouring ranks (all their lanes), so that a 1,024-rank plan draws a
/// few hundred rows, and within a row actions narrower than a few pixels merge into one run.
/// Predicted actions are outlines when a measured step is shown, measured ones fill inside them.
class Timeline {
  constructor(canvas) {
    this.canvas = canvas;
    this.ctx = canvas.getContext('2d');
    this.predicted = indexLayer(D.timeline.predicted);
    this.measured = indexLayer(D.timeline.measured);
    this.world = Math.max(1, D.world_size);
    const present = new Set(D.timeline.predicted.lane);
    this.lanes = [0, 1, 2, 3].filter(l => present.has(l));
    this.gutter = 120;
    this.axis = 22;
    this.maxRows = 48;
    this.critical = new Set(D.critical_path.actions.map(a => a.event));
    this.showCritical = false;
    const rows = Math.min(this.world * this.lanes.length, this.maxRows);
    this.cssHeight = this.axis + rows * Math.max(16, Math.min(26, 360 / rows)) + 4;
    let lo = Infinity, hi = -Infinity;
    for (const layer of [this.predicted, this.measured]) {
      if (!layer) continue;
      for (let i = 0; i < layer.cols.start.length; ++i) { lo = Math.min(lo, layer.cols.start[i]); hi = Math.max(hi, layer.cols.end[i]); }
    }
    this.extent = [Math.min(0, lo), Math.max(hi, 1)];
    this.fit();
    this.listen();
  }

  fit() {
    const pad = (this.extent[1] - this.extent[0]) * 0.01;
    this.t0 = this.extent[0] - pad;
    this.t1 = this.extent[1] + pad;
    this.rank0 = 0;
    this.ranks = this.world;
  }

  resize() {
    const ratio = window.devicePixelRatio || 1, w = this.canvas.parentElement.clientWidth || 1100;
    this.width = w;
    this.height = this.cssHeight;
    this.canvas.width = Math.round(w * ratio);
    this.canvas.height = Math.round(this.height * ratio);
    this.canvas.style.height = this.height + 'px';
    this.ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
  }

  x(t) { return this.gutter + (t - this.t0) / (this.t1 - this.t0) * (this.width - this.gutter); }
  time(x) { return this.t0 + (x - this.gutter) / (this.width - this.gutter) * (this.t1 - this.t0); }

  /// The rows in view: {ranks: [first, last), lanes, label}.
  layout() {
    const lanes = this.lanes.length, shown = Math.max(1, Math.round(this.ranks));
    const first = Math.max(0, Math.min(this.world - shown, Math.round(this.rank0)));
    const rows = [];
    if (shown * lanes <= this.maxRows) {
      for (let r = first; r < first + shown; ++r)
        for (const l of this.lanes) rows.push({ from: r, to: r + 1, lanes: [l], label: `rank ${r} ${LANES[l]}` });
    } else {
      const group = Math.ceil(shown / this.maxRows);
      for (let r = first; r < first + shown; r += group) {
        const to = Math.min(this.world, r + group);
        rows.push({ from: r, to, lanes: this.lanes, label: to - r > 1 ? `ranks ${r}-${to - 1}` : `rank ${r}` });
      }
    }
    this.group = rows.length ? rows[0].to - rows[0].from : 1;
    this.rowH = (this.height - this.axis - 4) / Math.max(rows.length, 1);
    return rows;
  }

  draw() {
    const t0 = performance.now(), ctx = this.ctx;
    this.resize();
    ctx.clearRect(0, 0, this.width, this.height);
    this.rows = this.layout();
    this.drawAxis();
    this.rows.forEach((row, i) => this.drawRow(row, this.axis + i * this.rowH, this.rowH));
    this.canvas.dataset.rows = this.rows.length;
    this.canvas.dataset.ranksPerRow = this.group;
    this.canvas.dataset.drawMs = (performance.now() - t0).toFixed(1);
    document.getElementById('timeline-rows').textContent = this.group > 1
      ? `${this.rows.length} rows of ${this.group} ranks each (zoom in on the ranks to see single ranks)`
      : `${this.rows.length} rows`;
  }

  drawAxis() {
    const ctx = this.ctx, step = niceStep(this.t1 - this.t0, (this.width - this.gutter) / 110);
    ctx.font = '11px system-ui, sans-serif';
    ctx.fillStyle = '#5b6576';
    ctx.strokeStyle = '#e3e7ee';
    ctx.textAlign = 'center';
    for (let t = Math.ceil(this.t0 / step) * step; t <= this.t1; t += step) {
      const x = this.x(t);
      ctx.beginPath(); ctx.moveTo(x, this.axis - 4); ctx.lineTo(x, this.height); ctx.stroke();
      ctx.fillText(step >= 1e6 ? (t / 1e6).toFixed(step >= 1e7 ? 0 : 1) + ' ms' : (t / 1e6).toFixed(3) + ' ms', x, 12);
    }
    ctx.textAlign = 'left';
  }

  drawRow(row, y, h) {
    const ctx = this.ctx, both = !!this.measured;
    ctx.fillStyle = '#1d2430';
    ctx.font = `${Math.min(12, Math.max(8, h - 3))}px system-ui, sans-serif`;
    if (h >= 8 || row.from % (4 * this.group) === 0) ctx.fillText(row.label, 4, y + Math.min(h, 14) - 3);
    if (row.to - row.from > 1) { this.drawGroupRow(row, y, h); return; }
    ctx.save();
    ctx.beginPath(); ctx.rect(this.gutter, y, this.width - this.gutter, h); ctx.clip();
    for (let r = row.from; r < row.to; ++r)
      for (const l of row.lanes) {
        this.drawList(this.predicted, r * 4 + l, y + 1, h - 2, both ? 'outline' : 'fill');
        if (both) this.drawList(this.measured, r * 4 + l, y + Math.min(3, h / 4), h - 2 * Math.min(3, h / 4), 'fill');
      }
    ctx.restore();
  }

  /// A row standing for several ranks: each layer is first rasterised into one kind per pixel
  /// column (compute over communication), then drawn as runs, so the cost of drawing does not grow
  /// with the ranks in the row. The predicted layer is pale behind the measured one.
  drawGroupRow(row, y, h) {
    const layers = this.measured ? [[this.predicted, 0.35, y + 1, h - 2], [this.measured, 1, y + h / 4, h / 2]]
                                 : [[this.predicted, 1, y + 1, h - 2]];
    const w = Math.ceil(this.width), ctx = this.ctx;
    for (const [layer, alpha, ly, lh] of layers) {
      const pixels = new Int8Array(w).fill(-1);
      const lanes = row.lanes.slice().sort((a, b) => b - a);  // compute (0) last, so it wins
      for (const l of lanes)
        for (let r = row.from; r < row.to; ++r) this.rasterise(layer, r * 4 + l, pixels);
      ctx.globalAlpha = alpha;
      for (let x = Math.floor(this.gutter); x < w;) {
        const kind = pixels[x];
        let end = x + 1;
        while (end < w && pixels[end] === kind) ++end;
        if (kind >= 0) { ctx.fillStyle = COLORS[kind]; ctx.fillRect(x, ly, end - x, lh); }
        x = end;
      }
      ctx.globalAlpha = 1;
    }
  }

  rasterise(layer, key, pixels) {
    const list = layer && layer.lists.get(key);
    if (!list) return;
    const cols = layer.cols, lo = Math.floor(this.gutter);
    for (let k = lowerBound(list.starts, this.t0 - list.maxDur); k < list.idx.length && list.starts[k] <= this.t1; ++k) {
      const i = list.idx[k];
      const x0 = Math.max(lo, Math.floor(this.x(cols.start[i]))), x1 = Math.min(pixels.length, Math.ceil(this.x(cols.end[i])));
      if (x1 > x0) pixels.fill(cols.kind[i], x0, x1);
    }
  }

  /// Draws one (rank, lane) list of a layer: actions in view, narrow neighbours merged into runs.
  drawList(layer, key, y, h, style) {
    const list = layer && layer.lists.get(key);
    if (!list) return;
    const ctx = this.ctx, cols = layer.cols, labels = h >= 12;
    let run = null;  // [x0, x1, kind] of merged narrow actions
    let labelEnd = -Infinity;
    const flush = () => { if (run) { ctx.fillStyle = COLORS[run[2]]; ctx.fillRect(run[0], y, Math.max(1, run[1] - run[0]), h); run = null; } };
    const end = this.t1;
    for (let k = lowerBound(list.starts, this.t0 - list.maxDur); k < list.idx.length && list.starts[k] <= end; ++k) {
      const i = list.idx[k], x0 = this.x(cols.start[i]), x1 = this.x(cols.end[i]), kind = cols.kind[i];
      if (x1 < this.gutter) continue;
      if (x1 - x0 < 3) {
        if (run && run[2] === kind && x0 <= run[1] + 1) run[1] = Math.max(run[1], x1);
        else { flush(); run = [x0, x1, kind]; }
        continue;
      }
      flush();
      if (style === 'outline') {
        ctx.strokeStyle = COLORS[kind];
        ctx.lineWidth = 1.5;
        ctx.strokeRect(x0 + 0.75, y + 0.75, x1 - x0 - 1.5, h - 1.5);
      } else {
        ctx.fillStyle = COLORS[kind];
        ctx.fillRect(x0, y, x1 - x0 - 0.5, h);
        if (labels && x1 - x0 > 24 && x0 >= labelEnd) {
          const id = actionId(kind, cols.stage[i], cols.mb[i], cols.bucket[i], (cols.overlap || {})[i]), lx = Math.max(x0, this.gutter) + 3;
          const w = ctx.measureText(id).width;
          if (lx + w < x1 - 2) {  // only where it fits, and never over the previous label
            ctx.fillStyle = '#fff';
            ctx.fillText(id, lx, y + h / 2 + 4);
            labelEnd = lx + w;
          }
        }
      }
      if (this.showCritical && layer === this.predicted && this.critical.has(i)) {
        ctx.strokeStyle = '#000';
        ctx.lineWidth = 2.5;
        ctx.strokeRect(x0, y - 1, Math.max(2, x1 - x0), h + 2);
      }
    }
    flush();
  }

  /// The action under (x, y) on a single-rank row: predicted and measured, for the tooltip.
  hit(px, py) {
    const row = this.rows && this.rows[Math.floor((py - this.axis) / this.rowH)];
    if (!row || row.to - row.from !== 1 || px < this.gutter) return null;
    const t = this.time(px), tol = 3 * (this.t1 - this.t0) / (this.width - this.gutter);
    const find = layer => {
      const list = layer && layer.lists.get(row.from * 4 + row.lanes[0]);
      if (!list) return -1;
      let best = -1;
      for (let k = lowerBound(list.starts, t - list.maxDur - tol); k < list.idx.length && list.starts[k] <= t + tol; ++k) {
        const i = list.idx[k];
        if (layer.cols.start[i] - tol <= t && t <= layer.cols.end[i] + tol &&
            (best < 0 || layer.cols.end[i] - layer.cols.start[i] < layer.cols.end[best] - layer.cols.start[best])) best = i;
      }
      return best;
    };
    return { rank: row.from, p: find(this.predicted), m: find(this.measured) };
  }

  tooltip(px, py) {
    const tip = document.getElementById('tooltip'), h = this.hit(px, py);
    if (!h || (h.p < 0 && h.m < 0)) { tip.hidden = true; return; }
    const line = (name, layer, i) => {
      const c = layer.cols;
      return `${name}: start ${ms(c.start[i] / 1e6)}, duration ${ms((c.end[i] - c.start[i]) / 1e6)}`;
    };
    const layer = h.p >= 0 ? this.predicted : this.measured, i = h.p >= 0 ? h.p : h.m, c = layer.cols;
    const lines = [`rank ${h.rank} ${actionId(c.kind[i], c.stage[i], c.mb[i], c.bucket[i], (c.overlap || {})[i])}`];
    if (h.p >= 0) lines.push(line('predicted', this.predicted, h.p));
    if (h.m >= 0) lines.push(line('measured ', this.measured, h.m));
    if (h.p >= 0 && h.m >= 0) {
      const p = this.predicted.cols, m = this.measured.cols, md = m.end[h.m] - m.start[h.m];
      if (md > 0) lines.push(`error: ${signedPct((p.end[h.p] - p.start[h.p] - md) / md)} of the measured duration`);
    }
    tip.textContent = lines.join('\n');
    tip.hidden = false;
    tip.style.left = Math.min(px + 12, this.width - 280) + 'px';
    tip.style.top = (py + 14) + 'px';
  }

  redraw() {
    if (this.pending) return;
    this.pending = true;
    requestAnimationFrame(() => { this.pending = false; this.draw(); });
  }

  /// Wheel zooms time around the cursor; shift+wheel, or the wheel over the rank labels, zooms the
  /// ranks; dragging pans both.
  listen() {
    const c = this.canvas;
    c.addEventListener('wheel', e => {
      e.preventDefault();
      const f = Math.exp(Math.max(-1, Math.min(1, e.deltaY * 0.002)));
      if (e.shiftKey || e.offsetX < this.gutter) {
        const at = this.rank0 + (e.offsetY - this.axis) / Math.max(1, this.height - this.axis) * this.ranks;
        const ranks = Math.max(1, Math.min(this.world, this.ranks * f));
        this.rank0 = Math.max(0, Math.min(this.world - ranks, at - (at - this.rank0) * ranks / this.ranks));
        this.ranks = ranks;
      } else {
        const t = this.time(e.offsetX);
        const span = Math.max(1e3, (this.t1 - this.t0) * f);
        this.t0 = t - (t - this.t0) * span / (this.t1 - this.t0);
        this.t1 = this.t0 + span;
      }
      this.redraw();
    }, { passive: false });
    c.addEventListener('mousedown', e => { this.drag = { x: e.clientX, y: e.clientY, t0: this.t0, t1: this.t1, rank0: this.rank0 }; });
    window.addEventListener('mouseup', () => { this.drag = null; });
    c.addEventListener('mouseleave', () => { document.getElementById('tooltip').hidden = true; });
    c.addEventListener('mousemove', e => {
      if (!this.drag) { this.tooltip(e.offsetX, e.offsetY); return; }
      const dt = (e.clientX - this.drag.x) / (this.width - this.gutter) * (this.drag.t1 - this.drag.t0);
      this.t0 = this.drag.t0 - dt;
      this.t1 = this.drag.t1 - dt;
      const dr = (e.clientY - this.drag.y) / Math.max(1, this.height - this.axis) * this.ranks;
      this.rank0 = Math.max(0, Math.min(this.world - this.ranks, this.drag.rank0 - dr));
      this.redraw();
    });
    document.getElementById('fit').addEventListener('click', () => { this.fit(); this.redraw(); });
    document.getElementById('show-critical').addEventListener('change', e => { this.showCritical = e.target.checked; this.redraw(); });
    window.addEventListener('resize', () => this.redraw());
  }
}

function renderLegend() {
  const box = document.getElementById('legend');
  const kinds = new Set(D.timeline.predicted.kind);
  KINDS.forEach((k, i) => { if (kinds.has(i)) box.append(el('span', { class: 'swatch', style: `background:${COLORS[i]}` }), k); });
  if (D.summary.measured) box.append(el('span', { class: 'swatch outline' }), 'predicted (outline)', el('span', { class: 'swatch', style: `background:${MEASURED}` }), 'measured (fill)');
  document.getElementById('timeline-help').textContent =
    'Wheel: zoom time. Shift+wheel or wheel over the labels: zoom ranks. Drag: pan. Hover an action for its times.' +
    (D.summary.measured ? ' Measured actions are drawn inside their predicted outlines, both from their step\'s start.' : '');
}

// ---- main

function main() {
  renderSummary();
  renderLegend();
  const timeline = new Timeline(document.getElementById('timeline'));
  timeline.draw();  // now, not on the next frame: a headless screenshot may not wait for one
  renderCharts();
  renderLinks();
  renderErrors();
  renderCritical();
  renderTune();
  document.body.dataset.loadMs = performance.now().toFixed(0);
  document.body.dataset.ready = '1';
}

main();
