// The runs page: a table of every run; filter (text / regex, status, tag, where-conditions), sort, group,
// extra columns (any metric, config.<key>), select to compare, CSV export. State lives in the URL.
"use strict";
T.pages.runs = (() => {
  const BASE = [
    {key: "name", label: "name"}, {key: "nonce", label: "nonce", mono: true}, {key: "job", label: "job"},
    {key: "tags", label: "tags"},
    {key: "status", label: "status"}, {key: "nodes", label: "nodes", num: true},
    {key: "written", label: "last write"}, {key: "train/loss", label: "train/loss", num: true},
    {key: "val/loss", label: "val/loss", num: true}, {key: "train/tokens", label: "train/tokens", num: true},
  ];
  let main, params, whereNonces = null, selected = new Set(), agoTimer = null;
  const SHOWN_STEP = 1000;  // rows drawn at a time: a table of 100,000 rows would freeze the page
  const CSV_RUNS = 10000;   // runs per /api/csv request (the server's limit)
  let shown = SHOWN_STEP, loadedAll = false;

  // /api/runs answers a page at a time (with the total): ask for every page
  async function loadAll() {
    const first = await T.loadRuns();
    for (let offset = first.rows.length; offset < first.total; offset += first.limit) {
      const page = await T.get(`/api/runs?offset=${offset}&limit=${first.limit}&${T.runsQuery()}`);
      for (const r of page.rows) T.rows.set(r.nonce, r);
    }
    loadedAll = true;
  }

  function columns() { return [...BASE, ...T.extra.map(k => ({key: k, label: k, num: true, extra: true}))]; }

  function visibleRows() {
    const q = params.get("q") || "", status = params.get("status") || "", tag = params.get("tag") || "";
    let test = () => true;
    if (q) {
      if (params.get("re") === "1") {
        let re;
        try { re = new RegExp(q); document.getElementById("filter-error").textContent = ""; }
        catch (e) { document.getElementById("filter-error").textContent = `bad regex: ${e.message}`; re = null; }
        test = re ? r => re.test(r.name) || re.test(r.nonce) : () => true;
      } else {
        const low = q.toLowerCase();
        test = r => r.name.toLowerCase().includes(low) || r.nonce.includes(low) || (r.job || "").toLowerCase().includes(low);
      }
    }
    let rows = [...T.rows.values()].filter(r => test(r) && (!status || r.status === status)
      && (!tag || (r.tags || []).includes(tag))
      && (!whereNonces || whereNonces.has(r.nonce)));
    const sort = params.get("sort") || "written", desc = params.get("desc") !== "0";
    rows.sort((a, b) => {
      const x = a[sort], y = b[sort];
      if (x === y) return a.name < b.name ? -1 : a.name > b.name ? 1 : 0;
      if (x === null || x === undefined) return 1;
      if (y === null || y === undefined) return -1;
      return (x < y ? -1 : 1) * (desc ? -1 : 1);
    });
    return rows;
  }

  function cell(c, r) {
    const v = r[c.key];
    if (c.key === "name") return `<td><a class="run-link" href="#/run/${T.esc(encodeURIComponent(r.nonce))}">${T.esc(v)}</a></td>`;
    if (c.key === "status") return `<td data-col="status">${T.statusBadge(v)}</td>`;
    if (c.key === "tags") return `<td data-col="tags">${(v || []).map(t => `<span class="tag">${T.esc(t)}</span>`).join(" ")}`
      + `${r.note ? ` <span class="note" title="${T.esc(r.note)}">note</span>` : ""}</td>`;
    if (c.key === "written") return `<td class="ago" data-ns="${T.esc(v)}" title="${T.esc(T.when(v))}">${T.esc(T.ago(v))}</td>`;
    return `<td class="${c.num ? "num" : ""}${c.mono ? " mono" : ""}" data-col="${T.esc(c.key)}">${T.esc(T.fmt(v))}</td>`;
  }

  function drawTable() {
    const cols = columns(), rows = visibleRows(), group = params.get("group") || "";
    const sort = params.get("sort") || "written", desc = params.get("desc") !== "0";
    const head = `<tr><th class="sel"><input type="checkbox" id="select-all" title="select all shown"></th>` + cols.map(c =>
      `<th data-sort="${T.esc(c.key)}" class="${c.key === sort ? "sorted" + (desc ? " desc" : "") : ""}">${T.esc(c.label)}</th>`).join("") + "</tr>";
    const body = [];
    let last;
    const groupOf = r => group === "project" ? r.project : group === "group" ? `${r.project}.${r.group}` : T.fmt(r[group]);
    const ordered = group ? [...rows].sort((a, b) => { const x = groupOf(a), y = groupOf(b); return x < y ? -1 : x > y ? 1 : 0; }) : rows;
    const counts = {};
    if (group) for (const r of ordered) counts[groupOf(r)] = (counts[groupOf(r)] || 0) + 1;
    for (const r of ordered.slice(0, shown)) {
      if (group && groupOf(r) !== last) {
        last = groupOf(r);
        body.push(`<tr class="group"><td colspan="${cols.length + 1}">${T.esc(group)} = ${T.esc(last)} (${counts[last]} runs)</td></tr>`);
      }
      body.push(`<tr data-nonce="${T.esc(r.nonce)}"><td class="sel"><input type="checkbox" class="pick" ${selected.has(r.nonce) ? "checked" : ""}></td>`
        + cols.map(c => cell(c, r)).join("") + "</tr>");
    }
    const table = document.getElementById("runs-table");
    table.innerHTML = `<thead>${head}</thead><tbody>${body.join("")}</tbody>`;
    document.getElementById("count").textContent = `${rows.length} of ${T.rows.size} runs`
      + (rows.length > shown ? ` (first ${shown} shown)` : "");
    document.getElementById("show-more").hidden = rows.length <= shown;
    document.getElementById("selected-count").textContent = selected.size ? `${selected.size} selected` : "";
    document.body.dataset.readyMs = String(performance.now());  // ms since navigation
    document.body.dataset.ready = "runs";
  }

  function saveParams() {
    params.set("sel", [...selected].join(","));
    if (!params.get("sel")) params.delete("sel");
    if (T.extra.length) params.set("cols", T.extra.join(",")); else params.delete("cols");
    for (const [k, v] of [...params.entries()]) if (v === "") params.delete(k);
    T.setParams(params);
  }

  async function applyWhere() {
    const text = params.get("where") || "", err = document.getElementById("where-error");
    err.textContent = "";
    if (!text.trim()) { whereNonces = null; return; }
    try {
      const found = await T.post("/api/filter", {conditions: text.split(";")});
      whereNonces = new Set(found.nonces);
    } catch (e) { err.textContent = e.message; whereNonces = new Set(); }
  }

  async function render(el, arg, p) {
    main = el; params = p;
    selected = new Set((params.get("sel") || "").split(",").filter(Boolean));
    const cols = (params.get("cols") || "").split(",").filter(Boolean);
    const all = params.get("all") === "1";
    if (cols.join(",") !== T.extra.join(",") || all !== T.all || !T.rows.size || !loadedAll) {
      T.extra = cols; T.all = all; await loadAll();
    }
    shown = SHOWN_STEP;
    main.innerHTML = `
      <div class="controls">
        <input type="text" id="filter" placeholder="filter names (text)" value="${T.esc(params.get("q") || "")}">
        <label><input type="checkbox" id="regex" ${params.get("re") === "1" ? "checked" : ""}> regex</label>
        <select id="status-filter"><option value="">any status</option>
          ${["running", "finished", "failed", "stale"].map(s => `<option value="${s}" ${params.get("status") === s ? "selected" : ""}>${s}</option>`).join("")}</select>
        <input type="text" id="tag-filter" placeholder="tag" value="${T.esc(params.get("tag") || "")}">
        <label title="hidden runs (theseus hide), evaluation runs, inspection branches"><input type="checkbox" id="show-all" ${params.get("all") === "1" ? "checked" : ""}> hidden too</label>
        <input type="text" id="where" placeholder="where: train/loss < 3; config.optimization.lr == 0.001" value="${T.esc(params.get("where") || "")}">
        <button id="apply-where">apply</button>
        <span class="error" id="where-error"></span><span class="error" id="filter-error"></span>
      </div>
      <div class="controls">
        <label>group by <select id="group-by"><option value="">none</option>
          ${["project", "group", "job", "status", ...T.extra].map(g => `<option value="${T.esc(g)}" ${params.get("group") === g ? "selected" : ""}>${T.esc(g)}</option>`).join("")}</select></label>
        <input type="text" id="add-column" list="column-keys" placeholder="add column: a metric or config.&lt;key&gt;">
        <datalist id="column-keys"></datalist>
        <button id="add-column-btn">add column</button>
        <button id="remove-columns" ${T.extra.length ? "" : "disabled"}>remove extra columns</button>
        <button id="compare">chart selected</button>
        <button id="csv">export CSV</button>
        <span id="count" class="muted"></span> <span id="selected-count" class="muted"></span>
        <span class="tip">status "stale": marked running but silent for ${Math.round(T.staleAfter / 60)} min</span>
      </div>
      <div class="table-box"><table class="grid" id="runs-table"></table>
        <button id="show-more" hidden>show more</button></div>`;
    await applyWhere();
    drawTable();
    T.get("/api/keys").then(k => {
      document.getElementById("column-keys").innerHTML = [...k.metrics, ...k.config.map(c => "config." + c)]
        .map(x => `<option value="${T.esc(x)}">`).join("");
    }).catch(() => {});
    const on = (id, ev, f) => document.getElementById(id).addEventListener(ev, f);
    on("filter", "input", e => { params.set("q", e.target.value); saveParams(); drawTable(); });
    on("regex", "change", e => { params.set("re", e.target.checked ? "1" : ""); saveParams(); drawTable(); });
    on("status-filter", "change", e => { params.set("status", e.target.value); saveParams(); drawTable(); });
    on("tag-filter", "input", e => { params.set("tag", e.target.value.trim()); saveParams(); drawTable(); });
    on("show-all", "change", async e => {
      params.set("all", e.target.checked ? "1" : ""); saveParams(); T.all = e.target.checked; await loadAll(); drawTable();
    });
    const where = async () => { params.set("where", document.getElementById("where").value); saveParams(); await applyWhere(); drawTable(); };
    on("apply-where", "click", where);
    on("where", "keydown", e => { if (e.key === "Enter") where(); });
    on("group-by", "change", e => { params.set("group", e.target.value); saveParams(); drawTable(); });
    const addColumn = async () => {
      const key = document.getElementById("add-column").value.trim();
      if (!key || T.extra.includes(key)) return;
      T.extra = [...T.extra, key];
      try { await loadAll(); } catch (e) { T.extra = T.extra.filter(k => k !== key); document.getElementById("where-error").textContent = e.message; return; }
      saveParams(); T.render();
    };
    on("add-column-btn", "click", addColumn);
    on("add-column", "keydown", e => { if (e.key === "Enter") addColumn(); });
    on("remove-columns", "click", async () => { T.extra = []; await loadAll(); saveParams(); T.render(); });
    on("show-more", "click", () => { shown += SHOWN_STEP; drawTable(); });
    on("compare", "click", () => {
      const runs = selected.size ? [...selected] : visibleRows().slice(0, 4).map(r => r.nonce);
      T.go(`#/charts?runs=${runs.join(",")}&keys=${encodeURIComponent("train/loss")}`);
    });
    on("csv", "click", async () => {
      const rows = visibleRows();
      const cols = ["name", "nonce", "job", "status", "nodes", "last seq", "written", "train/loss", "val/loss", "train/tokens", ...T.extra];
      let text = "";
      for (let i = 0; i < Math.max(rows.length, 1); i += CSV_RUNS) {  // the server caps runs per request
        const part = await T.post("/api/csv", {nonces: rows.slice(i, i + CSV_RUNS).map(r => r.nonce), columns: cols}, true);
        text += i ? part.slice(part.indexOf("\n") + 1) : part;  // one header
      }
      const a = document.createElement("a");
      a.href = URL.createObjectURL(new Blob([text], {type: "text/csv"}));
      a.download = "runs.csv"; a.id = "csv-link"; a.dataset.rows = String(rows.length);
      document.body.appendChild(a); a.click(); setTimeout(() => a.remove(), 1000);
    });
    const table = document.getElementById("runs-table");
    table.addEventListener("click", e => {
      const th = e.target.closest("th[data-sort]");
      if (th) {
        const key = th.dataset.sort;
        if (params.get("sort") === key || (!params.get("sort") && key === "written")) params.set("desc", params.get("desc") === "0" ? "1" : "0");
        else { params.set("sort", key); params.set("desc", key === "name" || key === "nonce" ? "0" : "1"); }
        saveParams(); drawTable(); return;
      }
      if (e.target.id === "select-all") {
        for (const r of visibleRows()) e.target.checked ? selected.add(r.nonce) : selected.delete(r.nonce);
        saveParams(); drawTable(); return;
      }
      if (e.target.classList.contains("pick")) {
        const nonce = e.target.closest("tr").dataset.nonce;
        e.target.checked ? selected.add(nonce) : selected.delete(nonce);
        saveParams();
        document.getElementById("selected-count").textContent = selected.size ? `${selected.size} selected` : "";
      }
    });
    agoTimer = setInterval(() => document.querySelectorAll("td.ago").forEach(td => td.textContent = T.ago(+td.dataset.ns)), 5000);
  }

  async function onChange() {
    if (params.get("where")) await applyWhere();
    drawTable();
  }

  function leave() { clearInterval(agoTimer); }
  return {render, onChange, leave, visibleRows: () => visibleRows()};
})();
