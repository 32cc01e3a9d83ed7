// theseus ui: the shell shared by the pages (routing, the API, live polling, formatting).
// Plain JS, no build step: each page is one file registering itself in T.pages.
// Text from the root or the URL reaches the page only through T.esc (in HTML strings) or textContent:
// a stranger's root may hold markup in any name, key or value, and none of it may become script.
"use strict";
const T = {
  pages: {},
  page: null,
  token: 0,            // the server's change counter seen last
  pollMs: 1000,        // a flush shows within this plus one read of the new segments
  rows: new Map(),     // nonce -> the runs table row, kept current by poll()
  extra: [],           // extra columns the runs table asks for
  all: false,          // also the runs listed only when asked (hidden, evaluation, inspection: ?all=1)
  keys: [],            // numeric keys logged in the root
  root: "",
  staleAfter: 600,

  esc(s) {
    return String(s ?? "").replace(/[&<>"']/g, c => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c]));
  },
  fmt(v) {
    if (v === null || v === undefined) return "-";
    if (typeof v === "number") {
      if (Number.isInteger(v)) return String(v);
      const a = Math.abs(v);
      return a !== 0 && (a < 1e-3 || a >= 1e6) ? v.toExponential(3) : String(+v.toPrecision(5));
    }
    if (typeof v === "object") return JSON.stringify(v);
    return String(v);
  },
  ago(ns) {
    if (!Number.isFinite(ns) || !ns) return "-";
    const s = Math.max(0, Date.now() / 1000 - ns / 1e9);
    if (s < 60) return `${Math.round(s)} s ago`;
    if (s < 3600) return `${Math.round(s / 60)} min ago`;
    if (s < 86400) return `${Math.round(s / 3600)} h ago`;
    return `${Math.round(s / 86400)} d ago`;
  },
  when(ns) {
    const d = new Date(ns / 1e6);
    return Number.isFinite(ns) && ns && !isNaN(d) ? d.toISOString().replace("T", " ").slice(0, 19) : "-";
  },
  bytes(n) {
    if (!Number.isFinite(n)) return "-";
    const u = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
    return `${i ? n.toFixed(1) : n} ${u[i]}`;
  },
  statusBadge(s) { return `<span class="status ${T.esc(s)}">${T.esc(s)}</span>`; },

  async get(path) {
    const r = await fetch(path);
    const body = await r.json();
    if (!r.ok) throw new Error(body.error || r.statusText);
    return body;
  },
  async post(path, data, raw) {
    const r = await fetch(path, {method: "POST", headers: {"content-type": "application/json"}, body: JSON.stringify(data)});
    if (!r.ok) throw new Error((await r.json()).error || r.statusText);
    return raw ? r.text() : r.json();
  },

  // Routing: #/runs?..., #/charts?..., #/run/<nonce>, #/node/<id>; the view state lives in the hash.
  route() {
    const hash = location.hash.replace(/^#\/?/, "") || "runs";
    const [path, query] = hash.split("?");
    const [page, ...rest] = path.split("/");
    return {page: page || "runs", arg: decodeURIComponent(rest.join("/")), params: new URLSearchParams(query || "")};
  },
  setParams(params) {
    const r = T.route();
    const q = params.toString();
    history.replaceState(null, "", `#/${r.page}${r.arg ? "/" + encodeURIComponent(r.arg) : ""}${q ? "?" + q : ""}`);
  },
  go(hash) { location.hash = hash; },

  async render() {
    if (T.page && T.page.leave) T.page.leave();
    const r = T.route();
    const page = T.pages[r.page] || T.pages.runs;
    T.page = page;
    document.querySelectorAll("header nav a").forEach(a => a.classList.toggle("active", a.id === `nav-${r.page}`));
    const main = document.getElementById("page");
    main.innerHTML = "";
    try {
      await page.render(main, r.arg, r.params);
    } catch (e) {
      main.innerHTML = `<p class="error" id="page-error">${T.esc(e.message)}</p>`;
    }
  },

  runsQuery() { return `extra=${encodeURIComponent(T.extra.join(","))}${T.all ? "&all=1" : ""}`; },

  async loadRuns() {
    const data = await T.get(`/api/runs?${T.runsQuery()}`);
    T.token = data.token;
    T.root = data.root;
    T.keys = data.keys;
    T.staleAfter = data.stale_after_s;
    T.rows = new Map(data.rows.map(r => [r.nonce, r]));
    document.getElementById("root").textContent = data.root;
    return data;
  },

  async poll() {
    const live = document.getElementById("live");
    try {
      const data = await T.get(`/api/poll?since=${T.token}&${T.runsQuery()}`);
      live.className = "";
      if (data.changed.length) {
        T.token = data.token;
        const back = new Set(data.rows.map(r => r.nonce));  // a changed run not sent back is no longer listed (hidden)
        for (const nonce of data.changed) if (!back.has(nonce)) T.rows.delete(nonce);
        for (const row of data.rows) T.rows.set(row.nonce, row);
        if (T.page && T.page.onChange) await T.page.onChange(data.changed, data.versions);
      }
    } catch (e) {
      live.className = "off";
    }
  },

  async start() {
    window.addEventListener("hashchange", () => T.render());
    await T.loadRuns().catch(e => { document.getElementById("page").innerHTML = `<p class="error">${T.esc(e.message)}</p>`; });
    await T.render();
    const tick = async () => { await T.poll(); setTimeout(tick, T.pollMs); };
    setTimeout(tick, T.pollMs);
  },

  copy(text, button) {
    const done = () => { if (button) { button.textContent = "copied"; setTimeout(() => button.textContent = "copy", 1200); } };
    if (navigator.clipboard && window.isSecureContext) navigator.clipboard.writeText(text).then(done, done);
    else {
      const t = document.createElement("textarea");
      t.value = text; document.body.appendChild(t); t.select(); document.execCommand("copy"); t.remove(); done();
    }
  },
};
document.addEventListener("DOMContentLoaded", () => T.start());  // every page's script has run by then
