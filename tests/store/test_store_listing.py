"""Listings reused by folder ctime (listing.Listings): a new segment is never hidden."""

from __future__ import annotations

import os
import shutil
import time

from theseus.store import Node, Store, listing, view_build
from theseus.store.index import Index
from theseus.store.listing import Listings
from theseus.store.mounts import ctime_proves_listings
from theseus.store.view_file import list_views, read_view


def _write(store: Store, node: Node, value: float) -> None:
    with store.writer() as w:
        w.write(node, {"loss": value})


def _losses(store: Store, nonce: str = "*") -> list[float]:
    cursor = store.find() if nonce == "*" else store.find().nonce(nonce)
    return [r["loss"] for r in cursor.select(keys=["loss"])]


def test_local_disk_and_tmpfs_prove_listings_proc_does_not(tmp_path):
    assert ctime_proves_listings(str(tmp_path))
    assert ctime_proves_listings("/proc") is False
    assert ctime_proves_listings(str(tmp_path / "missing")) is None
    assert not Listings("/proc").enabled


def test_segment_added_within_the_second_is_seen_by_a_warm_store(tmp_path):
    store = Store(tmp_path)
    n = Node.start("fresh")
    _write(store, n, 1.0)
    assert _losses(store) == [1.0]
    _write(store, n.next(), 2.0)  # same folders, changed well within LISTING_MARGIN_NS
    assert _losses(store) == [1.0, 2.0]
    assert _losses(store, n.nonce) == [1.0, 2.0]


def test_cached_listing_sees_new_segments_runs_and_names(tmp_path, monkeypatch):
    store = Store(tmp_path)
    n = Node.start("old")
    _write(store, n, 1.0)
    time.sleep(1.1)  # folders now older than the margin: their listings are kept
    assert _losses(store) == [1.0]
    listed = []
    with monkeypatch.context() as patched:
        patched.setattr(listing, "_scandir", lambda path: listed.append(path) or os.listdir(path))
        assert _losses(store) == [1.0]
    assert listed == []  # the listing is cached...
    _write(store, n.next(), 2.0)  # ...and a new segment in a cached run folder is still seen
    assert _losses(store) == [1.0, 2.0]
    time.sleep(1.1)
    assert _losses(store) == [1.0, 2.0]
    m = Node("general.default.old", "abcdef", 0)  # a new nonce folder under a cached name folder
    _write(store, m, 3.0)
    assert sorted(_losses(store)) == [1.0, 2.0, 3.0]
    _write(store, Node.start("other"), 4.0)  # a new name folder under a cached log folder
    assert sorted(_losses(store)) == [1.0, 2.0, 3.0, 4.0]


def test_merged_segment_with_restored_times_is_seen(tmp_path):
    """rsync -a restores folder mtimes over new entries; the ctime still moves."""
    a, b = Store(tmp_path / "a"), Store(tmp_path / "b")
    n = Node.start("merge")
    _write(a, n, 1.0)
    shutil.copytree(tmp_path / "a", tmp_path / "b", dirs_exist_ok=True)
    _write(a, n.next(), 2.0)
    time.sleep(1.1)
    assert _losses(b) == [1.0]  # b's listing is cached now
    run = f"log/name={n.name}/nonce={n.nonce}"
    (new,) = set(os.listdir(tmp_path / "a" / run)) - set(os.listdir(tmp_path / "b" / run))
    folder = tmp_path / "b" / run
    before = os.stat(folder)
    shutil.copy2(tmp_path / "a" / run / new, folder / new)
    os.utime(folder, ns=(before.st_atime_ns, before.st_mtime_ns))  # as rsync -a would
    assert os.stat(folder).st_mtime_ns == before.st_mtime_ns
    assert _losses(b) == [1.0, 2.0]


def test_view_record_spares_listing_and_a_copied_root_lists_again(tmp_path, monkeypatch):
    store = Store(tmp_path / "a")
    nodes = [Node.start(f"run{i}") for i in range(3)]
    for i, n in enumerate(nodes):
        _write(store, n, float(i))
        _write(store, n.next(), float(i) + 0.5)
    store.compact()
    time.sleep(1.1)
    store.compact()  # covers the log already: no new view
    os.remove(list_views(store)[-1])
    store.compact()  # a new view, built with every folder older than the margin
    view = read_view(store, list_views(store)[-1])
    assert view.listing["log"] is not None and all(c is not None for c in view.listing["runs"])
    cold = Store(tmp_path / "a")
    listed = []
    monkeypatch.setattr(listing, "_scandir", lambda path: listed.append(path) or os.listdir(path))
    assert sorted(_losses(cold)) == [0.0, 0.5, 1.0, 1.5, 2.0, 2.5]
    assert listed == []  # answered from the view's record: no folder listed
    _write(cold, nodes[0].next().next(), 9.0)  # a new segment: its folder's ctime moved
    assert sorted(_losses(Store(tmp_path / "a"))) == [0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 9.0]
    shutil.copytree(tmp_path / "a", tmp_path / "b")  # new ctimes: the record proves nothing
    copy = Store(tmp_path / "b")
    _write(copy, nodes[1].next().next(), 7.0)
    assert sorted(_losses(copy)) == [0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 7.0, 9.0]
    assert sorted(_losses(Store(tmp_path / "b"))) == [0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 7.0, 9.0]


def test_recorded_runs_are_the_listing_until_a_folder_changes(tmp_path):
    """A view's record answers for the listing (Index.recorded_runs) exactly while the stat'ed
    folders are unchanged, and only for the runs a glob reaches: a new segment, a new run under
    a known name and a new name each turn it off where they land, and queries see each change."""
    root = tmp_path / "a"
    store = Store(root)
    runs = [Node.start("g.a.x"), Node.start("g.a.x"), Node.start("g.b.y"), Node.start("h.c.z")]
    for i, n in enumerate(runs):
        _write(store, n, float(i))
    time.sleep(1.1)  # every folder older than the margin when the view records it
    store.compact()
    globs = [("*", "*"), ("g.*", "*"), ("h.*", "*"), ("g.a.x", "*"), ("*", runs[2].nonce[:4] + "*"), ("none.*", "*")]

    def index(root=root) -> Index:
        store = Store(root)
        return Index(store.fs, store.path())

    def recorded(name: str, nonce: str):
        cold = index()
        return cold.recorded_runs(cold.view(), name, nonce)

    for name, nonce in globs:
        assert recorded(name, nonce) == index().runs(name, nonce), (name, nonce)
    assert len(recorded("*", "*")) == 4 and recorded("none.*", "*") == {}

    _write(store, runs[2].next(), 9.0)  # a new segment in g.b.y
    assert recorded("*", "*") is None and recorded("g.*", "*") is None
    assert recorded("h.*", "*") == index().runs("h.*") and recorded("g.a.x", "*") == index().runs("g.a.x")
    assert sorted(_losses(Store(root))) == [0.0, 1.0, 2.0, 3.0, 9.0]

    _write(store, Node.start("g.a.x"), 5.0)  # a new run under a known name
    assert recorded("g.a.x", "*") is None and recorded("h.*", "*") == index().runs("h.*")
    assert sorted(_losses(Store(root))) == [0.0, 1.0, 2.0, 3.0, 5.0, 9.0]

    _write(store, Node.start("h.d.w"), 6.0)  # a new name: the log folder changed
    assert all(recorded(name, nonce) is None for name, nonce in globs)
    assert sorted(_losses(Store(root))) == [0.0, 1.0, 2.0, 3.0, 5.0, 6.0, 9.0]

    shutil.copytree(root, tmp_path / "b")  # a copy has new ctimes: the record proves nothing
    copy = index(tmp_path / "b")
    assert copy.recorded_runs(copy.view(), "h.*", "*") is None
    assert sorted(_losses(Store(tmp_path / "b"))) == [0.0, 1.0, 2.0, 3.0, 5.0, 6.0, 9.0]


def test_an_incremental_compaction_lists_each_folder_at_most_once_and_its_record_spares_listing(
        tmp_path, monkeypatch):
    """The record of a view holding only what changed proves the listing with the older views'
    records (a cold query lists nothing), and writing it lists no folder the compaction listed."""
    monkeypatch.setattr(view_build, "SMALL_VIEW_ROWS", 0)  # a new view file, not a merge
    store = Store(tmp_path)
    for i in range(3):
        with store.writer() as w:  # runs much larger than the new one: it gets a view file of its own
            node = Node.start(f"p.inc.base{i}")
            for step in range(30):
                w.write(node, {"loss": float(i) if step == 0 else 100.0 + step})
                node = node.next()
    time.sleep(1.1)  # every folder older than the margin when the view records it
    store.compact()
    _write(store, Node.start("p.inc.late"), 7.0)
    time.sleep(1.1)
    listed = []
    monkeypatch.setattr(listing, "_scandir", lambda path: listed.append(path) or os.listdir(path))
    Store(tmp_path).compact()
    assert len(list_views(store)) == 2
    assert listed and len(listed) == len(set(listed)), listed
    assert not any("inc.base" in path for path in listed)  # their folders: proven by the first view's record
    listed.clear()
    assert sorted(_losses(Store(tmp_path)))[:4] == [0.0, 1.0, 2.0, 7.0]
    assert listed == []
