"""A run with more rows than FOLD_BATCH_ROWS is folded a batch of keys at a time: the same answer, view
and records as folding it in one read, rewrites, branches, mixed types and sparse keys included."""

import shutil

import pyarrow.parquet as pq
import pytest

import theseus.store.fold as fold_module
from theseus.store import Node, Store


def write_run(root) -> Node:
    """Three writers over one run: a dense start, rewrites with another parent (a later segment holding
    an earlier parent position than some keys), an int into a float key, and keys on a few seqs only."""
    store = Store(root)
    first, source = Node.start("batches"), Node.start("source")
    n = first
    with store.writer() as w:
        for i in range(6):
            w.write(n, {"a": float(i), "b": i, "c": f"s{i}", "e": float("nan") if i == 3 else -float(i)})
            n = n.next()
        w.write(n, {"y": 6.0})  # seq 6's first record (its parent is seq 5) is in a key of a late batch
    with store.writer() as w:
        w.write(Node(first.name, first.nonce, 6, source.id), {"a": 6.0})  # a later record, in the first batch
        w.write(Node(first.name, first.nonce, 2, source.id), {"a": 7, "d": True})
        w.write(Node(first.name, first.nonce, 4, source.id), {"d": False})
        w.status(Node(first.name, first.nonce, 4, source.id), "running")
        w.write(Node(first.name, first.nonce, 9), {"z": "late"})
    with store.writer() as w:
        w.write(Node(first.name, first.nonce, 0, source.id), {"b": 40})
        w.finished(Node(first.name, first.nonce, 9))
    return first


def answers(root, nonce: str):
    store = Store(root)
    frame = store.find().nonce(nonce).frame().collect()
    records = [store.record(node) for node in store.find().nonce(nonce).all()]
    return frame.rows(), records, store.runs().drop("last_write", strict=False).rows(), store.run_record(nonce)


def view_rows(root):
    (path,) = (root / "view").glob("*.parquet")
    return pq.read_table(path).to_pylist()


@pytest.mark.parametrize("compacted", [False, True])
def test_batched_fold_answers_as_one_read(tmp_path, monkeypatch, compacted):
    first = write_run(tmp_path / "whole")
    shutil.copytree(tmp_path / "whole", tmp_path / "batched")
    if compacted:
        Store(tmp_path / "whole").compact()
    expected = answers(tmp_path / "whole", first.nonce)
    monkeypatch.setattr(fold_module, "FOLD_BATCH_ROWS", 2)  # a few keys per batch, some keys alone
    if compacted:
        Store(tmp_path / "batched").compact()
        assert repr(view_rows(tmp_path / "batched")) == repr(view_rows(tmp_path / "whole"))  # repr: NaN equals NaN
    assert repr(answers(tmp_path / "batched", first.nonce)) == repr(expected)
    records = expected[1]
    assert [r["seq"] for r in records] == [0, 1, 2, 3, 4, 5, 6, 9]
    if not compacted:  # the first record's parent (in segment order), though read in a later batch
        assert records[6]["parent"] == records[5]["node"]
    assert records[0]["parent"] != records[1]["parent"] == records[0]["node"]  # seq 0's only parent: the branch
    assert records[0]["b"] == 40 and records[2]["a"] == 7.0 and records[7]["z"] == "late"
