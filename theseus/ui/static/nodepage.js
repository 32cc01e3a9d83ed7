// The node page: its id (copyable), the folded record, its artifacts (pictures inline) and the
// commands to resume, branch, verify, sample or analyze from it.
"use strict";
T.pages.node = (() => {
  async function render(main, arg) {
    const n = await T.get(`/api/node/${encodeURIComponent(arg)}`);
    const file = a => T.esc(`/api/file/${encodeURIComponent(n.id)}/${a.path.split("/").map(encodeURIComponent).join("/")}`);
    main.innerHTML = `
      <h1 class="title"><a href="${T.esc(`#/run/${encodeURIComponent(n.nonce)}`)}">${T.esc(n.name)}:${T.esc(n.nonce)}</a> seq ${T.esc(n.seq)}</h1>
      <div class="copyrow"><input id="node-id" readonly value="${T.esc(n.id)}"><button id="copy-id">copy</button></div>
      <p class="muted">parent: ${n.parent ? `<a href="${T.esc(`#/node/${encodeURIComponent(n.parent)}`)}">${T.esc(n.parent)}</a>` : "none (a fresh lineage)"}; written ${T.esc(T.when(n.written))}</p>
      <div class="cols2">
        <section id="record"><h2>Record (folded)</h2><table class="grid" id="record-table"><tbody>
          ${Object.entries(n.record).map(([k, v]) => `<tr data-key="${T.esc(k)}"><td class="mono">${T.esc(k)}</td><td class="value">${k === "_config" || k === "_error" ? `<pre>${T.esc(v)}</pre>` : T.esc(T.fmt(v))}</td></tr>`).join("")}</tbody></table></section>
        <section id="commands"><h2>Use this node</h2>
          ${Object.entries(n.commands).map(([k, c]) => `<h3 class="small">${T.esc(k)} <button class="copy-cmd" data-k="${T.esc(k)}">copy</button></h3><pre class="cmd" data-k="${T.esc(k)}">${T.esc(c)}</pre>`).join("")}
        </section>
      </div>
      <section id="artifacts"><h2>Artifacts (${n.artifacts.length})</h2>
        ${n.artifacts_refused ? `<p class="error" id="artifacts-refused">not listed: ${T.esc(n.artifacts_refused)}</p>` : ""}
        ${n.artifacts.length ? `<table class="grid"><tbody>${n.artifacts.map(a => `<tr><td class="mono"><a href="${file(a)}" target="_blank" rel="noopener noreferrer">${T.esc(a.path)}</a></td><td class="num">${T.esc(T.bytes(a.bytes))}</td></tr>`).join("")}</tbody></table>` : `<p class="muted">no files</p>`}
        ${n.artifacts_cut ? `<p class="muted" id="artifacts-cut">the folder holds more entries than are listed here</p>` : ""}
        ${n.interrupted.length ? `<p class="muted" id="interrupted">interrupted analyses (no MANIFEST.json: not published, files not shown): ${n.interrupted.map(T.esc).join(", ")}</p>` : ""}
        ${n.artifacts.filter(a => a.picture).map(a => `<figure><img class="artifact" src="${file(a)}" alt="${T.esc(a.path)}"><figcaption class="muted">${T.esc(a.path)}</figcaption></figure>`).join("")}
      </section>`;
    document.getElementById("copy-id").addEventListener("click", e => T.copy(n.id, e.target));
    main.querySelectorAll("button.copy-cmd").forEach(b => b.addEventListener("click", () => T.copy(n.commands[b.dataset.k], b)));
    document.body.dataset.ready = "node";
  }
  return {render};
})();
