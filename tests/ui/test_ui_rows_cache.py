"""The runs table's per-run cache (rows worked out once per version of a run): a run whose new
segments arrive is read again and its row follows; a compaction, seen whole or half-way (merged
segment and the ones it retires listed together), changes no value and doubles no node or point;
two runs sharing a nonce under different names are not read again on every poll."""

from __future__ import annotations

import os
import shutil

from theseus.store import Node, Store
from theseus.ui.api import Api
from theseus.ui.series import series
from theseus.ui.table import rows


def _write(store: Store, node: Node, seqs: range) -> Node:
    with store.writer() as w:
        for k in seqs:
            w.write(node, {"train/loss": 10.0 - k, "train/tokens": 100 * k})
            if k < seqs[-1]:
                node = node.next()
    return node


def _table(api: Api) -> dict[str, dict]:
    api.follower.poll()
    return {r["nonce"]: r for r in api.rows(extra=["train/tokens"])}


def _expected(store: Store) -> dict[str, tuple]:
    return {r["nonce"]: (r["nodes"], r["train/loss"], r["_written"]) for r in store.runs().iter_rows(named=True)}


def _segments(store: Store, nonce: str) -> list[str]:
    return sorted(store.fs.glob(store.path("log", "*", f"nonce={nonce}", "*.parquet")))


def test_a_run_whose_new_segments_arrive_is_read_again(tmp_path):
    store = Store(tmp_path / "root")
    a = _write(store, Node.start("p.g.a"), range(3))
    b = _write(store, Node.start("p.g.b"), range(2))
    api = Api(store)
    first = _table(api)
    assert (first[a.nonce]["nodes"], first[a.nonce]["train/loss"]) == (3, 8.0)
    assert _table(api) == first  # nothing new: the same rows, from the cache
    a = _write(store, a.next(), range(3, 6))  # new segments of one run
    second = _table(api)
    assert (second[a.nonce]["nodes"], second[a.nonce]["last seq"], second[a.nonce]["train/loss"]) == (6, 5, 5.0)
    assert second[a.nonce]["train/tokens"] == 500 and second[b.nonce] == first[b.nonce]
    assert second[a.nonce]["written"] > first[a.nonce]["written"]
    assert {n: (r["nodes"], r["train/loss"], r["written"]) for n, r in second.items()} == _expected(store)
    assert second == {r["nonce"]: r for r in rows(api.follower.runs.values(), ["train/tokens"])}  # uncached


def test_a_compaction_changes_no_value_whole_or_half_way(tmp_path):
    store = Store(tmp_path / "root")
    a = Node.start("p.g.a")
    for start in range(0, 12, 3):  # four flushes: four segments
        a = _write(store, a if start == 0 else a.next(), range(start, start + 3))
    api = Api(store)
    before = _table(api)
    points = series(api.follower.run(a.nonce), "train/loss")["y"]
    assert before[a.nonce]["nodes"] == len(points) == 12

    copy = tmp_path / "copy"  # compacted elsewhere, its merged segment then published beside the old ones:
    shutil.copytree(store.root, copy)  # what a reader sees between a compaction's publish and its retire
    Store(copy).compact()
    [merged] = [p for p in _segments(Store(copy), a.nonce)]
    old = _segments(store, a.nonce)
    shutil.copy(merged, os.path.join(os.path.dirname(old[0]), os.path.basename(merged)))
    version = api.follower.run(a.nonce).version
    half_way = _table(api)
    assert api.follower.run(a.nonce).version == version + 1  # the merged segment was read
    assert half_way == before
    assert series(api.follower.run(a.nonce), "train/loss")["y"] == points

    for path in old:  # the compaction retires what it merged
        os.unlink(path)
    assert _table(api) == before
    assert api.follower.run(a.nonce).segments == set(_segments(store, a.nonce))
    store.compact()  # and a real one, in place
    assert _table(api) == before and series(api.follower.run(a.nonce), "train/loss")["y"] == points
    assert {n: (r["nodes"], r["train/loss"], r["written"]) for n, r in before.items()} == _expected(store)


def test_runs_sharing_a_nonce_are_not_read_again_on_every_poll(tmp_path):
    store = Store(tmp_path / "root")
    _write(store, Node("p.g.one", "abcdef", 0), range(2))
    other = Store(tmp_path / "other")  # a writer refuses a taken nonce: the collision comes from a copied root
    _write(other, Node("p.g.two", "abcdef", 0), range(2))
    shutil.copytree(other.path("log"), store.path("log"), dirs_exist_ok=True)
    api = Api(store)
    assert [r.nonce for r in api.follower.poll()] == ["abcdef"]
    read = api.follower.segments_read
    assert api.follower.poll() == [] and api.follower.segments_read == read
