// The run page: status, config (YAML) and its diff against another run or a checkpoint, the lineage
// tree, checkpoints, evaluations, the failure, the audit summary and each process's output (live tail).
"use strict";
T.pages.run = (() => {
  let nonce = null, logsTimer = null;

  function tree(node) {
    const me = node.nonce === nonce;
    const from = node.from_seq === null || node.from_seq === undefined ? "" : ` <span class="muted">from seq ${T.esc(node.from_seq)}</span>`;
    return `<li class="${me ? "current" : ""}" data-nonce="${T.esc(node.nonce)}"><span class="runlabel"><a href="${runHref(node.nonce)}">${T.esc(node.name)}:${T.esc(node.nonce)}</a></span>${from}
      ${node.children.length ? `<ul>${node.children.map(tree).join("")}</ul>` : ""}</li>`;
  }

  const runHref = n => T.esc(`#/run/${encodeURIComponent(n)}`);
  const nodeHref = id => T.esc(`#/node/${encodeURIComponent(id)}`);
  const num = v => T.esc(T.fmt(v));  // a value of the root, formatted and escaped

  // rows of [key, html]: each html is built from escaped values only
  function kv(rows) { return `<table class="kv">${rows.map(([k, v]) => `<tr><td>${T.esc(k)}</td><td>${v}</td></tr>`).join("")}</table>`; }

  async function render(main, arg) {
    nonce = arg;
    main.innerHTML = `<p class="muted">loading ${T.esc(nonce)}...</p>`;
    const page = await T.get(`/api/run/${encodeURIComponent(nonce)}`);
    const r = page.row;
    const others = [...T.rows.values()].filter(o => o.nonce !== nonce);
    const lineage = page.lineage;
    main.innerHTML = `
      <h1 class="title">${T.esc(r.name)} <span class="mono muted">${T.esc(r.nonce)}</span> <span id="run-status">${T.statusBadge(r.status)}</span></h1>
      <p><a href="${T.esc(`#/charts?runs=${encodeURIComponent(nonce)}&keys=${encodeURIComponent("train/loss")}`)}">chart this run</a></p>
      <div class="cols2">
        <section id="summary"><h2>Summary</h2>${kv([["job", T.esc(r.job || "-")], ["nodes", `<span id="run-nodes">${num(r.nodes)}</span>`],
          ["last seq", `<a href="${nodeHref(nodeId(r.name, r.nonce, r["last seq"]))}">${num(r["last seq"])}</a>`],
          ["last write", `<span title="${T.esc(T.when(r.written))}">${T.esc(T.ago(r.written))}</span>`],
          ["train/loss", `<span id="run-loss">${num(r["train/loss"])}</span>`], ["val/loss", num(r["val/loss"])], ["train/tokens", num(r["train/tokens"])],
          ["tags", `<span id="run-tags">${T.esc((r.tags || []).join(", ") || "-")}${r.hidden ? " (hidden)" : ""}</span>`],
          ["note", `<span id="run-note">${T.esc(r.note || "-")}</span>`]])}
          ${page.error ? `<h2>Failure</h2><pre class="error" id="run-error">${T.esc(page.error)}</pre>` : ""}
        </section>
        <section id="lineage"><h2>Lineage</h2>
          ${lineage.outside ? `<p class="muted">branched from ${T.esc(lineage.outside)}, not in this root</p>` : ""}
          <ul class="tree">${tree(lineage)}</ul>
          ${page.resumes.length ? `<p>resumed in this lineage at: ${page.resumes.map(x => `seq ${num(x.seq)} (from seq ${num(x.parent_seq)}${x.parent_checkpoint ? ", a checkpoint" : ""})`).join(", ")}</p>` : ""}
        </section>
      </div>
      <section id="checkpoints"><h2>Checkpoints (${page.checkpoints.length})</h2>
        ${page.checkpoints.length ? `<table class="grid"><thead><tr><th>seq</th><th>node</th><th>train/loss</th><th>val/loss</th><th>train/tokens</th><th>size</th></tr></thead><tbody>
        ${page.checkpoints.map(c => `<tr data-seq="${num(c.seq)}"><td class="num">${num(c.seq)}</td><td class="mono"><a href="${nodeHref(c.node)}">${T.esc(c.node)}</a></td>
          <td class="num">${num(c["train/loss"])}</td><td class="num">${num(c["val/loss"])}</td><td class="num">${num(c["train/tokens"])}</td><td class="num">${T.esc(T.bytes(c.bytes))}</td></tr>`).join("")}</tbody></table>` : `<p class="muted">none committed</p>`}
      </section>
      ${page.evals.length ? `<section id="evals"><h2>Evaluations</h2><table class="grid"><thead><tr><th>key</th><th>value</th><th>at seq</th></tr></thead><tbody>
        ${page.evals.map(e => `<tr><td>${T.esc(e.key)}</td><td class="num">${num(e.value)}</td><td class="num">${num(e.seq)}</td></tr>`).join("")}</tbody></table></section>` : ""}
      <section id="config"><h2>Config</h2>
        <div class="controls"><label>diff against <select id="diff-with"><option value="">(choose a run or a checkpoint)</option>
          <optgroup label="this run's checkpoints">${page.checkpoints.map(c => `<option value="${T.esc(c.node)}">seq ${num(c.seq)} checkpoint</option>`).join("")}</optgroup>
          <optgroup label="runs">${others.slice(0, 1000).map(o => `<option value="${T.esc(o.nonce)}">${T.esc(o.name)}:${T.esc(o.nonce)}</option>`).join("")}</optgroup></select></label></div>
        <div id="diff"></div>
        <pre id="config-yaml">${T.esc(page.config || "(no config recorded)")}</pre>
      </section>
      <section id="audit"><h2>Audit</h2>${page.audit ? `<p id="audit-ok">${page.audit.ok ? "no integrity problem" : "integrity problems found"}; ${num(page.audit.checkpoints)} checkpoints listed (sizes, without checksums: <span class="mono">theseus audit ROOT --nonce ${T.esc(nonce)}</span> checks them)</p>
        ${page.audit.problems.length ? `<ul>${page.audit.problems.map(p => `<li><b>${T.esc(p.severity)}</b> ${T.esc(p.kind)}: ${T.esc(p.message)}</li>`).join("")}</ul>` : ""}` : ""}</section>
      <section id="logs"><h2>Process output</h2><div id="log-list" class="muted">loading...</div></section>`;
    document.getElementById("diff-with").addEventListener("change", async e => {
      const el = document.getElementById("diff");
      if (!e.target.value) { el.innerHTML = ""; return; }
      try {
        const d = await T.get(`/api/diff?run=${encodeURIComponent(nonce)}&other=${encodeURIComponent(e.target.value)}`);
        el.innerHTML = d.diff.length ? `<table class="grid" id="diff-table"><thead><tr><th>key</th><th>this run</th><th>${T.esc(e.target.selectedOptions[0].textContent)}</th></tr></thead><tbody>
          ${d.diff.map(x => `<tr><td class="mono">${T.esc(x.key)}</td><td>${T.esc(T.fmt(x.this))}</td><td>${T.esc(T.fmt(x.other))}</td></tr>`).join("")}</tbody></table>`
          : `<p id="diff-table" class="muted">the configs are the same</p>`;
      } catch (err) { el.innerHTML = `<p class="error">${T.esc(err.message)}</p>`; }
    });
    await loadLogs();
    logsTimer = setInterval(loadLogs, 3000);
    document.body.dataset.ready = "run";
  }

  async function loadLogs() {
    const el = document.getElementById("log-list");
    if (!el) return;
    try {
      const got = await T.get(`/api/run/${encodeURIComponent(nonce)}/logs`);
      el.className = "";
      el.innerHTML = got.logs.length ? got.logs.map(l => `<h3 class="small">${T.esc(l.title)} <span class="muted">${T.esc(T.bytes(l.bytes))}</span></h3><pre class="log">${T.esc(l.text)}</pre>`).join("")
        : `<p class="muted" id="log-note">${T.esc(got.note)}</p>`;
      el.querySelectorAll("pre.log").forEach(p => p.scrollTop = p.scrollHeight);
    } catch (e) { el.innerHTML = `<p class="error">${T.esc(e.message)}</p>`; }
  }

  function nodeId(name, n, seq) {
    const utf8 = new TextEncoder().encode(`${name}:${n}:${seq}`);  // as the store encodes ids
    return btoa(String.fromCharCode(...utf8)).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
  }

  async function onChange(changed) {
    if (!changed.includes(nonce)) return;
    const r = T.rows.get(nonce);
    if (!r) return;
    document.getElementById("run-status").innerHTML = T.statusBadge(r.status);
    document.getElementById("run-nodes").textContent = r.nodes;
    document.getElementById("run-loss").textContent = T.fmt(r["train/loss"]);
  }

  function leave() { clearInterval(logsTimer); }
  return {render, onChange, leave, nodeId};
})();
