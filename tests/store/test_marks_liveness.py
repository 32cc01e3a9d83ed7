"""A person's marks never change whether a run is alive: tagging, annotating, hiding and unhiding a
stale run leave it ``stale`` (and its last write where its own records left it) in ``Store.runs()``,
``theseus ls`` and the UI, from segment footers, from a fold and from a compacted view alike; a
real write makes it ``running`` again."""

from __future__ import annotations

import hashlib
import json
import time

import pytest
from typer.testing import CliRunner

from tests.store.test_store_view import logged_warnings
from tests.store.test_view_summary_entry import rewrite_footer, view_problems
from theseus.cli import app
from theseus.store import Node, Store, marks
from theseus.store.view_file import VIEW_SUMMARY, VIEW_SUMMARY_DIGEST, list_views
from theseus.ui.api import Api

AGO_NS = 16 * 60 * 10**9  # past STALE_AFTER_S: the run's process died that long ago


def crashed_run(root: str, monkeypatch, sparse: bool) -> Node:
    """A run marked running whose records were all written 16 minutes ago (``sparse``: a key at
    every other node, so its block is not dense and the summary folds the run)."""
    real = time.time_ns
    monkeypatch.setattr(time, "time_ns", lambda: real() - AGO_NS)
    node = Node.start("p.g.crashed")
    with Store(root).writer() as w:
        w.status(node, "running")
        for seq in range(4):
            w.write(node, {"train/loss": 3.0 - seq, **({"val/loss": 2.0} if sparse and seq % 2 == 0 else {})})
            node = node.next()
    monkeypatch.setattr(time, "time_ns", real)
    return node


def shown(root: str, nonce: str) -> dict[str, object]:
    """The run's status and last write in Store.runs(), ``theseus ls --json --all`` and the UI's rows."""
    row = Store(root).runs().filter(nonce=nonce).row(0, named=True)
    listed = runner.invoke(app, ["ls", root, "--json", "--all"])
    assert listed.exit_code == 0, listed.output
    [cli] = [r for r in json.loads(listed.output) if r["nonce"] == nonce]
    api = Api(Store(root))
    api.follower.poll()
    [ui] = api.rows([nonce])
    return {"runs": row["status"], "ls": cli["status"], "ui": ui["status"], "written": row["_written"],
            "ui written": ui["written"]}


runner = CliRunner()


@pytest.mark.parametrize("layout", ["footers", "fold", "compacted"])
def test_marks_leave_a_stale_run_stale_and_a_write_revives_it(tmp_path, monkeypatch, layout):
    root = str(tmp_path)
    tip = crashed_run(root, monkeypatch, sparse=layout == "fold")
    store = Store(root)
    before = shown(root, tip.nonce)
    assert before["runs"] == before["ls"] == before["ui"] == "stale"
    assert time.time_ns() - before["written"] > AGO_NS - 60 * 10**9

    marks.mark(store, tip.nonce, tags=["crashed", "keep"])
    marks.mark(store, tip.nonce, note="OOM at step 3")
    marks.mark(store, tip.nonce, hidden=True)
    marks.mark(store, tip.nonce, hidden=False, untag=["keep"])
    if layout == "compacted":  # marks and metrics merged into one segment, summarised by the view
        store.compact()
    after = shown(root, tip.nonce)
    assert after == before, after
    assert marks.marks_of(Store(root).run_record(tip.nonce)) == {
        "tags": ["crashed"], "note": "OOM at step 3", "hidden": False}

    with Store(root).writer() as w:  # the run's own write: alive again
        w.write(tip, {"train/loss": 0.5})
    revived = shown(root, tip.nonce)
    assert revived["runs"] == revived["ls"] == revived["ui"] == "running"
    assert revived["written"] > after["written"]


def test_a_view_that_counted_marks_in_its_last_write_is_answered_from_the_log(tmp_path, monkeypatch):
    """A view made before ``run_written`` kept ``written``, marks included: its summaries are not
    used (nor reported as damaged), and the run still reads stale."""
    root = str(tmp_path)
    tip = crashed_run(root, monkeypatch, sparse=False)
    marks.mark(Store(root), tip.nonce, tags=["crashed"])
    Store(root).compact()
    (view,) = list_views(Store(root))

    def counting_marks(metadata: dict) -> dict:
        summary = json.loads(metadata[VIEW_SUMMARY])
        summary["written"] = [time.time_ns()] * len(summary.pop("run_written"))  # as the mark's stamp
        text = json.dumps(summary).encode()
        return {**metadata, VIEW_SUMMARY: text, VIEW_SUMMARY_DIGEST: hashlib.sha256(text).hexdigest().encode()}

    rewrite_footer(view, counting_marks)
    with logged_warnings() as warnings:
        assert shown(root, tip.nonce)["runs"] == "stale"
    assert warnings == [] and view_problems(root) == []
