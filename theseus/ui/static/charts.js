// The charts page: a chart per key in a grid, the chosen runs overlaid, against seq, train/tokens or
// wall time; EMA smoothing over the faint raw line, log scale, zoom (drag, wheel), pan (shift-drag),
// hover values (the legend; raw values beside the smoothed ones), checkpoint markers (dashed lines). The view lives in the URL.
"use strict";
T.pages.charts = (() => {
  const COLORS = ["#2f6fde", "#e8590c", "#2b8a3e", "#c2255c", "#7048e8", "#0b7285", "#a87b00", "#495057"];
  let params, state = null;

  const color = i => COLORS[i % COLORS.length];
  const swatch = i => `<span class="swatch c${i % COLORS.length}"></span>`;  // style.css colours .c0-.c7 as COLORS
  const UNITS = [[1e12, "T"], [1e9, "G"], [1e6, "M"], [1e3, "k"], [1, ""]];
  const unitOf = a => UNITS.find(([d]) => a >= d) || UNITS[UNITS.length - 1];
  function decimals(step) {  // the fewest decimals that write `step` exactly (ticks are its multiples)
    for (let k = 0; k < 12; k++) if (Math.abs(+step.toFixed(k) - step) <= Math.abs(step) * 1e-9) return k;
    return 12;
  }
  // axis ticks: 40M, not 40,000,000, with one unit per axis and as many decimals as the tick step needs,
  // so ticks stay distinct when zoomed in (1.0001M, 1.0002M); a log axis (no even step) keeps 3 digits
  function ticks(splits, step, log) {
    const [d, unit] = unitOf(Math.max(0, ...splits.filter(v => v !== null).map(Math.abs)));
    return splits.map(v => {
      if (v === null) return "";
      if (log || !(step > 0)) { const [e, u] = unitOf(Math.abs(v)); return +(v / e).toPrecision(3) + u; }
      return +(v / d).toFixed(decimals(step / d)) + (v === 0 ? "" : unit);
    });
  }
  const faint = c => c + "40";

  function ema(ys, alpha) {  // debiased EMA, as TensorBoard draws it; nulls stay gaps
    if (!alpha) return ys;
    const out = new Array(ys.length);
    let last = 0, weight = 0;
    for (let i = 0; i < ys.length; i++) {
      const y = ys[i];
      if (y === null || !Number.isFinite(y)) { out[i] = null; continue; }
      last = last * alpha + (1 - alpha) * y;
      weight = weight * alpha + (1 - alpha);
      out[i] = last / weight;
    }
    return out;
  }

  function wheelZoomPlugin() {
    return {hooks: {ready: u => {
      const over = u.over;
      over.addEventListener("wheel", e => {
        e.preventDefault();
        const {left} = u.cursor, xVal = u.posToVal(left, "x");
        const {min, max} = u.scales.x, f = e.deltaY < 0 ? 0.8 : 1.25;
        u.setScale("x", {min: xVal - (xVal - min) * f, max: xVal + (max - xVal) * f});
        state.zoomed = true;
      }, {passive: false});
      over.addEventListener("mousedown", e => {
        if (!e.shiftKey) return;
        e.preventDefault(); e.stopPropagation();
        const x0 = e.clientX, {min, max} = u.scales.x, per = (max - min) / u.bbox.width * devicePixelRatio;
        const move = m => { const dx = (m.clientX - x0) * per; u.setScale("x", {min: min - dx, max: max - dx}); state.zoomed = true; };
        const up = () => { document.removeEventListener("mousemove", move); document.removeEventListener("mouseup", up); };
        document.addEventListener("mousemove", move); document.addEventListener("mouseup", up);
      }, true);
      over.addEventListener("dblclick", () => { state.zoomed = false; });
    }}};
  }

  function rawFollowsPlugin() {  // hiding a smoothed line (its legend row) hides its raw line too
    return {hooks: {setSeries: (u, si, opts) => {
      const raw = si === null ? undefined : u.series[si].raw;
      if (raw !== undefined && opts && "show" in opts && u.series[raw].show !== opts.show) u.setSeries(raw, {show: opts.show});
    }}};
  }

  function checkpointPlugin(key) {
    return {hooks: {draw: u => {
      const ctx = u.ctx, {top, height} = u.bbox;
      ctx.save();
      ctx.setLineDash([4, 4]);
      ctx.lineWidth = 1;
      state.runs.forEach((nonce, i) => {
        const s = state.data[nonce]?.[key];
        if (!s) return;
        ctx.strokeStyle = color(i) + "99";
        for (const cx of s.checkpoints) {
          const px = u.valToPos(cx, "x", true);
          if (px < u.bbox.left || px > u.bbox.left + u.bbox.width) continue;
          ctx.beginPath(); ctx.moveTo(px, top); ctx.lineTo(px, top + height); ctx.stroke();
        }
      });
      ctx.restore();
    }}};
  }

  function aligned(key) {
    const smooth = smoothing(), log = params.get("log") === "1";
    const tables = [], series = [{label: xLabel()}];
    state.runs.forEach((nonce, i) => {
      const s = state.data[nonce]?.[key] || {x: [], y: []};
      const ys = log ? s.y.map(v => v > 0 ? v : null) : s.y;
      const label = state.names[nonce] ? `${state.names[nonce].split(".").pop()}:${nonce}` : nonce;
      if (smooth > 0) {  // the faint raw line has no legend row: the smoothed one shows its value beside its own
        tables.push([s.x, ys]); series.push({label: `${label} raw`, class: "raw", stroke: faint(color(i)), width: 1, spanGaps: true});
        tables.push([s.x, ema(ys, smooth)]);
        series.push({label, stroke: color(i), width: 1.5, spanGaps: true, raw: series.length - 1,
                     value: (u, v, si, idx) => idx === null ? "" : `${T.fmt(v)} (raw ${T.fmt(u.data[si - 1][idx])})`});
      } else {
        tables.push([s.x, ys]); series.push({label, stroke: color(i), width: 1.5, spanGaps: true});
      }
    });
    const data = tables.length ? uPlot.join(tables) : [[]];
    return {data, series};
  }

  function smoothing() {  // the URL's smoothing as a number in [0, 0.99]; anything else is none
    const v = Number(params.get("smooth") || 0);
    return Number.isFinite(v) ? Math.min(Math.max(v, 0), 0.99) : 0;
  }

  const xLabel = () => ({seq: "seq", time: "wall time (s since start)"}[params.get("x") || "seq"] || params.get("x"));

  function drawSummary(key) {
    const el = document.querySelector(`.chart[data-key="${CSS.escape(key)}"] table.summary`);
    if (!el) return;
    el.innerHTML = state.runs.map((nonce, i) => {
      const s = state.data[nonce]?.[key] || {x: [], y: []}, n = s.y.length;
      return `<tr data-nonce="${T.esc(nonce)}" data-points="${n}" data-last="${T.esc(n ? s.y[n - 1] : "")}">
        <td>${swatch(i)}<a href="${T.esc(`#/run/${encodeURIComponent(nonce)}`)}">${T.esc(state.names[nonce] || nonce)}:${T.esc(nonce)}</a></td>
        <td class="muted">${n} points</td><td>last ${T.esc(xLabel())} ${T.esc(T.fmt(n ? s.x[n - 1] : null))}</td>
        <td>${T.esc(key)} ${T.esc(T.fmt(n ? s.y[n - 1] : null))}</td><td class="muted">${s.checkpoints ? s.checkpoints.length : 0} checkpoints</td></tr>`;
    }).join("");
  }

  function drawChart(key) {
    const box = document.querySelector(`.chart[data-key="${CSS.escape(key)}"] .plot`);
    if (!box) return;
    const {data, series} = aligned(key);
    const old = state.plots[key];
    if (old && old.series.length === series.length) {
      old.setData(data, !state.zoomed);
    } else {
      if (old) old.destroy();
      box.innerHTML = "";
      const opts = {
        width: Math.max(300, box.clientWidth), height: 280, series,
        scales: {x: {time: false}, y: {distr: params.get("log") === "1" ? 3 : 1}},
        axes: [{label: xLabel(), values: (u, vals, i, space, step) => ticks(vals, step, false)},
               {values: (u, vals, i, space, step) => ticks(vals, step, params.get("log") === "1")}],
        cursor: {drag: {x: true, y: false}},
        legend: {live: true}, plugins: [wheelZoomPlugin(), checkpointPlugin(key), rawFollowsPlugin()],
      };
      state.plots[key] = new uPlot(opts, data, box);
    }
    drawSummary(key);
    box.closest(".chart").dataset.ready = "1";
  }

  async function fetchSeries(nonces, since) {
    if (!nonces.length || !state.keys.length) return;
    const q = new URLSearchParams({runs: nonces.join(","), keys: state.keys.join(","), x: params.get("x") || "seq"});
    if (since) q.set("since", nonces.map(n => `${n}:${since[n] ?? -1}`).join(","));
    const got = await T.get(`/api/series?${q}`);
    for (const s of got.series) {
      state.names[s.nonce] = s.name;
      const runData = state.data[s.nonce] = state.data[s.nonce] || {};
      const old = runData[s.key];
      if (since && old) {
        const from = old.seq.length ? old.seq[old.seq.length - 1] : -1;
        const keep = s.seq.map((q, i) => q > from ? i : -1).filter(i => i >= 0);
        old.x.push(...keep.map(i => s.x[i])); old.y.push(...keep.map(i => s.y[i])); old.seq.push(...keep.map(i => s.seq[i]));
        old.checkpoints = s.checkpoints;
      } else runData[s.key] = s;
    }
  }

  function save() {
    params.set("runs", state.runs.join(",")); params.set("keys", state.keys.join(","));
    for (const [k, v] of [...params.entries()]) if (v === "") params.delete(k);
    T.setParams(params);
  }

  async function render(main, arg, p) {
    params = p;
    if (!T.rows.size) await T.loadRuns();
    state = {runs: (p.get("runs") || "").split(",").filter(Boolean), keys: (p.get("keys") || "train/loss").split(",").filter(Boolean),
      data: {}, names: {}, plots: {}, zoomed: false};
    for (const n of state.runs) if (T.rows.get(n)) state.names[n] = T.rows.get(n).name;
    const x = p.get("x") || "seq", smooth = String(smoothing());
    main.innerHTML = `
      <div class="controls">
        <label>x <select id="x-axis">${["seq", "train/tokens", "time"].map(o => `<option ${o === x ? "selected" : ""}>${o}</option>`).join("")}</select></label>
        <label>smoothing <input type="range" id="smooth" min="0" max="0.99" step="0.01" value="${smooth}"> <span id="smooth-value">${smooth}</span></label>
        <label><input type="checkbox" id="log-scale" ${p.get("log") === "1" ? "checked" : ""}> log y</label>
        <input type="text" id="add-key" list="chart-keys" placeholder="add a key (a chart)"><datalist id="chart-keys">${T.keys.map(k => `<option value="${T.esc(k)}">`).join("")}</datalist>
        <input type="text" id="add-run" list="chart-runs" placeholder="add a run (nonce)"><datalist id="chart-runs">${[...T.rows.values()].slice(0, 2000).map(r => `<option value="${T.esc(r.nonce)}">${T.esc(r.name)}</option>`).join("")}</datalist>
        <span class="tip">drag: zoom, wheel: zoom, shift-drag: pan, double-click: reset; dashed lines: checkpoints</span>
      </div>
      <div class="controls" id="chips">${state.runs.map((n, i) => `<button class="chip run-chip" data-nonce="${T.esc(n)}" title="remove">${swatch(i)}${T.esc(state.names[n] || n)}:${T.esc(n)} &times;</button>`).join("")}
        ${state.keys.map(k => `<button class="chip key-chip" data-key="${T.esc(k)}" title="remove">${T.esc(k)} &times;</button>`).join("")}</div>
      <p class="error" id="chart-error"></p>
      <div id="charts-grid">${state.keys.map(k => `<div class="chart" data-key="${T.esc(k)}"><h3>${T.esc(k)}</h3><div class="plot"></div><table class="summary"></table></div>`).join("")}</div>`;
    if (!state.runs.length) document.getElementById("chart-error").textContent = "no run chosen: select runs on the runs page, or add a nonce above";
    try { await fetchSeries(state.runs); } catch (e) { document.getElementById("chart-error").textContent = e.message; }
    state.keys.forEach(drawChart);
    document.body.dataset.readyMs = String(performance.now());  // ms since navigation
    document.body.dataset.ready = "charts";
    const on = (id, ev, f) => document.getElementById(id).addEventListener(ev, f);
    on("x-axis", "change", e => { params.set("x", e.target.value); save(); T.render(); });
    on("smooth", "input", e => { params.set("smooth", e.target.value); document.getElementById("smooth-value").textContent = e.target.value; save(); redrawAll(true); });
    on("log-scale", "change", e => { params.set("log", e.target.checked ? "1" : ""); save(); redrawAll(true); });
    on("add-key", "keydown", e => { if (e.key === "Enter" && e.target.value && !state.keys.includes(e.target.value)) { state.keys.push(e.target.value.trim()); save(); T.render(); } });
    on("add-run", "keydown", e => { if (e.key === "Enter" && e.target.value && !state.runs.includes(e.target.value)) { state.runs.push(e.target.value.trim()); save(); T.render(); } });
    on("chips", "click", e => {
      const b = e.target.closest("button.chip");
      if (!b) return;
      if (b.dataset.nonce) state.runs = state.runs.filter(n => n !== b.dataset.nonce);
      else state.keys = state.keys.filter(k => k !== b.dataset.key);
      save(); T.render();
    });
  }

  function redrawAll(rebuild) {
    for (const key of state.keys) { if (rebuild && state.plots[key]) { state.plots[key].destroy(); delete state.plots[key]; } drawChart(key); }
  }

  async function onChange(changed) {
    const mine = changed.filter(n => state.runs.includes(n));
    if (!mine.length) return;
    const since = {};
    for (const n of mine) {
      const seqs = Object.values(state.data[n] || {}).map(s => s.seq.length ? s.seq[s.seq.length - 1] : -1);
      since[n] = seqs.length ? Math.min(...seqs) : -1;
    }
    await fetchSeries(mine, since);
    state.keys.forEach(drawChart);
  }

  function leave() { if (state) Object.values(state.plots).forEach(u => u.destroy()); state = null; }
  return {render, onChange, leave, ema, ticks, state: () => state};
})();
