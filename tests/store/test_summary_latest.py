"""Run summaries from the latest records segment footers keep (``theseus.store.latest``): they equal
the fold of the raw log on roots written with them, without them (older writers) and mixed,
during a compaction, and a forged entry is refused."""

from __future__ import annotations

import gc
import os
import shutil

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.store._segments import rewrite_footer, segment_files
from tests.store.test_run_summary import equal, messy_root, reference_runs
from theseus.store import CorruptSegment, Node, Store, summary
from theseus.store.footers import check_segment, read_footer


def without_latest(keys, index):
    """A footer as writers wrote it before the latest records were kept."""
    index.pop("latest", None)
    return keys, index


def refuse_scans(monkeypatch) -> None:
    """Make reading summary keys' blocks an error: every latest value must come from footers."""
    def scan(paths):
        raise AssertionError(f"read the blocks of {len(paths)} segments")
    monkeypatch.setattr(summary, "_latest_records", scan)


def test_a_root_written_now_is_summarised_from_footers_alone(tmp_path, monkeypatch):
    store = Store(tmp_path)
    messy_root(store)
    for path in segment_files(store):
        assert read_footer(store.fs, path).latest  # every segment the writer published records them
        check_segment(store.fs, path)  # and they are its rows' (what `theseus audit` checks)
    want = reference_runs(store)
    refuse_scans(monkeypatch)
    assert equal(Store(tmp_path).runs(), want)


@pytest.mark.parametrize("which", ["all", "every other"])
def test_segments_without_latest_records_are_read(tmp_path, which):
    """A root written before footers kept latest records, whole or mixed with newer segments."""
    store = Store(tmp_path)
    messy_root(store)
    want = reference_runs(store)
    paths = segment_files(store)
    for path in paths if which == "all" else paths[::2]:
        rewrite_footer(path, without_latest)
        assert read_footer(store.fs, path).latest is None
    assert equal(Store(tmp_path).runs(), want)
    assert reference_runs(Store(tmp_path)).equals(want)  # the rewrite kept every record


def test_runs_during_a_compaction_see_merged_and_old_segments(tmp_path):
    """A compaction publishes the merged segment before it retires the old ones:
    a reader in between sees every record twice and must answer the same."""
    store = Store(tmp_path)
    a, _, _ = messy_root(store)
    want = reference_runs(store)
    folder = os.path.dirname(segment_files(store, a.name, a.nonce)[0])
    shutil.copytree(folder, tmp_path / "before")
    store.compact()
    for name in os.listdir(tmp_path / "before"):  # the old segments are back: both are visible
        shutil.copy(tmp_path / "before" / name, folder)
    assert len(segment_files(store, a.name, a.nonce)) > 1
    assert equal(Store(tmp_path).runs(), want)


def test_a_merged_segment_keeps_latest_records_so_an_active_run_is_summarised_from_footers(tmp_path, monkeypatch):
    """After a compaction merged a run's segments, the run writes on: its summary (no longer the
    view's) comes from the merged segment's footer and the new one's, with no block read."""
    store = Store(tmp_path)
    a, _, _ = messy_root(store)
    store.compact()
    merged = segment_files(store, a.name, a.nonce)
    assert len(merged) == 1 and read_footer(store.fs, merged[0]).latest
    check_segment(store.fs, merged[0])  # the entries are its rows' (what `theseus audit` checks)
    with store.writer() as w:
        w.write(Node(a.name, a.nonce, 10), {"val/loss": 0.25})
    want = reference_runs(store)
    refuse_scans(monkeypatch)
    assert equal(Store(tmp_path).runs(), want)


def test_a_long_string_is_read_from_its_block(tmp_path):
    """Strings longer than the footer keeps (a long status) are read from the rows."""
    store = Store(tmp_path)
    node = Node.start("proj.latest.long")
    status = "waiting for " + "x" * 1000
    with store.writer() as w:
        w.write(node, {"train/loss": 1.0})
        w.status(node.next(), status)
    with store.writer() as w:
        w.write(node.next().next(), {"train/loss": float("nan"), "train/tokens": 2**62 + 1})
    runs = Store(tmp_path).runs()
    assert runs["_status"].to_list() == [status]
    assert runs["train/tokens"].to_list() == [2**62 + 1]
    assert equal(runs, reference_runs(store))


def forged(value):
    def edit(keys, index):
        index["latest"]["loss"][4] = value
        return keys, index
    return edit


def test_a_forged_latest_record_is_refused(tmp_path):
    store = Store(tmp_path)
    node = Node.start("proj.latest.forged")
    with store.writer() as w:
        for i in range(3):
            w.write(node, {"loss": 10.0 + i})
            node = node.next()
    [path] = segment_files(store)
    rewrite_footer(path, forged("not a float"))  # the wrong type: every reader refuses the footer
    with pytest.raises(CorruptSegment, match=os.path.basename(path)):
        Store(tmp_path).runs()
    rewrite_footer(path, forged(99.0))  # a plausible value the rows do not hold: the audit finds it
    with pytest.raises(CorruptSegment, match="latest record of key 'loss'"):
        check_segment(store.fs, path)


def test_runs_leaves_the_garbage_collector_as_it_found_it(tmp_path):
    """The collector is paused while footers are parsed, and only restarted if it was running."""
    store = Store(tmp_path)
    messy_root(store)
    try:
        gc.disable()
        Store(tmp_path).runs()
        assert not gc.isenabled()
    finally:
        gc.enable()
    Store(tmp_path).runs()
    assert gc.isenabled()


values = st.one_of(st.floats(width=64), st.integers(-(2**62), 2**62))  # NaN and infinities too
plan = st.lists(  # batches of (seq, key, value, status or None), each batch one writer (one segment)
    st.lists(st.tuples(st.integers(0, 3), st.sampled_from(["train/loss", "val/loss", "train/tokens"]), values,
                       st.sampled_from([None, "running", "x" * 300])), min_size=1, max_size=5),
    min_size=1, max_size=4)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=plan, stripped=st.lists(st.booleans(), min_size=4, max_size=4))
def test_summaries_equal_the_fold_whichever_footers_keep_latest_records(tmp_path_factory, batches, stripped):
    """Seqs rewritten by later writers, int and float values of one key, NaN, statuses (one longer
    than a footer keeps), with the latest records stripped from any subset of the segments."""
    store = Store(tmp_path_factory.mktemp("latest"))
    start = Node.start("proj.latest.prop")
    for batch in batches:
        with store.writer() as w:
            for seq, key, value, status in batch:
                node = Node(start.name, start.nonce, seq)
                w.write(node, {key: value})
                if status is not None:
                    w.status(node, status)
    for path, strip in zip(segment_files(store), stripped):
        if strip:
            rewrite_footer(path, without_latest)
    assert equal(Store(store.root).runs(), reference_runs(store))
