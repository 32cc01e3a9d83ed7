"""Swapped checkpoint folders: each folder names the node it was saved for (its ``job.json``), so ``audit`` reports
a folder another node's record references, naming both nodes, and every restore (branch, resume, ``eval``,
``sample``) refuses it; a folder that names no node (an older one) is checked by the step it holds."""

from __future__ import annotations

import json
import os

import pytest
from typer.testing import CliRunner

from theseus.audit import audit
from theseus.cli import app
from theseus.quick import quick
from theseus.store import Store
from theseus.store.manifest import MANIFEST, FileEntry, encode, parse

pytestmark = pytest.mark.slow  # the session fixture trains three tiny runs


def swap(root: str, nonce: str, a: int, b: int):
    """Exchange the checkpoint folders of seqs ``a`` and ``b`` of run ``nonce``; their nodes."""
    store = Store(root)
    first, second = (store.find().nonce(nonce).seq(s).last() for s in (a, b))
    one, two = store.objects(first), store.objects(second)
    os.rename(one, one + ".tmp")
    os.rename(two, one)
    os.rename(one + ".tmp", two)
    return first, second


def test_audit_reports_swapped_folders_naming_both_nodes(built, copy_root):
    root = copy_root()
    first, second = swap(root, built.main, 3, 6)
    report = audit(root)
    assert not report.ok
    wrong = [p for p in report.errors if p.kind == "wrong-node"]
    assert len(wrong) == 2, report.errors
    for p in wrong:
        assert first.id in p.message and second.id in p.message, p.message
    assert {p.path for p in wrong} == {f"objects/{first.id}", f"objects/{second.id}"}


def test_a_branch_from_a_swapped_folder_is_refused(built, copy_root):
    root = copy_root()
    first, second = swap(root, built.main, 3, 6)
    with quick(root) as q:
        q.find().node(first).branch()
        with pytest.raises(ValueError, match=f"checkpoint of node {second.id} .*not of node {first.id}"):
            q.create()


def test_eval_of_a_swapped_folder_records_nothing(built, copy_root):
    root = copy_root()
    first, second = swap(root, built.main, 3, 6)
    result = CliRunner().invoke(app, ["eval", root, first.id, "--tasks", "bits-per-byte", "--limit", "1"])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert first.id in result.output and second.id in result.output
    assert Store(root).find().job("gpt/evaluate").all() == []


def test_a_folder_naming_no_node_is_checked_by_its_step(built, copy_root):
    root = copy_root()
    first, _ = swap(root, built.main, 3, 6)
    folder = Store(root).objects(first)  # now seq 6's checkpoint, its job.json stripped of the node as an older one
    job = json.loads(open(f"{folder}/job.json", "rb").read())
    del job["node"]
    raw = json.dumps(job).encode()
    with open(f"{folder}/job.json", "wb") as f:
        f.write(raw)
    listed = parse(open(f"{folder}/{MANIFEST}", "rb").read())
    listed["job.json"] = FileEntry.of_bytes("job.json", raw)
    with open(f"{folder}/{MANIFEST}", "wb") as f:
        f.write(encode(listed.values()))
    result = CliRunner().invoke(app, ["sample", root, first.id, "1+2=", "--max-new-tokens", "2"])
    assert result.exit_code == 2, result.output
    assert "holds step 6, not step 3" in result.output and first.id in result.output
