// The report page's timeline: the zoomable canvas of predicted and measured actions, and its
// legend. Compiled into the page right after report.js, in the same script (report/CMakeLists.txt),
// so it shares report.js's strict mode, data and helpers.

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

/// A timeline rank's name: "rank 2 (pp 1, dp 0)", where the plan puts it (D.rank_roles).
function rankName(r) {
  const role = (D.rank_roles || [])[r];
  return role ? `rank ${r} (${role})` : `rank ${r}`;
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
    this.lanes = [0, 1, 2, 3, 4].filter(l => present.has(l));
    // Wide enough for the longest row name (the ranks' roles make them longer than "rank 12 send").
    this.ctx.font = '12px system-ui, sans-serif';
    let widest = 0;
    for (let r = 0; r < this.world; ++r) widest = Math.max(widest, this.ctx.measureText(`${rankName(r)} all_to_all`).width);
    this.gutter = Math.max(120, Math.ceil(widest) + 10);
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
        for (const l of this.lanes) rows.push({ from: r, to: r + 1, lanes: [l], label: `${rankName(r)} ${LANES[l]}` });
    } else {
      const group = Math.ceil(shown / this.maxRows);
      for (let r = first; r < first + shown; r += group) {
        const to = Math.min(this.world, r + group);
        rows.push({ from: r, to, lanes: this.lanes, label: to - r > 1 ? `ranks ${r}-${to - 1}` : rankName(r) });
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
    const lines = [`${rankName(h.rank)} ${actionId(c.kind[i], c.stage[i], c.mb[i], c.bucket[i], (c.overlap || {})[i])}`];
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
    (D.summary.measured ? ' Measured actions are fills, their predictions outlines over them, both from their step\'s start: a fill past its outline ran longer than predicted.' : '');
}

