"""The folded view written by compaction: same answers as the log, newer segments on top, rebuildable."""

import contextlib
import json
import os

import polars as pl
import pyarrow.parquet as pq
from loguru import logger

from tests.store._segments import segment_files
from theseus.store import Node, Store
from theseus.store.scope import MAX_LOG_FOLD_SEGMENTS
from theseus.store.view_file import VIEW_METADATA, list_views


@contextlib.contextmanager
def logged_warnings():
    found = []
    sink = logger.add(lambda message: found.append(str(message)), level="WARNING")
    try:
        yield found
    finally:
        logger.remove(sink)


def write_steps(store, node, steps, loss0=10.0, **extra):
    with store.writer() as w:
        for i in range(steps):
            w.write(node, {"loss": loss0 - i, "tokens": 100 * (node.seq + 1), **extra})
            node = node.next()
    return node


def answers(store, nonce):
    c = store.find().nonce(nonce)
    return (
        c.select(keys=["loss", "tokens"]),
        c.all(),
        c.where("tokens", ">=", 300).sort("loss", ascending=False).limit(2).select(keys=["loss"]),
        store.find().sort("loss").limit(3).select(keys=["loss", "tokens"]),
        store.find().latest().all(),
        store.find().newest().all(),
        store.find().nonce(nonce).frame().collect().to_dicts(),
    )


def test_view_answers_equal_the_log(root):
    store = Store(root)
    a, b = Node.start("proj.view.a"), Node.start("proj.view.b")
    end = write_steps(store, a, 4)
    write_steps(store, end, 3, loss0=5.0)
    write_steps(store, b, 5, loss0=7.5)
    with store.writer() as w:
        w.job(a, "gpt/train/pretrain", "x: 1\n")
        w.finished(end)
    before = answers(store, a.nonce)
    done = {n.nonce for n in store.find().finished().all()}
    merged = store.compact()
    assert merged == {f"{a.name}/{a.nonce}": 4}  # b has one segment: only the view covers it
    assert len(list_views(store)) == 1
    fresh = Store(root)
    assert answers(fresh, a.nonce) == before
    assert {n.nonce for n in fresh.find().finished().all()} == done == {a.nonce}
    assert {n.nonce for n in fresh.find().job("gpt/train/pretrain").all()} == {a.nonce}
    assert fresh.record(a)["_job"] == "gpt/train/pretrain"


def test_newer_segments_fold_on_top_of_the_view(tmp_path):
    store = Store(tmp_path)
    a = Node.start("proj.view.top")
    end = write_steps(store, a, 3)
    store.compact()
    with store.writer() as w:
        w.write(a, {"loss": 99.0, "note": "late"})  # overrides seq 0 of the view
        w.write(end, {"loss": 0.5})  # a new node
    rows = Store(tmp_path).find().nonce(a.nonce).select(keys=["loss", "tokens", "note"])
    assert rows == [
        {"loss": 99.0, "tokens": 100, "note": "late"},
        {"loss": 9.0, "tokens": 200, "note": None},
        {"loss": 8.0, "tokens": 300, "note": None},
        {"loss": 0.5, "tokens": None, "note": None},
    ]
    assert Store(tmp_path).find().sort("loss").first() == end


def test_an_older_record_published_after_the_view_does_not_win(tmp_path):
    """A writer that buffered an old record and flushes after compaction loses to the newer value."""
    store = Store(tmp_path)
    a = Node.start("proj.view.late")
    slow = store.writer(flush_interval=3600)
    slow.write(a, {"loss": 1.0})  # stamped now, published later
    with store.writer() as w:
        w.write(a, {"loss": 2.0})
    store.compact()
    slow.close()
    assert len(segment_files(store)) == 2
    assert Store(tmp_path).find().nonce(a.nonce).select(keys=["loss"]) == [{"loss": 2.0}]


def test_views_are_rebuildable_and_retired(tmp_path):
    store = Store(tmp_path)
    a = Node.start("proj.view.rebuild")
    end = write_steps(store, a, 3)
    store.compact()
    (first,) = list_views(store)
    write_steps(store, end, 2, loss0=1.0)
    store.compact()
    (second,) = list_views(store)  # the first one is retired once the second is published
    assert second > first and not os.path.exists(first)
    expected = answers(store, a.nonce)
    os.remove(second)  # a view is derived: without it every answer comes from the log
    assert answers(Store(tmp_path), a.nonce) == expected
    store.compact()  # nothing to merge, but the missing view is rebuilt
    assert len(list_views(store)) == 1 and answers(Store(tmp_path), a.nonce) == expected


def test_log_stays_self_describing_with_a_view(tmp_path):
    store = Store(tmp_path)
    write_steps(store, Node.start("proj.view.raw"), 3)
    store.compact()
    frame = pl.scan_parquet(f"{tmp_path}/log/**/*.parquet", hive_partitioning=True).collect()
    assert sorted(frame.filter(pl.col("key") == "loss")["float"].to_list()) == [8.0, 9.0, 10.0]


def test_a_key_typed_differently_across_runs(tmp_path):
    """The view stores the widest type; a scope of the narrow run reads exact values from the log."""
    store = Store(tmp_path)
    a, b = Node.start("proj.view.ints"), Node.start("proj.view.floats")
    big = 2**62 + 1  # not exact as a float
    with store.writer() as w:
        w.write(a, {"x": big})
    with store.writer() as w:
        w.write(b, {"x": 0.5})
    store.compact()
    fresh = Store(tmp_path)
    assert fresh.find().nonce(a.nonce).select(keys=["x"]) == [{"x": big}]
    assert sorted(r["x"] for r in fresh.find().select(keys=["x"])) == [0.5, float(big)]


def test_corrupt_view_is_named(tmp_path):
    store = Store(tmp_path)
    a = Node.start("proj.view.bad")
    write_steps(store, a, 2)
    store.compact()
    (view,) = list_views(store)
    data = open(view, "rb").read()
    open(view, "wb").write(data[: len(data) // 2])
    with logged_warnings() as warnings:  # a whole-root query reads the view: it is ignored, the log answers
        assert [n.seq for n in Store(tmp_path).find().all()] == [0, 1]
    assert any(os.path.basename(view) in w and "theseus compact" in w for w in warnings)
    assert [n.seq for n in Store(tmp_path).find().nonce(a.nonce).all()] == [0, 1]


def test_a_view_with_a_malformed_folder_record_is_named(tmp_path):
    """The view's record of the log folders (which can answer for the listing) is checked when
    the view is read: a malformed one is an error naming the view, not a KeyError mid-query."""
    store = Store(tmp_path)
    for i in range(3):
        write_steps(store, Node.start(f"proj.view.rec{i}"), 2)
    store.compact()
    (view,) = list_views(store)
    table = pq.read_table(view)
    raw = json.loads(table.schema.metadata[VIEW_METADATA])
    assert len(raw["listing"]["runs"]) == 3
    raw["listing"]["runs"] = raw["listing"]["runs"][:2]  # one run short
    pq.write_table(table.replace_schema_metadata({**table.schema.metadata, VIEW_METADATA: json.dumps(raw).encode()}),
                   view)
    with logged_warnings() as warnings:  # ignored with a warning naming it: the log answers
        assert len(Store(tmp_path).find().select(keys=["loss"])) == 6
    assert any(os.path.basename(view) in w and "record of the log folders" in w for w in warnings)
    os.remove(view)  # views are derived: the log still answers
    assert len(Store(tmp_path).find().select(keys=["loss"])) == 6


def test_a_lineage_of_few_segments_folds_from_the_log_and_answers_as_the_view(tmp_path):
    store = Store(tmp_path)
    nodes = [Node.start(f"proj.view.few{i}") for i in range(3)]
    for n in nodes:
        write_steps(store, n, 3)
    store.compact()
    many = Node.start("proj.view.many")
    for i in range(MAX_LOG_FOLD_SEGMENTS + 1):  # more segments than MAX_LOG_FOLD_SEGMENTS: the view is read
        with store.writer() as w:
            w.write(many.next() if i else many, {"loss": float(i)})
    store.compact(nonce="zzzzzz")  # nothing merged; the view is rebuilt to cover the new run
    (view,) = list_views(store)
    with open(view, "rb") as f:
        intact = f.read()
    with open(view, "r+b") as f:  # a damaged view: warned about by the first query that reads it
        f.seek(-12, os.SEEK_END)
        f.write(b"\xff" * 4)
    with logged_warnings() as warnings:
        few = Store(store.root).find().nonce(nodes[0].nonce).select(keys=["loss"])
    assert len(few) == 3 and warnings == []  # folded from the log: the view was not read
    cold = Store(store.root)
    with logged_warnings() as warnings:
        assert cold.find().nonce(many.nonce).select(keys=["loss"]) == [
            {"loss": 0.0}, {"loss": float(MAX_LOG_FOLD_SEGMENTS)}]
    assert any("ignoring an unreadable view" in w for w in warnings)  # the view was read
    with open(view, "wb") as f:  # intact again, for the comparisons below
        f.write(intact)
    for n in nodes:
        narrow = store.find().nonce(n.nonce).select(keys=["loss"])
        wide = [r for r, m in zip(store.find().select(keys=["loss"]), store.find().has("loss").all())
                if m.nonce == n.nonce]
        assert narrow == wide and len(narrow) == 3


def test_a_segment_without_block_index_is_read_and_compacted(tmp_path):
    """Segments written by hand (or another tool) carry only the keys footer (the block index is optional):
    still read."""
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq

    from theseus.store.listing import run_dir
    from theseus.store.schema import KEYS_METADATA, SEGMENT_SCHEMA

    store = Store(tmp_path)
    a = Node("proj.view.legacy", "1e6ac7", 0)  # a lineage begun by hand: the writer continues it, named
    b = a.next()
    rows = {"node": [b.id, a.id, a.id, b.id], "seq": [1, 0, 0, 1], "parent": [a.id, None, None, a.id],
            "stamp": [5, 3, 4, 6], "writer": ["w1"] * 4, "key": ["x", "x", "x", "s"],
            "float": [2.0, 1.0, 1.5, None], "int": [None] * 4, "bool": [None] * 4, "str": [None, None, None, "hi"]}
    table = pa.table(rows, schema=SEGMENT_SCHEMA).replace_schema_metadata(
        {KEYS_METADATA: json.dumps({"x": "float", "s": "str"}).encode()})
    os.makedirs(run_dir(str(tmp_path), a.name, a.nonce))
    pq.write_table(table, f"{run_dir(str(tmp_path), a.name, a.nonce)}/s-0000000000000000006-w1-000001.parquet")
    write_steps(store, b.next(), 1, loss0=3.0)
    expected = [{"x": 1.5, "s": None}, {"x": 2.0, "s": "hi"}]
    assert store.find().nonce(a.nonce).select(keys=["x", "s"]) == expected
    assert store.find().nonce(a.nonce).all()[1] == b
    store.compact()
    assert Store(tmp_path).find().nonce(a.nonce).select(keys=["x", "s"]) == expected


def test_a_big_segment_of_many_shapes(tmp_path):
    """A flush of records of different shapes and kinds: each key's rows read back in seq order."""
    store = Store(tmp_path)
    a = Node.start("proj.view.big")
    with store.writer() as w:
        node = a
        for i in range(700):
            w.write(node, {f"k{j}": float(i * 10 + j) for j in range(8)})
            if i % 100 == 0:
                w.status(node, f"step {i}")
            node = node.next()
    assert len(segment_files(store)) == 1
    rows = Store(tmp_path).find().nonce(a.nonce).select(keys=["k3", "k7"])
    assert rows == [{"k3": i * 10 + 3.0, "k7": i * 10 + 7.0} for i in range(700)]
    assert Store(tmp_path).record(a.next())["k1"] == 11.0


def test_a_query_over_many_runs_scans_the_view(root):
    """More than a few runs: the view is scanned with pushdown (locally and on gs://)."""
    store = Store(root)
    nodes = [Node.start(f"proj.many.r{i:02d}") for i in range(10)]
    with store.writer() as w:
        for i, n in enumerate(nodes):
            for step in range(3):
                w.write(n, {"loss": 10.0 * i + step, "tokens": step})
                n = n.next()
    before = store.find().where("tokens", ">=", 1).sort("loss", ascending=False).limit(4).select(keys=["loss"])
    store.compact()
    fresh = Store(root)
    assert fresh.find().where("tokens", ">=", 1).sort("loss", ascending=False).limit(4).select(keys=["loss"]) == before
    assert before == [{"loss": 92.0}, {"loss": 91.0}, {"loss": 82.0}, {"loss": 81.0}]
    assert len(fresh.find().spec(project="proj", group="many").all()) == 30


def test_required_and_nullable_segments_read_together(root):
    """The writer stores the columns every record fills (node, seq, stamp, writer, key) as
    required in large segments; small ones, and other writers of the format, store them nullable. Segments
    of both kinds in one run read together, through theseus (log, Polars plan, compaction) and
    raw pandas and Polars."""
    import io

    import pandas as pd

    from theseus.store import fs as rootfs
    from theseus.store.schema import SEGMENT_SCHEMA

    store = Store(root)
    a = Node.start("proj.view.required")
    metrics = lambda i: {f"m{j}": float(i * 8 + j) for j in range(8)}  # noqa: E731 (one float shape: the flush's fast path)
    node = a
    with store.writer() as w:
        for i in range(600):  # 4,800 rows: a large segment
            w.write(node, metrics(i))
            node = node.next()
    end = write_steps(store, node, 3)
    (first, second) = sorted(segment_files(store))
    required = [[f.name for f in pq.read_schema(io.BytesIO(store.fs.cat_file(p))) if not f.nullable]
                for p in (first, second)]
    assert required == [["node", "seq", "stamp", "writer", "key"], []]  # a small segment keeps the plain schema
    # rewrite the first segment with every column nullable, as the schema allows
    table = pq.read_table(io.BytesIO(store.fs.cat_file(first)))
    assert not table.schema.field("seq").nullable
    nullable = table.cast(SEGMENT_SCHEMA.with_metadata(table.schema.metadata))
    sink = io.BytesIO()
    pq.write_table(nullable, sink)
    store.fs.rm(first)
    rootfs.publish(store.fs, first, sink.getvalue())
    assert pq.read_schema(io.BytesIO(store.fs.cat_file(first))).field("seq").nullable

    expected_rows = ([{**metrics(i), "loss": None} for i in range(600)]
                     + [{**{f"m{j}": None for j in range(8)}, "loss": 10.0 - i} for i in range(3)])
    keys = [*(f"m{j}" for j in range(8)), "loss"]
    fresh = Store(root)
    assert fresh.find().nonce(a.nonce).select(keys=keys) == expected_rows
    assert fresh.find().nonce(a.nonce).where("m0", ">=", 8 * 598).select(keys=["m0"]) == [
        {"m0": 8.0 * 598}, {"m0": 8.0 * 599}]
    frame = fresh.find().nonce(a.nonce).frame().collect()
    assert frame.height == 603 and frame["node"].to_list()[-1] == Node(end.name, end.nonce, end.seq - 1).id
    runs = fresh.runs()  # a plan over whole segments (gs://: fetched and concatenated)
    assert runs.height == 1 and runs["nodes"].item() == 603 and runs["last seq"].item() == 602
    before = answers(fresh, a.nonce)
    if rootfs.is_local(store.fs):  # raw readers see one schema across both kinds of segment
        raw = pd.read_parquet(os.path.join(root, "log"))
        assert len(raw) == 600 * 8 + 3 * 2 and raw["seq"].dtype == "int64"
        assert (pl.scan_parquet(f"{root}/log/**/*.parquet", hive_partitioning=True).select(pl.len()).collect().item()
                == len(raw))
    store.compact()
    assert answers(Store(root), a.nonce) == before
