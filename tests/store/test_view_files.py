"""Incremental compaction: view files that hold what changed, merged as they grow, read as one."""

import os
import shutil
import threading

import pytest

from theseus.store import Node, Store, view_build
from theseus.store.view_file import list_views


@pytest.fixture
def small_merges(monkeypatch):
    """Views merged only by size ratio and file count, as on a large root (no small-file shortcut)."""
    monkeypatch.setattr(view_build, "SMALL_VIEW_ROWS", 0)


def write_run(store, name, steps, loss0=10.0, node=None):
    node = node or Node.start(name)
    with store.writer() as w:
        for i in range(steps):
            w.write(node, {"loss": loss0 - i, "tokens": 100 * (node.seq + 1)})
            node = node.next()
        w.finished(node)
    return node


def answers(store):
    find = store.find()
    runs = store.runs().drop("_written").sort("nonce").to_dicts()
    return (runs, find.select(keys=["loss", "tokens"]), find.sort("loss").limit(5).select(keys=["loss"]),
            find.finished().has("tokens").select(keys=["tokens"]), find.latest().all(),
            find.newest().all())


def grow(store, rounds=6):
    """Rounds of new runs and new steps of an old run, each followed by a compaction."""
    first = Node.start("proj.inc.base")
    end = write_run(store, None, 50, node=first)
    for i in range(3):
        write_run(store, f"proj.inc.base{i}", 40)
    store.compact()
    for r in range(rounds):
        write_run(store, f"proj.inc.new{r}", 3 + r, loss0=5.0 - r)
        if r % 2:
            end = write_run(store, None, 2, loss0=-r, node=end)
        store.compact()
    return first


def test_compaction_after_a_new_run_writes_only_that_run(tmp_path, small_merges):
    store = Store(tmp_path)
    for i in range(4):
        write_run(store, f"proj.inc.a{i}", 30)
    store.compact()
    [base] = list_views(store)
    write_run(store, "proj.inc.late", 5)
    store.compact()
    views = Store(tmp_path)._index.view()
    assert views.paths[0] == base and len(views.paths) == 2
    assert [name for name, _ in views.files[1].runs] == ["proj.inc.late"]


def test_incremental_views_answer_as_a_full_rebuild(tmp_path, small_merges):
    store = Store(tmp_path / "a")
    grow(store, rounds=5)  # the last round adds a run only: it stays in a file of its own
    assert 1 < len(list_views(store)) <= view_build.MAX_VIEW_FILES
    incremental = answers(Store(tmp_path / "a"))
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    shutil.rmtree(tmp_path / "b" / "view")  # deleting every view loses nothing
    assert answers(Store(tmp_path / "b")) == incremental
    Store(tmp_path / "b").compact()  # a full rebuild: one file
    assert len(list_views(Store(tmp_path / "b"))) == 1
    assert answers(Store(tmp_path / "b")) == incremental
    # the composite of files holds, run for run, the rows of a full rebuild
    inc, full = Store(tmp_path / "a")._index.view(), Store(tmp_path / "b")._index.view()
    assert list(inc.runs) == list(full.runs)
    keys = {"loss": "float", "tokens": "int"}
    for run in full.runs:
        rows = [v.scan(s._index, [v.runs[run]], keys, True, True)[0].collect()
                for v, s in ((inc, Store(tmp_path / "a")), (full, Store(tmp_path / "b")))]
        assert rows[0].equals(rows[1]), run
        assert inc.summary(inc.runs[run]) == full.summary(full.runs[run])


def test_files_stay_few_and_superseded_ones_are_retired(tmp_path, small_merges):
    store = Store(tmp_path)
    grow(store, rounds=20)
    files = list_views(store)
    assert len(files) <= view_build.MAX_VIEW_FILES
    views = Store(tmp_path)._index.view()
    held = [set(v.runs) for v in views.files]
    assert all(held), "a file whose runs are all superseded is retired"
    assert sorted(os.listdir(tmp_path / "view")) == sorted(os.path.basename(f) for f in files)


def test_readers_see_one_answer_while_compactions_add_and_merge_views(tmp_path, small_merges):
    store = Store(tmp_path)
    nodes = [Node.start(f"proj.inc.r{i}") for i in range(4)]
    for node in nodes:
        write_run(store, None, 20, node=node)
    store.compact()
    expected = answers(store)[1:3]
    stop, errors = threading.Event(), []

    def compactor():
        try:
            while not stop.is_set():
                other = Store(tmp_path)
                write_run(other, f"proj.zzz.x{os.getpid()}", 1, loss0=100.0)  # outside the readers' answer
                other.compact()
        except Exception as e:  # noqa: BLE001 - reported by the assertion below
            errors.append(e)

    thread = threading.Thread(target=compactor)
    thread.start()
    try:
        for _ in range(15):
            reader = Store(tmp_path)
            got = (reader.find().spec(project="proj", group="inc").select(keys=["loss", "tokens"]),
                   reader.find().spec(project="proj", group="inc").sort("loss").limit(5).select(keys=["loss"]))
            assert got == expected
    finally:
        stop.set()
        thread.join()
    assert not errors, errors
