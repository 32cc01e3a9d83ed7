"""`theseus.audit`: audit() and gc() on a root with real training runs (resumed, branched, failed)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from theseus.audit import audit, gc
from theseus.store import Node, Store
from theseus.store.listing import list_segments

pytestmark = pytest.mark.slow  # the session fixture trains three tiny runs


def checkpoint_folders(root: str, nonce: str) -> list[str]:
    store = Store(root)
    return [store.objects(n) for n in store.find().nonce(nonce).checkpoint().all()]


def kinds(report) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for p in report.problems:
        out.setdefault(p.kind, []).append(p.path)
    return out


def run_of(report, nonce):
    return next(r for r in report.runs if r.nonce == nonce)


def test_clean_root_is_ok_and_every_checkpoint_byte_is_hashed_once(built):
    report = audit(built.root)
    assert report.ok, report.errors
    assert set(kinds(report)) == {"failed-run"}  # a failed run is a warning, not an integrity failure
    checkpoints = [c for r in report.runs for c in r.checkpoints]
    assert len(checkpoints) == 5 and all(c.verified and c.ok for c in checkpoints)
    on_disk = 0
    for c in checkpoints:
        folder = os.path.join(built.root, c.path)
        on_disk += sum(os.path.getsize(os.path.join(d, f))
                       for d, _, fs in os.walk(folder) for f in fs if f != "MANIFEST.json")
    assert report.bytes_verified == on_disk
    assert json.loads(report.to_json())["ok"] is True


def test_lineage_resume_and_config_changes(built):
    report = audit(built.root)
    main = run_of(report, built.main)
    assert (main.first_seq, main.last_seq, main.gaps, main.parent) == (0, 8, (), None)
    assert main.status == "finished" and main.job == "gpt/train/pretrain"
    [resume] = main.resumes
    assert (resume.seq, resume.parent_seq, resume.parent_checkpoint) == (7, 6, True)
    assert [c.seq for c in main.checkpoints] == [3, 6, 8]
    assert main.checkpoints[0].config["training"]["tokens"] == 8 * 16 * 6
    assert main.checkpoints[1].changes == ()  # no edit between seq 3 and 6
    [change] = main.checkpoints[2].changes  # the resume raised the token budget
    assert (change.key, change.before, change.after) == ("training.tokens", 8 * 16 * 6, 8 * 16 * 8)
    assert main.checkpoints[2].against == Node(main.name, main.nonce, 6).id


def test_branch_shows_its_parent_and_its_config_changes_from_the_parent_checkpoint(built):
    report = audit(built.root)
    branch = run_of(report, built.branch)
    origin = Node("general.default.train-gpt", built.main, 3).id
    assert branch.parent == origin and branch.first_seq == 0
    first = branch.checkpoints[0]
    assert first.against == origin
    assert {c.key: (c.before, c.after) for c in first.changes}["optimization.lr"] == (3e-4, 1e-3)


def test_failed_run_is_listed_with_its_error(built):
    report = audit(built.root)
    failed = run_of(report, built.failed)
    assert failed.status == "failed" and failed.finished is False
    assert ("RuntimeError: boom" in failed.error
            and failed.error_node == Node("general.default.broken-run", built.failed, 1).id)
    [problem] = [p for p in report.problems if p.kind == "failed-run"]
    assert problem.severity == "warning" and "RuntimeError: boom" in problem.message


def test_one_corrupt_byte_is_reported_by_file_name(copy_root, built):
    root = copy_root()
    folder = checkpoint_folders(root, built.main)[1]
    chunk = os.path.join(folder, "checkpoint", "params", "wte", "embedding", "c", "0", "0")
    data = bytearray(open(chunk, "rb").read())
    data[7] ^= 0x40
    open(chunk, "wb").write(bytes(data))
    report = audit(root)
    assert not report.ok
    [problem] = report.errors
    assert problem.kind == "corrupt-file" and problem.path == os.path.relpath(chunk, root)
    assert "params/wte/embedding" in problem.message and "sha256" in problem.message
    assert [c.ok for c in run_of(report, built.main).checkpoints] == [True, False, True]
    # sizes only: the same-size corruption passes, a truncated file does not
    assert audit(root, verify_checksums=False).ok
    open(chunk, "ab").write(b"x")
    [problem] = audit(root, verify_checksums=False).errors
    assert problem.kind == "corrupt-file" and "size" in problem.message


def test_truncated_segment_is_named_and_other_runs_are_still_audited(copy_root, built):
    root = copy_root()
    store = Store(root)
    segment = list_segments(store.fs, store.path(), "*", built.main)[0]
    with open(segment, "r+b") as f:
        f.truncate(os.path.getsize(segment) // 2)
    report = audit(root)
    assert not report.ok
    assert kinds(report)["unreadable-segment"] == [os.path.relpath(segment, root)]
    branch = run_of(report, built.branch)
    assert branch.checkpoints and all(c.verified for c in branch.checkpoints)
    assert run_of(report, built.failed).status == "failed"
    with pytest.raises(ValueError, match="cannot be read"):
        gc(root, min_age_s=0)  # it cannot know what the lost records referenced


def test_deleted_array_is_reported(copy_root, built):
    root = copy_root()
    folder = checkpoint_folders(root, built.branch)[0]
    shutil.rmtree(os.path.join(folder, "checkpoint", "params", "wte", "embedding"))
    report = audit(root)
    [problem] = report.errors
    assert problem.kind == "missing-array" and "params/wte/embedding" in problem.message
    assert problem.path == os.path.relpath(os.path.join(folder, "checkpoint", "params", "wte", "embedding"), root)


def test_incomplete_malformed_and_tampered_checkpoints(copy_root, built):
    root = copy_root()
    first, second, third = checkpoint_folders(root, built.main)
    os.remove(os.path.join(first, "MANIFEST.json"))
    open(os.path.join(second, "MANIFEST.json"), "w").write("{not json")
    open(os.path.join(third, "notes.txt"), "w").write("added after the commit")
    found = kinds(audit(root))
    assert found["incomplete-checkpoint"] == [os.path.relpath(first, root)]
    assert found["bad-manifest"] == [os.path.relpath(os.path.join(second, "MANIFEST.json"), root)]
    assert found["unlisted-file"] == [os.path.relpath(os.path.join(third, "notes.txt"), root)]


def test_unreferenced_objects_are_listed_and_gc_deletes_only_them(copy_root, built):
    root = copy_root()
    store = Store(root)
    kept = checkpoint_folders(root, built.main) + checkpoint_folders(root, built.branch)
    # a crash after the checkpoint's files but before its record; and one mid-save
    complete = store.objects(Node("general.default.train-gpt", built.main, 9))
    shutil.copytree(kept[-1], complete)
    partial = store.objects(Node("general.default.train-gpt", built.branch, 9))
    os.makedirs(os.path.join(partial, "checkpoint"))
    open(os.path.join(partial, "checkpoint", "index.json"), "w").write("{}")
    report = audit(root)
    assert report.ok  # garbage is a warning
    assert set(report.unreferenced) == {os.path.relpath(complete, root), os.path.relpath(partial, root)}
    assert set(kinds(report)["unreferenced-object"]) == set(report.unreferenced)
    assert audit(root, built.branch).unreferenced == (os.path.relpath(partial, root),)

    young = gc(root)  # both were just written: kept
    assert young.deleted == () and {rel for rel, _ in young.kept} == set(report.unreferenced)
    assert all("s ago" in reason for _, reason in young.kept)
    dry = gc(root, dry_run=True, min_age_s=0)
    assert set(dry.deleted) == set(report.unreferenced) and os.path.exists(complete) and dry.bytes > 0
    done = gc(root, min_age_s=0)
    assert set(done.deleted) == set(report.unreferenced)
    assert not os.path.exists(complete) and not os.path.exists(partial)
    assert all(os.path.exists(os.path.join(f, "MANIFEST.json")) for f in kept)
    after = audit(root)
    assert after.ok and after.unreferenced == ()
    # a folder of a run with no log at all (the root copied without its log) is kept
    orphan = store.objects(Node("general.default.elsewhere", "00beef", 3))
    shutil.copytree(kept[0], orphan)
    [(rel, reason)] = gc(root, min_age_s=0).kept
    assert rel == os.path.relpath(orphan, root) and "no log records" in reason and os.path.exists(orphan)
    with pytest.raises(ValueError, match="min_age_s"):
        gc(root, min_age_s=-1)


def test_one_run_by_nonce_and_bad_input(built, tmp_path):
    report = audit(built.root, built.branch)
    assert [r.nonce for r in report.runs] == [built.branch]
    assert report.runs[0].checkpoints[0].changes  # compared with the parent run's checkpoint
    with pytest.raises(ValueError, match="no run with nonce 'abcdef'"):
        audit(built.root, "abcdef")
    with pytest.raises(ValueError, match="6 lowercase hex"):
        audit(built.root, "XYZ")
    with pytest.raises(FileNotFoundError, match="no root"):
        audit(str(tmp_path / "nowhere"))
    with pytest.raises(FileNotFoundError, match="no root"):
        gc(str(tmp_path / "nowhere"))


def test_a_checkpoint_record_pointing_outside_the_root_is_not_followed(copy_root):
    """A stranger's root: a hand-written segment whose checkpoint record says '../../etc'."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from theseus.store.schema import KEYS_METADATA, SEGMENT_SCHEMA

    root = copy_root()
    node = Node("general.default.evil", "abcdef", 0)
    row = {"node": node.id, "seq": 0, "parent": None, "stamp": time.time_ns(), "writer": "deadbeef",
           "key": "_checkpoint", "float": None, "int": None, "bool": None, "str": "../../etc"}
    folder = os.path.join(root, "log", f"name={node.name}", f"nonce={node.nonce}")
    os.makedirs(folder)
    table = pa.Table.from_pylist([row], schema=SEGMENT_SCHEMA).replace_schema_metadata(
        {KEYS_METADATA: b'{"_checkpoint": "str"}'})
    pq.write_table(table, os.path.join(folder, "s-evil.parquet"))  # a theseus segment: readers would read it
    [problem] = audit(root).errors
    assert problem.kind == "bad-checkpoint-path" and "../../etc" in problem.message


def test_audit_imports_no_jax_and_runs_offline(built):
    code = ("import sys; from theseus.audit import audit; "
            f"r = audit({built.root!r}); print(r.ok, 'jax' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["True", "False"]
