"""Retired checkpoints in `theseus audit` and `theseus gc`: a retired one is never a checkpoint a reader needs,
and gc clears the files of one a crash left behind (keeping published analyses)."""

from __future__ import annotations

import os

from typer.testing import CliRunner

from tests.audit._synthetic import make_synthetic_root
from theseus.audit import audit, gc
from theseus.cli import app
from theseus.store import Node, Store
from theseus.store.fs import write_atomic
from theseus.train.manifest import FileEntry, write_manifest


def _root(tmp_path):
    """A synthetic run of 10 nodes with checkpoints at seqs 4 and 9; the store and the two checkpoint nodes."""
    root = str(tmp_path / "root")
    make_synthetic_root(root, nodes=10, checkpoints=2, array_bytes=64)
    store = Store(root)
    return store, store.find().checkpoint().all()


def _kinds(report):
    return sorted(p.kind for p in report.problems)


def test_a_retired_checkpoint_left_on_disk_is_a_warning_and_gc_clears_it_keeping_analyses(tmp_path):
    store, (old, new) = _root(tmp_path)
    analysis = f"{store.objects(old)}/analysis/attention"
    write_atomic(f"{analysis}/map.json", b"[]")
    write_manifest(analysis, [FileEntry.of_bytes("map.json", b"[]")])
    with store.writer() as w:
        w.artifacts(old, f"objects/{old.id}")
        w.retire(old, "logging.keep_checkpoints=1")  # as a job that crashed before deleting the folder
    report = audit(store.root)
    assert report.ok, report.errors
    assert "retired-object" in _kinds(report)
    assert [c.seq for c in report.runs[0].checkpoints] == [new.seq]  # a retired one is not checked
    dry = gc(store.root, dry_run=True, min_age_s=0)
    assert dry.retired == (f"objects/{old.id}",) and dry.bytes > 0
    assert os.path.exists(f"{store.objects(old)}/MANIFEST.json")
    done = CliRunner().invoke(app, ["gc", store.root, "--min-age", "0"])
    assert done.exit_code == 0 and f"deleted the retired checkpoint in objects/{old.id}" in done.output
    assert os.listdir(store.objects(old)) == ["analysis"]  # published analyses have their own record
    assert os.path.exists(f"{store.objects(new)}/MANIFEST.json")
    after = audit(store.root)
    assert after.ok and "retired-object" not in _kinds(after) and not gc(store.root, min_age_s=0).retired
    assert store.find().checkpoint().all() == [new]


def test_a_retired_newest_checkpoint_is_an_error(tmp_path):
    store, (_, new) = _root(tmp_path)
    with store.writer() as w:
        w.retire(new, "by hand")
    report = audit(store.root)
    assert not report.ok
    [problem] = [p for p in report.errors if p.kind == "retired-needed"]
    assert "newest checkpoint" in problem.message and "by hand" in problem.message
    result = CliRunner().invoke(app, ["audit", store.root])
    assert result.exit_code == 1 and "retired-needed" in result.output


def test_a_retired_checkpoint_a_branch_starts_from_is_an_error(tmp_path):
    store, (old, _) = _root(tmp_path)
    branch = Node("bench.audit.branch", "0badc0", 0, old.id)
    with store.writer() as w:
        w.job(branch, "gpt/train/pretrain", "{}")
        w.retire(old, "logging.keep_checkpoints=1")
    [problem] = [p for p in audit(store.root).errors if p.kind == "retired-needed"]
    assert problem.path == "bench.audit.branch:0badc0" and "starts from" in problem.message
