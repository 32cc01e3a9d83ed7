"""The run page's data: status, config, lineage, checkpoints, evaluations, failure, audit, logs.

>>> import tempfile
>>> from theseus.store import Node, Store
>>> from theseus.ui.follow import Follower
>>> store = Store(tempfile.mkdtemp())
>>> n = Node.start("doc.run.page")
>>> with store.writer() as w:
...     w.job(n, "doc/job", "lr: 0.1\\n")
...     w.write(n, {"train/loss": 2.0, "eval/addition/exact_match": 0.5})
...     w.failed(n, "RuntimeError: boom")
>>> follower = Follower(store); _ = follower.poll()
>>> page = run_page(store, follower, n.nonce)
>>> page["row"]["status"], page["error"], page["evals"][0]["key"], page["config"]
('failed', 'RuntimeError: boom', 'eval/addition/exact_match', 'lr: 0.1\\n')
"""

from __future__ import annotations

import dataclasses
from typing import Any

import polars as pl
import yaml

from theseus.audit import audit
from theseus.dispatch.logs import find_logs
from theseus.store import EmptyResult, Node, Store, layout, schema
from theseus.store import fs as rootfs
from theseus.store.node import check_nonce, decode_id
from theseus.store.retired import kept_checkpoints
from theseus.store.trust import checkpoint_path
from theseus.ui.configs import config_text, diff, flatten, run_config
from theseus.ui.follow import Follower, RunLog
from theseus.ui.lineage import family
from theseus.ui.table import MAIN_METRICS, row

EVAL = "eval/"
LOG_TAIL_BYTES = 64 * 1024  # of each process's output shown (the whole file is one click away: `theseus logs`)


def checkpoints(run: RunLog) -> list[dict[str, Any]]:
    """The run's committed checkpoints that are not retired: seq, node id, folder and the main metrics there.

    >>> checkpoints(RunLog("a", "abcdef"))
    []
    """
    data = run.rows
    found = []
    for seq, path in kept_checkpoints(data).select("seq", "str").iter_rows():
        at = data.filter(pl.col("seq") == seq)
        metrics = {k: v for k, v in zip(at["key"], at["float"].fill_null(at["int"].cast(pl.Float64)))
                   if k in MAIN_METRICS}
        found.append({"seq": seq, "node": Node(run.name, run.nonce, seq).id, "path": path, **metrics})
    return found


def evaluations(run: RunLog) -> list[dict[str, Any]]:
    """The latest value of each ``eval/...`` key and the seq it was logged at.

    >>> evaluations(RunLog("a", "abcdef"))
    []
    """
    data = run.rows.filter(pl.col("key").str.starts_with(EVAL)).sort("seq")
    latest = data.group_by("key").agg(pl.all().last()).sort("key")
    return [{"key": r["key"], "seq": r["seq"], "value": next((r[c] for c in ("float", "int", "bool", "str")
                                                              if r[c] is not None), None)}
            for r in latest.iter_rows(named=True)]


def run_page(store: Store, follower: Follower, nonce: str, with_audit: bool = True) -> dict[str, Any]:
    """Everything the run page shows of run ``nonce`` (``with_audit``: also audit it, sizes without checksums).

    >>> import tempfile
    >>> run_page(Store(tempfile.mkdtemp()), Follower(Store(tempfile.mkdtemp())), "abcdef")
    Traceback (most recent call last):
    ...
    theseus.errors.NotFound: no run with nonce abcdef in this root
    """
    check_nonce(nonce)
    run = follower.run(nonce)
    page = {"row": row(run), "config": config_text(run), "lineage": family(follower.runs, nonce, follower.origins()),
            "checkpoints": checkpoints(run), "evals": evaluations(run), "error": run.latest(schema.ERROR),
            "resumes": [], "audit": None}
    if with_audit:
        report = audit(store.root, nonce, verify_checksums=False, read_only=True)  # the ui never writes
        mine = next((r for r in report.runs if r.nonce == nonce), None)
        sizes = {c.seq: c.bytes for c in mine.checkpoints} if mine else {}
        for item in page["checkpoints"]:
            item["bytes"] = sizes.get(item["seq"])
        page["resumes"] = [dataclasses.asdict(r) for r in mine.resumes] if mine else []
        page["audit"] = {"ok": report.ok, "runs": len(report.runs), "checkpoints": len(mine.checkpoints) if mine else 0,
                         "gaps": [list(g) for g in mine.gaps] if mine else [],
                         "problems": [dataclasses.asdict(p) for p in report.problems]}
    return page


def process_logs(store: Store, nonce: str, tail_bytes: int = LOG_TAIL_BYTES) -> list[dict[str, Any]]:
    """The published output of each process of each launch of the run (``theseus logs``), the last
    ``tail_bytes`` of each; only regular files with one hard link, reached without a link, are read (a refused
    one's text says why).

    >>> import tempfile
    >>> from theseus.store import Node
    >>> store = Store(tempfile.mkdtemp())
    >>> n = Node.start("doc.logs.run")
    >>> with store.writer() as w:
    ...     w.job(n, "doc/job", "")
    >>> process_logs(store, n.nonce)
    []
    """
    found = []
    for log in find_logs(store.root, nonce):
        path = store.path(layout.OBJECTS, log.node.id, layout.PROCESS_LOGS, log.path.rsplit("/", 1)[-1])
        try:
            rootfs.check_inside(store.fs, store.path(), path)
            text = rootfs.read_regular(store.fs, path, single_link=True).decode(errors="replace")
        except rootfs.NotPlainFile as e:  # shown in its place: the panel still lists the others
            text = f"not shown: {e}"
        found.append({"title": log.title, "seq": log.node.seq, "process": log.process, "attempt": log.attempt,
                      "bytes": len(text.encode()), "text": text[-tail_bytes:]})
    return found


NO_JOB = ("no process output: this run has no job record, so it was written by a script (Store.writer), "
          "not started as a theseus job, and no launch published any")
NOT_LAUNCHED = ("no process output published: runs started with theseus launch or submit publish each process's "
                "output; a job run in a Python session (quick(), theseus run) prints it there instead")


def logs_panel(store: Store, follower: Follower, nonce: str) -> dict[str, Any]:
    """The run page's process output: ``{"logs": process_logs(...), "note": ...}``, the note saying why
    there is none when there is none (a run without a job record was never launched).

    >>> import tempfile
    >>> from theseus.store import Node
    >>> store = Store(tempfile.mkdtemp())
    >>> n = Node.start("doc.logs.script")
    >>> with store.writer() as w:
    ...     w.write(n, {"train/loss": 1.0})
    >>> follower = Follower(store); _ = follower.poll()
    >>> logs_panel(store, follower, n.nonce) == {"logs": [], "note": NO_JOB}
    True
    """
    run = follower.run(nonce)
    logs = process_logs(store, nonce)
    note = None if logs else NOT_LAUNCHED if run.latest(schema.JOB) else NO_JOB
    return {"logs": logs, "note": note}


def config_diff(store: Store, follower: Follower, nonce: str, other: str) -> list[dict[str, Any]]:
    """The config keys of run ``nonce`` that differ from ``other``: a run's nonce (its latest config)
    or a node id with a checkpoint (the config saved with it).

    >>> import tempfile
    >>> from theseus.store import Node
    >>> store = Store(tempfile.mkdtemp())
    >>> a, b = Node.start("doc.diff.a"), Node.start("doc.diff.b")
    >>> with store.writer() as w:
    ...     w.job(a, "doc/job", "lr: 0.1\\nsteps: 5\\n"); w.job(b, "doc/job", "lr: 0.2\\nsteps: 5\\n")
    >>> follower = Follower(store); _ = follower.poll()
    >>> config_diff(store, follower, a.nonce, b.nonce)
    [{'key': 'lr', 'this': 0.1, 'other': 0.2}]
    """
    this = run_config(follower.run(nonce))
    if len(other) == 6:
        return diff(this, run_config(follower.run(other)))
    decode_id(other)  # a clear error for a malformed id
    folder = store.record(other).get(schema.CHECKPOINT)
    if folder is None:
        raise EmptyResult(f"node {other} has no committed checkpoint, so no saved config to compare with")
    path = store.path(*checkpoint_path(folder).split("/"), layout.CONFIG_FILE)
    rootfs.check_inside(store.fs, store.path(), path)
    tree = yaml.safe_load(rootfs.read_regular(store.fs, path, single_link=True))
    return diff(this, flatten(tree) if isinstance(tree, dict) else {})
