"""A segment's footer entries read from the file's end (``theseus.store.tail``) are the ones a
Parquet library reads; anything else (a FIFO, a link, a footer where an entry appears twice, a
truncated file) is left to the whole read, which names the problem, and never blocks."""

from __future__ import annotations

import os

import pyarrow.parquet as pq
import pytest

from tests.store._segments import segment_files
from tests.store.test_run_summary import equal, messy_root, reference_runs
from theseus.store import CorruptSegment, Node, Store, tail
from theseus.store.schema import INDEX_METADATA, KEYS_METADATA


def test_entries_read_from_the_end_are_the_parquet_libraries(tmp_path, monkeypatch):
    store = Store(tmp_path)
    messy_root(store)
    with store.writer() as w:  # a footer longer than one read of the end
        w.write(Node.start("proj.tail.wide"), {f"k{i:04d}": float(i) for i in range(600)})
    paths = segment_files(store)
    assert any(os.path.getsize(p) > tail.TAIL for p in paths)
    for path in paths:
        want = pq.read_metadata(path).metadata
        footer = tail.footer_bytes(path)
        assert tail.entry(footer, KEYS_METADATA) == want[KEYS_METADATA]
        assert tail.entry(footer, INDEX_METADATA) == want[INDEX_METADATA]
    monkeypatch.setattr(tail, "TAIL", 64)  # every footer takes a second read
    assert equal(Store(tmp_path).runs(), reference_runs(store))


def test_an_entry_found_twice_or_cut_short_is_not_trusted(tmp_path):
    store = Store(tmp_path)
    with store.writer() as w:
        w.write(Node.start("proj.tail.twice"), {"loss": 1.0})
    footer = tail.footer_bytes(segment_files(store)[0])
    value = tail.entry(footer, KEYS_METADATA)
    struct = footer[footer.index(b"\x18\x0ctheseus.keys"):footer.index(value) + len(value) + 1]
    assert value is not None and struct.endswith(b"\x00")
    assert tail.entry(struct + footer, KEYS_METADATA) is None  # twice: which one is the footer's?
    assert tail.entry(footer.replace(struct, struct[:-1] + b"\x01"), KEYS_METADATA) is None  # no struct end


@pytest.mark.parametrize("what", ["fifo", "link", "truncated", "empty"])
def test_what_is_not_a_whole_segment_is_read_whole(tmp_path, what):
    store = Store(tmp_path)
    node = Node.start("proj.tail.odd")
    with store.writer() as w:
        w.write(node, {"loss": 1.0})
    [path] = segment_files(store)
    other = path.replace("/s-", "/s-9")
    if what == "fifo":
        os.mkfifo(other)
    elif what == "link":
        os.symlink(path, other)
    elif what == "truncated":
        open(other, "wb").write(open(path, "rb").read()[:-20])
    else:
        open(other, "wb").close()
    assert tail.footer_bytes(other) is None
    with pytest.raises(CorruptSegment, match=os.path.basename(other)):
        Store(tmp_path).runs()
