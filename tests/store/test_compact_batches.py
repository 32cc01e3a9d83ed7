"""Compacting a run too large to hold whole: merged a few keys at a time, the same records and footer
as one merge (only the row groups differ: one Parquet write per batch)."""

import shutil

import pyarrow.parquet as pq

import theseus.store.compact as compact_module
from tests.store._segments import segment_files
from theseus.store import Node, Store


def write_rewritten_run(root) -> Node:
    """Six one-segment writers over three keys, then a seventh rewriting seq 0 (the merge must sort)."""
    store = Store(root)
    n = first = Node.start("big")
    for i in range(6):
        with store.writer() as w:
            w.write(n, {"a": float(i), "b": i, "c": f"s{i}"})
            n = n.next()
    with store.writer() as w:
        w.write(first, {"a": 42.0, "b": -1})
    return first


def answer(root, nonce):
    return Store(root).find().nonce(nonce).columns(keys=["a", "b", "c"])


def test_batched_merge_writes_the_same_segment(tmp_path, monkeypatch):
    first = write_rewritten_run(tmp_path / "one")
    shutil.copytree(tmp_path / "one", tmp_path / "batched")
    before = answer(tmp_path / "one", first.nonce)
    assert list(Store(tmp_path / "one").compact().values()) == [7]
    monkeypatch.setattr(compact_module, "MERGE_BATCH_ROWS", 3)  # 7 rows: three batches of one key
    assert list(Store(tmp_path / "batched").compact().values()) == [7]
    (whole,), (batched,) = segment_files(Store(tmp_path / "one")), segment_files(Store(tmp_path / "batched"))
    assert whole.rsplit("/", 1)[-1] == batched.rsplit("/", 1)[-1]
    whole_file, batched_file = pq.ParquetFile(whole), pq.ParquetFile(batched)
    assert batched_file.read().equals(whole_file.read())
    assert batched_file.schema_arrow.metadata == whole_file.schema_arrow.metadata  # keys and block index
    assert (whole_file.metadata.num_row_groups, batched_file.metadata.num_row_groups) == (1, 3)
    assert answer(tmp_path / "batched", first.nonce) == before
    assert before["a"][0] == 42.0 and before["b"][0] == -1 and before["c"] == [f"s{i}" for i in range(6)]


def test_batched_merge_gives_way_to_a_racing_compaction(tmp_path, monkeypatch):
    first = write_rewritten_run(tmp_path)
    before = answer(tmp_path, first.nonce)
    read = compact_module._read_segment
    calls, raced = [], []

    def racing_read(index, path):
        calls.append(path)
        if len(calls) == 8 and not raced:  # every segment read once: another compaction retires them all
            raced.append(True)
            monkeypatch.setattr(compact_module, "MERGE_BATCH_ROWS", 1 << 20)
            assert list(Store(tmp_path).compact().values()) == [7]
            monkeypatch.setattr(compact_module, "MERGE_BATCH_ROWS", 3)
        return read(index, path)

    monkeypatch.setattr(compact_module, "_read_segment", racing_read)
    monkeypatch.setattr(compact_module, "MERGE_BATCH_ROWS", 3)
    assert Store(tmp_path).compact() == {}  # gave way: the racing compaction merged the same records
    assert raced and len(segment_files(Store(tmp_path))) == 1
    assert answer(tmp_path, first.nonce) == before
