"""Store.runs() from run summaries (footers, or the view's) equals the fold of the whole raw log."""

import polars as pl
import pytest

from theseus.store import Node, Store
from theseus.store.fold import WRITTEN
from theseus.store.reader import latest_value, scan
from theseus.store.status import with_status
from theseus.store.summary import SUMMARY_KEYS


def reference_runs(store: Store) -> pl.DataFrame:
    """runs() the slow way: every record of the log grouped by run, and the status rule."""
    index = store._index
    paths = index.segments()
    types = index.footers.keys(paths)
    aggs = [pl.col("node").n_unique().alias("nodes"), pl.col("seq").max().alias("last seq"),
            pl.col("stamp").max().alias(WRITTEN)]
    aggs += [latest_value(k, types[k]) for k in SUMMARY_KEYS if k in types]
    return with_status(scan(store.fs, paths).group_by("name", "nonce").agg(aggs).sort(WRITTEN).collect())


def messy_root(store: Store) -> list[Node]:
    """Runs with rewritten seqs, a key logged as int then float, sparse nodes, NaN, a failed run."""
    a, b, c = Node.start("proj.sum.a"), Node.start("proj.sum.b"), Node.start("proj.other.c")
    with store.writer() as w:
        node = a
        for i in range(6):
            w.write(node, {"train/loss": 5.0 - i, "train/tokens": 10 * i})
            node = node.next()
        w.job(a, "gpt/train/pretrain", "x: 1\n")
    with store.writer() as w:  # a second writer rewrites seqs 2..3, with float tokens
        w.write(Node(a.name, a.nonce, 2), {"train/loss": 0.5, "train/tokens": 21.5})
        w.write(Node(a.name, a.nonce, 3), {"val/loss": float("nan")})
        w.finished(Node(a.name, a.nonce, 9))  # a sparse node
    with store.writer() as w:
        w.write(b, {"train/loss": 1.0})
        w.status(b.next(), "running")
        w.failed(b.next(), "boom")
    with store.writer() as w:
        w.write(c, {"other": "x"})
    return [a, b, c]


def equal(left: pl.DataFrame, right: pl.DataFrame) -> bool:
    key = ["name", "nonce"]
    return left.sort(key).equals(right.select(left.columns).sort(key))


@pytest.mark.parametrize("compacted", [False, True], ids=["log", "view"])
def test_runs_equal_the_fold_of_the_raw_log(root, compacted):
    store = Store(root)
    messy_root(store)
    want = reference_runs(store)
    if compacted:
        store.compact()
    got = Store(root).runs()
    assert got.columns == want.columns
    assert equal(got, want), (got, want)
    assert got[WRITTEN].is_sorted()


def test_runs_mix_view_runs_newer_segments_and_new_runs(tmp_path):
    store = Store(tmp_path)
    a, b, c = messy_root(store)
    store.compact()
    with store.writer() as w:  # on top of the view: a's newer records, and a run the view lacks
        w.write(Node(a.name, a.nonce, 4), {"train/loss": -1.0, "train/tokens": 7})
        w.write(Node.start("proj.sum.new"), {"train/loss": 3.0})
    warm = Store(tmp_path)
    assert equal(warm.runs(), reference_runs(store))
    with warm.writer() as w:  # a warm Store sees the new segment too
        w.write(Node(b.name, b.nonce, 7), {"train/loss": 9.0})
    assert equal(warm.runs(), reference_runs(store))
    store.compact()
    assert equal(Store(tmp_path).runs(), reference_runs(store))


def test_runs_of_an_empty_root_and_a_root_without_metrics(tmp_path):
    store = Store(tmp_path)
    store.fs.makedirs(store.path("log"), exist_ok=True)
    assert store.runs().height == 0
    with store.writer() as w:
        w.write(Node.start("proj.sum.plain"), {"x": 1})
    runs = store.runs()
    assert runs.columns == ["name", "nonce", "nodes", "last seq", WRITTEN, "status"]
    assert runs["nodes"].to_list() == [1]
