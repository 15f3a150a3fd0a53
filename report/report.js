// The Parallax report page. It draws the data `parallax report` embedded as JSON in
// <script id="data">: every number was computed by Parallax (the definitions of `parallax simulate`
// and `parallax compare`); the page only lays them out. No libraries and no network, so that the
// file opens from file:// anywhere and can be mailed or attached to a CI run.
'use strict';

const D = JSON.parse(document.getElementById('data').textContent);
const KINDS = D.vocabulary.kinds;  // schedule::ActionKind's names in its order, as report.cpp writes them
const LANES = D.vocabulary.lanes;  // timeline::Lane's
const COLORS = ['#4c9be8', '#2e9d6b', '#e8a33c', '#d9822b', '#c9a227', '#b5651d', '#8e44ad', '#7f8c8d', '#5cb85c', '#a3c644', '#3f7fbf'];
const PREDICTED = '#8a94a6', RESERVE = '#c8cdd6', MEASURED = '#2f6fde', LIMIT = '#c0392b';
// A bubble's imbalance, drawn on its fill and drain in a lighter shade of the side's colour.
const IMBALANCE_PREDICTED = '#d2b48c', IMBALANCE_MEASURED = '#9dbcf0';

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
  if (k === 'ALL_TO_ALL') return stage + k + mb + '.' + bucket;  // bucket: its exchange number
  if (k === 'ALL_GATHER') return stage + k + (mb >= 0 ? mb : '') + '.' + bucket;  // bucket: its place; mb -1: OPTIM's
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
function niceStep(span, count, unit) {
  const raw = span / Math.max(1, count);
  // In whole units where a step spans one or more (MiB shown as GiB: 10 GiB a step, not 50,000 MiB).
  if (unit && raw >= unit) return unit * niceStep(span / unit, count);
  const p = Math.pow(10, Math.floor(Math.log10(raw)));
  return [1, 2, 5, 10].map(m => m * p).find(s => s >= raw) || raw;
}

// ---- summary and step time

function card(label, value, id, extra) {
  const v = el('div', { class: 'value', id, text: value });
  for (const [k, x] of Object.entries(extra || {})) v.dataset[k] = x;
  return el('div', { class: 'card' }, el('div', { class: 'label', text: label }), v);
}

/// How the plan's hardware profile predicted published runs (the plan's "published_check"): the
/// error a user should expect of the predicted step on that hardware (docs/accuracy.md).
function publishedText(checks, hardware) {
  if (!checks || !checks.length) return '';
  return `How ${hardware}'s predictions held on published runs (error = predicted / published - 1; negative: ` +
    'the runs took longer; docs/accuracy.md): ' + checks.map(c => c.text).join('; ') + '.';
}

/// What the predicted step's compute is made of (the plan's "kernels", plan::step_kernels): the
/// busiest pipeline rank's F and B kernels by kind, as the profile's compute model costs them.
function kernelsText(k) {
  if (!k) return '';
  return `Compute kernels of ${k.whose} over the step ` +
    `(the profile's compute model, without the collectives and slowdowns inside F and B): ${k.text}.`;
}

/// A MoE plan's experts as the simulator charges them (the plan's "moe"; its all-to-alls are
/// inside F and B on the predicted rows, on their own lane in a measured run).
function moeText(m) {
  if (!m) return '';
  const b = m.all_to_all_bytes, size = b >= 1 << 30 ? `${(b / (1 << 30)).toFixed(2)} GiB` : b >= 1 << 20 ? `${(b / (1 << 20)).toFixed(1)} MiB`
                                                                                       : `${(b / 1024).toFixed(1)} KiB`;
  return `${m.blocks} MoE blocks of ${m.experts} experts (top-${m.top_k}${m.shared ? `, ${m.shared} shared` : ''}) over expert ` +
      `${m.expert}: ` + (m.all_to_alls ? `${m.all_to_alls} all-to-alls of ${size} a rank per block and micro-batch, ` : '') +
      `load imbalance ${m.imbalance.toFixed(3)}x${m.imbalance_stated ? ' (stated)' : ''}`;
}

// The plan's tensor degree: above 1 the trace's ranks (timeline rows, rN) are tensor groups, the
// plan's memory ranks single GPUs.
function planTensor() {
  return D.plan.grid && D.plan.grid.tensor > 1 ? D.plan.grid.tensor : 1;
}

function renderSummary() {
  const s = D.summary, p = D.plan;
  document.getElementById('title').textContent = D.title;
  const tensor = planTensor(), context = p.grid && p.grid.context > 1 ? p.grid.context : 1;
  const grid = p.grid && p.grid.data ? `${p.grid.data}` + (context > 1 ? ` x ${context}` : '') + ` x ${p.grid.pipeline}` +
                                           (tensor > 1 ? ` x ${tensor}` : '') + (p.grid.virtual > 1 ? ` x v${p.grid.virtual}` : '') : '';
  document.getElementById('subtitle').textContent = [
    `scenario ${D.scenario}`,
    (tensor > 1 ? `${D.world_size * tensor} GPUs, ${D.world_size} tensor groups of ${tensor} (rank r on the timeline and charts: ` +
                  `group r, GPUs ${tensor}r to ${tensor}r+${tensor - 1})` : `${D.world_size} ranks`) +
        (grid ? ` (data${context > 1 ? ' x context' : ''} x pipeline${tensor > 1 ? ' x tensor' : ''} ${grid})` : ''),
    p.schedule ? `schedule ${p.schedule}` : '', p.chunks ? `${p.chunks} chunks` : '',
    s.measured ? 'predicted against measured' : 'predicted only', moeText(p.moe)].filter(Boolean).join(' · ');
  const cards = document.getElementById('step-cards');
  cards.append(card('predicted step time', ms(s.predicted_step_ms), 'step-predicted', { ms: s.predicted_step_ms }));
  const stepNote = document.getElementById('step-note');
  const published = publishedText(p.published_check, p.hardware);
  if (published) stepNote.after(el('p', { class: 'note', id: 'step-published', text: published }));
  const kernels = kernelsText(p.kernels);
  if (kernels) stepNote.after(el('p', { class: 'note', id: 'step-kernels', text: kernels }));
  if (!s.measured) {
    stepNote.textContent = 'No measured run given: add --measured TRACE (from parallax run -o) to compare.';
    return;
  }
  const m = s.measured_step_ms;
  cards.append(card('measured step time (undisturbed)', ms(m.undisturbed), 'step-measured', { ms: m.undisturbed }));
  cards.append(card('step time error', signedPct(s.step_error), 'step-error', { error: s.step_error }));
  const lone = m.steps === 1 && (s.measured_steps || []).length === 1 && s.measured_steps[0] === 0;  // a one-step run
  stepNote.textContent = (lone ? 'Measured: the run\'s only step, its warm-up (nothing after it to take); ' :
                                 `Measured: the ${s.statistic} of the ${m.steps} steps after the warm-up step; their median `) +
    `${ms(m.median)} (error ${signedPct(s.median_error)}), min ${ms(m.min)}, max ${ms(m.max)}; ` +
    `${(100 * m.disturbed_share).toFixed(0)}% of them disturbed (over 10% slower). Error = (predicted - measured) / ` +
    `measured. Action figures are over the undisturbed steps; the timeline shows step ${s.shown_step}, the one ` +
    'closest to the measured step.';
  for (const w of s.warnings || []) stepNote.append(el('strong', { class: 'err-pos warning', text: ` Warning: ${w}.` }));
  if (s.only_predicted || s.only_measured)
    stepNote.append(el('strong', { class: 'err-pos', text: ` The traces hold different actions (${s.only_predicted} only ` +
      `predicted, ${s.only_measured} only measured): they are not of the same plan.` }));
}

// ---- charts (SVG)

/// Grouped bars: labels[i] with one bar per series. With more bars than fit, neighbouring labels
/// are merged and the largest value of each group is drawn (the note says so).
function barChart(container, { labels, series, unit, limit, format, tickUnit }) {
  const width = Math.max(400, container.clientWidth || 600), height = 170, left = 64, bottom = 24, top = 10;
  const plotW = width - left - 10, plotH = height - top - bottom;
  // A series with `stack` is drawn on top of the series before it, in its bar (the reserve on the
  // tensors), not beside it.
  const slots = series.filter(s => !s.stack).length;
  const fit = Math.max(1, Math.floor(plotW / (4 * slots + 2)));
  const group = Math.ceil(labels.length / fit), groups = Math.ceil(labels.length / group);
  // Each bar of a group is its largest neighbour; a stacked pair keeps one neighbour's two parts
  // (the one whose sum is largest), so that the bar's top is a real rank's.
  const values = series.map(() => []);
  for (let g = 0; g < groups; ++g) {
    const from = g * group, to = Math.min(labels.length, (g + 1) * group);
    series.forEach((s, k) => {
      if (s.stack) return;
      const next = series[k + 1], stacked = next && next.stack;
      let best = from;
      for (let i = from; i < to; ++i) {
        const sum = v => s.values[v] + (stacked ? next.values[v] : 0);
        if (sum(i) > sum(best)) best = i;
      }
      values[k].push(s.values[best]);
      if (stacked) values[k + 1].push(next.values[best]);
    });
  }
  const tops = values.map((v, k) => v.map((x, g) => x + (series[k].stack ? values[k - 1][g] : 0)));
  // All zero (no bubble anywhere): an axis of one whole unit, not of 1e-9.
  const highest = Math.max(0, ...tops.flat(), limit ? limit.value : 0), max = highest > 1e-9 ? highest : 1;
  const y = v => top + plotH * (1 - v / max);
  const root = svg('svg', { width, height, role: 'img' });
  const step = niceStep(max, 4, tickUnit);
  for (let v = 0; v <= max * 1.0001; v += step) {
    root.append(svg('line', { x1: left, x2: left + plotW, y1: y(v), y2: y(v), stroke: '#e3e7ee' }));
    const t = svg('text', { x: left - 6, y: y(v) + 4, 'text-anchor': 'end', 'font-size': 11, fill: '#5b6576' });
    t.textContent = format(v, step);  // ticks: as many decimals as the step needs
    root.append(t);
  }
  const slot = plotW / groups, barW = Math.min(48, Math.max(1, (slot - 2) / slots));
  const labelEvery = Math.ceil(groups / Math.floor(plotW / 70));
  for (let g = 0; g < groups; ++g) {
    let place = -1;
    series.forEach((s, k) => {
      if (!s.stack) ++place;
      const v = values[k][g], base = s.stack ? values[k - 1][g] : 0;
      // Over the limit: the bar's top part in the limit's colour (a plan that does not fit).
      const over = limit && limit.over && tops[k][g] > limit.value;
      const r = svg('rect', { x: left + g * slot + (slot - barW * slots) / 2 + place * barW, y: y(base + v),
                              width: Math.max(0.5, barW - (barW > 3 ? 1 : 0)), height: Math.max(0, y(base) - y(base + v)),
                              fill: over && (s.stack || !(series[k + 1] || {}).stack) ? LIMIT : s.color });
      const tip = svg('title');
      tip.textContent = `${labelOf(labels, g, group)}: ${s.name} ${format(v)}` + (s.stack ? ` (top ${format(base + v)})` : '') +
                        (over ? `, over the ${limit.label}` : '');
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

// Decimals that tell ticks `step` apart (0.2 -> 1, 5 -> 0); a bar's own label (no step) keeps its default.
function decimals(step, fallback) {
  return step ? Math.max(0, Math.min(6, -Math.floor(Math.log10(step) + 1e-9))) : fallback;
}

function measuredSeries(name, values) {
  const out = [{ name: `${name} predicted`, color: PREDICTED, values: values.map(v => v[0]) }];
  if (D.summary.measured) out.push({ name: `${name} measured`, color: MEASURED, values: values.map(v => v[1]) });
  return out;
}

// Each side's bubble as its fill and drain with the imbalance stacked on it (the bar's top is the bubble).
function bubbleSeries(stages) {
  const side = (k, name, color, light) => [
    { name: `fill and drain ${name}`, color, values: stages.map(s => s.bubble_fraction[k] - s.imbalance_fraction[k]) },
    { name: `imbalance ${name}`, color: light, values: stages.map(s => s.imbalance_fraction[k]), stack: true }];
  const out = side(0, 'predicted', PREDICTED, IMBALANCE_PREDICTED);
  if (D.summary.measured) out.push(...side(1, 'measured', MEASURED, IMBALANCE_MEASURED));
  return out;
}

function renderCharts() {
  const stages = D.stages;
  barChart(document.getElementById('bubble-chart'), {
    labels: stages.map(s => `p${s.pipeline_rank}`),
    series: bubbleSeries(stages),
    unit: (stages.length === 1 ? 'Bubble fraction of the step (one pipeline rank, holding stage ' + stages[0].stages.join(',') + ')'
                               : 'Bubble fraction of the step per pipeline rank (pN holds stages ' +
                                 stages.map(s => `p${s.pipeline_rank}: ${s.stages.join(',')}`).slice(0, 8).join('; ') +
                                 (stages.length > 8 ? '; ...' : '') + ')') + ', the mean over the replicas that play it. ' +
          'On each bar its imbalance: waiting out the extra work of the rank with the most (busy and exposed communication); below it the fill and drain, that rank\'s own bubble',
    format: (v, step) => (100 * v).toFixed(decimals(step && 100 * step, v < 0.1 ? 1 : 0)) + '%',
  });
  barChart(document.getElementById('exposed-chart'), {
    labels: D.ranks.map(r => `r${r.rank}`),
    series: measuredSeries('exposed communication', D.ranks.map(r => r.exposed_comm_ms)),
    unit: 'Milliseconds a communication lane is busy while compute is idle, per rank' +
          (planTensor() > 1 ? ` (rN: tensor group N, GPUs ${planTensor()}N to ${planTensor()}N+${planTensor() - 1}, as on the timeline)` : ''),
    format: (v, step) => v.toFixed(decimals(step, v < 10 ? 2 : 0)) + ' ms',
  });
  const memory = document.getElementById('memory-chart');
  if (!D.memory.length) { memory.append(note('The trace does not carry its plan: no memory estimate.')); return; }
  // The plan's tensors (as compare sets them against a run's) and on them the reserve the fit check
  // adds (the CUDA context and the caching allocator's): the bar's top is simulate's peak, and a
  // bar over the device is drawn in the limit's colour.
  const reserve = D.memory.map(m => Math.max(0, m.total_mb - m.allocated_mb));
  const series = [{ name: 'peak memory predicted (tensors)', color: PREDICTED, values: D.memory.map(m => m.allocated_mb) }];
  if (Math.max(...reserve) > 0.5)
    series.push({ name: 'CUDA context and allocator reserve', color: RESERVE, values: reserve, stack: true });
  const measured = D.memory.some(m => m.measured_mb !== null);
  if (measured) series.push({ name: 'peak memory measured', color: MEASURED, values: D.memory.map(m => m.measured_mb || 0) });
  // The device's line only where the bars would still show beside it (a small model on a 16 GiB
  // device would be a row of flat bars); otherwise its size goes into the note.
  const device = D.memory[0].device_mb, deviceText = `device ${(device / 1024).toFixed(1)} GiB`;
  const largest = Math.max(...D.memory.map(m => Math.max(m.total_mb, m.measured_mb || 0)));
  const showDevice = largest >= 0.05 * device;
  const gpus = planTensor() > 1;  // the plan's ranks are GPUs, where the timeline's rows are tensor groups
  barChart(memory, {
    labels: D.memory.map(m => gpus ? `GPU ${m.rank}` : `r${m.rank}`),
    series,
    limit: showDevice ? { value: device, label: deviceText, over: true } : null,
    tickUnit: 1024,
    unit: `MiB per ${gpus ? 'GPU' : 'rank'}: parameters, gradients, optimizer state and activations at the peak, as the plan ` +
          'estimates them, and on them the CUDA context and the caching allocator\'s reserve, which the fit check adds' +
          (measured ? '; measured: the peak of the run\'s live tensors less what they held before the model was built'
                    : D.summary.measured ? ' (this run did not record memory)' : '') +
          (showDevice ? '' : `. The ${deviceText} is off the scale.`),
    format: (v, step) => v >= 1024 ? (v / 1024).toFixed(decimals(step && step / 1024, 1)) + ' GiB' : v.toFixed(decimals(step, 0)) + ' MiB',
  });
  renderFit();
}

// A plan whose fullest rank needs more than the device: said at the top, as simulate says it.
function renderFit() {
  const fullest = D.memory.reduce((a, m) => (m.total_mb > a.total_mb ? m : a), D.memory[0]);
  if (!fullest || fullest.total_mb <= fullest.device_mb) return;
  const over = D.memory.filter(m => m.total_mb > m.device_mb).length, who = planTensor() > 1 ? 'GPU' : 'rank';
  document.getElementById('step-note').before(el('p', { class: 'err-pos warning', id: 'does-not-fit',
    text: `DOES NOT FIT: ${over} of ${D.memory.length} ${who}s need more than the device's ${(fullest.device_mb / 1024).toFixed(2)} GiB; ` +
          `the fullest, ${who} ${fullest.rank}, ${(fullest.total_mb / 1024).toFixed(2)} GiB (the memory chart below).` }));
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
  box.append(note('Duration error of each kind of action, (predicted - measured) / measured: each action of the predicted ' +
                  'step against its mean over the run\'s undisturbed steps after the warm-up.'));
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

// ---- main

// The page prints action ids as Action::id() does: checked on every page against the example of
// each kind that the data carries (a difference stops the page and shows in its errors).
function checkVocabulary() {
  for (const x of D.vocabulary.examples) {
    const id = actionId(x.kind, x.stage, x.mb, x.bucket, x.overlap);
    if (id !== x.id) throw new Error(`report.js writes action ${id} where Parallax writes ${x.id}`);
  }
}

function main() {
  checkVocabulary();
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

// After the whole script has run: report/timeline.js (the Timeline class) follows this file in it.
document.addEventListener('DOMContentLoaded', main);
