"""Writing and reading through the public API, on a local root and on the GCS emulator."""

import polars as pl
import pytest

from tests.store._segments import segment_files
from theseus.store import CorruptSegment, EmptyResult, Node, Store, UnknownKey


def write_run(store, name="train-gpt", steps=5, start_loss=10.0, **extra):
    node = Node.start(name)
    first = node
    with store.writer() as w:
        w.job(node, "gpt/train/pretrain", "a: 1\n")
        for i in range(steps):
            w.write(node, {"train/loss": start_loss - i, "train/tokens": 1000 * i, **extra})
            if i % 2 == 0:
                w.checkpoint(node, f"objects/{node.id}")
            node = node.next()
        w.finished(node)
    return first, node


def test_round_trip_and_fold(root):
    store = Store(root)
    first, last = write_run(store)
    nodes = store.find().nonce(first.nonce).all()
    assert [n.seq for n in nodes] == list(range(6))
    assert nodes[0] == first and nodes[1].parent == first.id
    assert store.find().nonce(first.nonce).has("train/loss").select(keys=["train/loss", "train/tokens"]) == [
        {"train/loss": 10.0 - i, "train/tokens": 1000 * i} for i in range(5)
    ]
    # a later record wins, earlier non-null values of other keys survive
    with store.writer() as w:
        w.write(first, {"train/loss": 99.0, "note": "fixed"})
    row = store.find().node(first).select(keys=["train/loss", "train/tokens", "note"])
    assert row == [{"train/loss": 99.0, "train/tokens": 0, "note": "fixed"}]
    rec = store.record(first)
    assert rec["_job"] == "gpt/train/pretrain" and rec["_checkpoint"] == f"objects/{first.id}"


def test_int_and_float_fold_to_float(root):
    store = Store(root)
    n = Node.start("mixed")
    with store.writer() as w:
        w.write(n, {"x": 1})
    with store.writer() as w:
        w.write(n.next(), {"x": 2.5})
    assert store.find().nonce(n.nonce).select(keys=["x"]) == [{"x": 1.0}, {"x": 2.5}]
    assert store.find().nonce(n.nonce).frame().collect_schema()["x"] == pl.Float64


def test_cursor_dsl(root):
    store = Store(root)
    a, _ = write_run(store, "proj.grp.alpha", start_loss=10.0)
    b, _ = write_run(store, "proj.other.beta", start_loss=20.0)
    c = Node.start("tokenize")
    with store.writer() as w:
        w.job(c, "data/tokenize/fineweb", "")
        w.write(c, {"data/samples": 3})
        w.failed(c, "boom")

    assert {n.nonce for n in store.find().spec(project="proj").all()} == {a.nonce, b.nonce}
    assert {n.nonce for n in store.find().spec(group="other").all()} == {b.nonce}
    assert {n.nonce for n in store.find().spec(run="alpha").all()} == {a.nonce}
    assert store.find().spec(group="grp", run="beta").all() == []
    # contradicting identity filters match nothing, whatever follows, and say so when one node is asked for
    nothing = store.find().name("proj.grp.alpha").name("proj.other.beta")
    assert nothing.all() == [] and nothing.spec(project="proj").nonce(a.nonce).select(keys=["train/loss"]) == []
    assert store.find().nonce(a.nonce).nonce(b.nonce).all() == []
    assert store.find().spec(project="proj").spec(project="other").all() == []
    with pytest.raises(EmptyResult, match="contradicting name or nonce filters"):
        nothing.first()
    assert {n.nonce for n in store.find().name("proj.grp.alpha").all()} == {a.nonce}
    assert store.find().name("tokenize").all() == [c]
    assert store.find().seq(2).nonce(a.nonce).first().seq == 2
    assert store.find().node(a.id).all() == [a]
    assert {n.nonce for n in store.find().job("gpt/train/pretrain").all()} == {a.nonce, b.nonce}
    assert store.find().job("data/tokenize/fineweb").all() == [c]
    assert {n.nonce for n in store.find().finished().all()} == {a.nonce, b.nonce}
    assert {n.nonce for n in store.find().finished(False).all()} == {c.nonce}
    assert [n.seq for n in store.find().nonce(a.nonce).checkpoint().all()] == [0, 2, 4]
    assert len(store.find().has("data/samples").all()) == 1
    assert [r["train/loss"]
            for r in store.find().where("train/loss", "<", 8).sort("train/loss").select(keys=["train/loss"])] == [6, 7]
    assert (store.find().where("train/loss", "in", [7.0, 19]).sort("train/loss", ascending=False)
            .select(keys=["train/loss"])) == [
        {"train/loss": 19.0},
        {"train/loss": 7.0},
    ]
    assert (store.find().where("train/tokens", "==", 0).where("train/loss", "!=", 10).select(keys=["train/loss"])
            == [{"train/loss": 20.0}])
    assert (store.find().where("train/tokens", ">=", 4000).where("train/tokens", "<=", 4000)
            .where("train/tokens", ">", 3000).limit(1).select(keys=["train/tokens"]) == [{"train/tokens": 4000}])
    # the seed's query: checkpoint + where + descending sort, the last is the lowest loss
    best = (store.find().nonce(a.nonce).checkpoint().where("train/tokens", "<=", 3000)
            .sort("train/loss", ascending=False).last())
    assert best.seq == 2
    assert store.find().newest().all() == [c]
    assert store.find().sort("train/loss").first().nonce == a.nonce
    assert len(store.find().limit(3).all()) == 3
    bare = store.find().nonce(c.nonce).select()
    assert bare == [{"data/samples": 3}]
    assert all(not k.startswith("_") for row in store.find().select() for k in row)
    pdf = store.find().nonce(a.nonce).to_pandas()
    assert list(pdf["seq"]) == list(range(6)) and "train/loss" in pdf.columns
    lazy = store.find().nonce(a.nonce).frame()
    assert isinstance(lazy, pl.LazyFrame) and lazy.collect().height == 6


def test_columns_is_select_by_column(root):
    """columns(keys) holds select(keys)'s values as one list per key: the same nodes, the same
    order, None where a node lacks a key, on the plain path and the Polars plan's."""
    store = Store(root)
    a, _ = write_run(store, "proj.grp.alpha", start_loss=10.0)
    b, _ = write_run(store, "proj.grp.beta", start_loss=20.0, extra=1.5)
    assert store.find().nonce(a.nonce).columns(keys=["train/loss", "train/tokens"]) == {
        "train/loss": [10.0, 9.0, 8.0, 7.0, 6.0], "train/tokens": [0, 1000, 2000, 3000, 4000]}
    cursors = [store.find(), store.find().nonce(b.nonce), store.find().where("train/loss", "<", 17).sort("train/loss"),
               store.find().sort("train/tokens", ascending=False).limit(3), store.find().has("extra"),
               store.find().latest(), store.find().newest()]
    for cursor in cursors:
        for keys in (["train/loss"], ["extra", "train/tokens"], ["train/tokens", "extra", "train/loss"], None):
            rows, columns = cursor.select(keys=keys), cursor.columns(keys=keys)
            assert (list(columns) if keys else set(columns)) == (keys or {"extra", "train/loss", "train/tokens"})
            assert [dict(zip(columns, row)) for row in zip(*columns.values())] == rows, (cursor.describe(), keys)
            assert all(len(values) == len(rows) for values in columns.values())
    assert store.find().columns(keys=["extra"]) == {"extra": [1.5] * 5}  # alpha's nodes hold none of it
    assert store.find().nonce(a.nonce).columns(keys="train/loss") == {"train/loss": [10.0, 9.0, 8.0, 7.0, 6.0]}
    assert store.find().nonce(a.nonce).columns(keys=["train/loss", "train/loss"]) == \
        store.find().nonce(a.nonce).columns(keys=["train/loss"])
    assert store.find().nonce("abcdef").columns(keys=["train/loss"]) == {"train/loss": []}
    got = store.find().nonce(a.nonce).columns(keys=["train/loss"])
    got["train/loss"].append(0.0)  # the caller's own lists
    assert len(store.find().nonce(a.nonce).columns(keys=["train/loss"])["train/loss"]) == 5
    with pytest.raises(UnknownKey, match=r"train/los.*did you mean 'train/loss'"):
        store.find().columns(keys=["train/los"])
    with pytest.raises(ValueError, match="reserved"):
        store.find().columns(keys=["_job"])


def test_cursor_is_immutable(root):
    store = Store(root)
    a, _ = write_run(store)
    base = store.find().nonce(a.nonce)
    narrowed = base.where("train/loss", "<", 8)
    base.sort("train/loss").limit(1)
    assert len(base.all()) == 6 and len(narrowed.all()) == 2


def test_bad_queries(root):
    store = Store(root)
    write_run(store)
    with pytest.raises(UnknownKey, match=r"train/los.*did you mean 'train/loss'"):
        store.find().where("train/los", "<", 1).all()
    with pytest.raises(UnknownKey, match="train/losss"):
        store.find().sort("train/losss").all()
    with pytest.raises(UnknownKey, match="val/loss"):
        store.find().select(keys=["val/loss"])
    with pytest.raises(ValueError, match="unknown operator"):
        store.find().where("train/loss", "=~", 1)
    with pytest.raises(ValueError, match="holds float values"):
        store.find().where("train/loss", "<", "abc").all()
    with pytest.raises(ValueError, match="malformed node id"):
        store.find().node("not-an-id!")
    with pytest.raises(EmptyResult, match="no nodes"):
        store.find().nonce("abcdef").first()
    with pytest.raises(EmptyResult):
        store.find().nonce("abcdef").last()


def test_bad_writes_write_nothing(root):
    store = Store(root)
    n = Node.start("bad")
    with store.writer() as w:
        w.write(n, {"x": 1.0})
    import numpy as np

    with store.writer() as w:
        with pytest.raises(ValueError, match=r"not a scalar.*objects"):
            w.write(n, {"ok": 1.0, "arr": np.zeros(3)})
        with pytest.raises(ValueError, match="holds float values"):
            w.write(n, {"x": "a string"})
        with pytest.raises(ValueError, match="invalid key"):
            w.write(n, {"_job": "sneaky"})
        with pytest.raises(ValueError, match="invalid key"):
            w.write(n, {"": 1})
        for path in ["/abs/path", "objects//x", "objects/./x", "objects\\x", "gs://b/x", "../x"]:
            with pytest.raises(ValueError, match="relative"):  # what resume and audit would refuse to follow
                w.checkpoint(n, path)
    with pytest.raises(ValueError):
        Node.start("a/b")
    assert store.find().nonce(n.nonce).select() == [{"x": 1.0}]
    assert "ok" not in store.keys() and "_job" not in store.keys()


def test_numpy_scalars_and_nan(root):
    import math

    import numpy as np

    store = Store(root)
    n = Node.start("np")
    with store.writer() as w:
        w.write(n, {"a": np.float32(1.5), "b": np.int64(3), "c": np.bool_(True), "d": float("nan")})
    row = store.find().nonce(n.nonce).select()[0]
    assert row["a"] == 1.5 and row["b"] == 3 and row["c"] is True and math.isnan(row["d"])


def test_compaction_same_answer(root):
    store = Store(root)
    n = Node.start("many")
    first = n
    for i in range(6):
        with store.writer() as w:  # one segment per writer
            w.write(n, {"train/loss": float(i), "train/tokens": i})
            n = n.next()
    with store.writer() as w:
        w.write(first, {"train/loss": 42.0})
    before = store.find().nonce(first.nonce).select(keys=["train/loss", "train/tokens"])
    before_nodes = store.find().nonce(first.nonce).all()
    assert len(segment_files(store)) == 7
    merged = store.compact()
    assert list(merged.values()) == [7]
    assert len(segment_files(store)) == 1
    assert store.find().nonce(first.nonce).select(keys=["train/loss", "train/tokens"]) == before
    assert store.find().nonce(first.nonce).all() == before_nodes
    assert before[0]["train/loss"] == 42.0
    assert store.find().nonce(first.nonce).columns(keys=["train/loss", "train/tokens"]) == {  # from the view
        "train/loss": [42.0, 1.0, 2.0, 3.0, 4.0, 5.0], "train/tokens": [0, 1, 2, 3, 4, 5]}


def test_truncated_segment_is_named(tmp_path):
    store = Store(tmp_path)
    n = Node.start("trunc")
    with store.writer() as w:
        w.write(n, {"x": 1.0})
    (seg,) = segment_files(store)
    data = open(seg, "rb").read()
    open(seg, "wb").write(data[: len(data) // 2])
    with pytest.raises(CorruptSegment, match=seg.split("/")[-1]):
        Store(tmp_path).find().all()


def test_corrupted_segment_body_is_named(tmp_path):
    store = Store(tmp_path)
    n = Node.start("corrupt")
    with store.writer() as w:
        w.write(n, {f"k{i}": float(i) for i in range(50)})
    (seg,) = segment_files(store)
    data = bytearray(open(seg, "rb").read())
    for i in range(8, 200):
        data[i] ^= 0xFF
    open(seg, "wb").write(bytes(data))
    with pytest.raises(CorruptSegment, match=seg.split("/")[-1]):
        Store(tmp_path).find().select()


def test_raw_polars_and_pandas_read_the_log(tmp_path):
    import pandas as pd

    store = Store(tmp_path)
    a, _ = write_run(store, "a.b.one")
    n = Node.start("tok")
    with store.writer() as w:
        w.write(n, {"data/samples": 7, "flag": True, "note": "x"})
    frame = pl.scan_parquet(f"{tmp_path}/log/**/*.parquet", hive_partitioning=True).collect()
    assert set(frame["key"].unique()) >= {"train/loss", "data/samples", "flag", "note"}
    loss = frame.filter(pl.col("key") == "train/loss").sort("seq")["float"].to_list()
    assert loss == [10.0, 9.0, 8.0, 7.0, 6.0]
    df = pd.read_parquet(f"{tmp_path}/log")
    assert len(df) == frame.height and {"name", "nonce", "node", "key"} <= set(df.columns)


def test_flush_interval_publishes_without_close(tmp_path):
    import time

    store = Store(tmp_path)
    n = Node.start("bg")
    w = store.writer(flush_interval=0.1)
    w.write(n, {"x": 1.0})
    deadline = time.time() + 5
    while not segment_files(store) and time.time() < deadline:
        time.sleep(0.05)
    assert store.find().nonce(n.nonce).select() == [{"x": 1.0}]
    w.close()


def test_commit_records_are_durable_immediately(tmp_path):
    store = Store(tmp_path)
    n = Node.start("commit")
    w = store.writer(flush_interval=3600)
    w.write(n, {"x": 1.0})
    w.checkpoint(n, f"objects/{n.id}")
    assert store.find().checkpoint().all() == [n]
    assert store.find().nonce(n.nonce).select() == [{"x": 1.0}]
    w.close()


def test_no_temporary_or_absolute_paths(tmp_path):
    store = Store(tmp_path)
    write_run(store)
    import os

    for dirpath, _, files in os.walk(tmp_path):
        for f in files:
            assert not f.endswith(".tmp")
            assert str(tmp_path).encode() not in open(os.path.join(dirpath, f), "rb").read()


def test_int_out_of_range_is_refused_on_every_write(tmp_path):
    store = Store(tmp_path)
    n = Node.start("big")
    with store.writer() as w:
        w.write(n, {"i": 1})
        with pytest.raises(ValueError, match="int64"):
            w.write(n.next(), {"i": 2**70})
    assert store.find().nonce(n.nonce).select() == [{"i": 1}]


def test_frame_of_keys_is_select_with_node_identity(tmp_path):
    """frame(keys=[...]) is the columnar select(): the same rows, with node, name, nonce, seq, parent."""
    store = Store(tmp_path)
    first, _ = write_run(store, steps=4)
    node = first
    with store.writer() as w:
        for _ in range(6):
            node = node.next()
        w.write(node, {"other": 1.0})  # holds none of the selected keys: skipped by both
    cursor = store.find().nonce(first.nonce)
    frame = cursor.frame(keys=["train/loss"]).collect()
    assert frame.columns == ["node", "name", "nonce", "seq", "parent", "train/loss"]
    assert frame.select("train/loss").to_dicts() == cursor.select(keys=["train/loss"])
    assert frame["node"].to_list() == [n.id for n in cursor.has("train/loss").all()]
    assert frame["parent"].to_list() == [n.parent for n in cursor.has("train/loss").all()]
    assert cursor.where("train/loss", "<", 8).frame(keys="train/tokens").collect()["train/tokens"].to_list() == [3000]
    with pytest.raises(UnknownKey, match="train/los"):
        cursor.frame(keys=["train/los"])


def test_plain_select_of_every_type_with_gaps_equals_the_plan(tmp_path):
    """select(keys) read straight from the folds (numbers through numpy, gaps and strings through
    Arrow) gives the values and types the Polars plan gives, for bool, int, float and str keys."""
    store = Store(tmp_path)
    node = Node.start("types")
    rows = [{"b": True, "i": 2**40, "f": 0.5, "s": "x"}, {"i": 3, "s": ""}, {"b": False, "f": -1.0}, {"s": "é"}]
    with store.writer() as w:
        for row in rows:
            w.write(node, row)
            node = node.next()
    cursor = store.find().nonce(node.nonce)
    for keys in (["b"], ["i"], ["f"], ["s"], ["i", "f"], ["b", "s", "i", "f"]):
        got = cursor.select(keys=keys)
        assert got == cursor.frame(keys=keys).collect().select(keys).to_dicts()
        assert got == [{k: row.get(k) for k in keys} for row in rows if any(k in row for k in keys)]
        assert cursor.columns(keys=keys) == {k: [r[k] for r in got] for k in keys}
        assert (cursor.has(keys[0]).columns(keys=keys)
                == {k: [r[k] for r in got if r[keys[0]] is not None] for k in keys})
        assert [type(v) for r in got for v in r.values() if v is not None] == \
               [type(row[k]) for row in rows for k in keys if k in row]
