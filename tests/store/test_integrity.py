"""A damaged or forged segment or view is refused by readers and reported by `theseus audit`
(issue 15, items 9 and 10)."""

from __future__ import annotations

import contextlib
import os

import numpy as np
import pyarrow.parquet as pq
import pytest
from loguru import logger
from typer.testing import CliRunner

from tests.store._segments import rewrite_footer, segment_files
from theseus.cli import app
from theseus.store import CorruptSegment, Node, Store

runner = CliRunner()


def write_run(root, steps: int = 3) -> Node:
    """One run of ``steps`` nodes with loss 10 + seq, in one segment."""
    start = node = Node.start("proj.integrity.run")
    with Store(root).writer() as w:
        for i in range(steps):
            w.write(node, {"loss": 10.0 + i})
            node = node.next()
    return start


def only_segment(root) -> str:
    [path] = segment_files(Store(root))
    return path


def audit_cli(root) -> tuple[int, str]:
    result = runner.invoke(app, ["audit", str(root)])
    return result.exit_code, result.output


def shift_seqs(keys, index):
    index["blocks"]["loss"][2] += 1000
    index["blocks"]["loss"][3] += 1000
    return keys, index


def huge_block(keys, index):
    index["blocks"]["loss"][1] = 10**12
    return keys, index


def string_bounds(keys, index):
    index["blocks"]["loss"][0:2] = ["0", "3"]
    return keys, index


@pytest.mark.parametrize("forge", [shift_seqs, huge_block, string_bounds])
def test_a_forged_segment_index_is_refused_and_audited(tmp_path, forge):
    start = write_run(tmp_path)
    path = only_segment(tmp_path)
    rewrite_footer(path, forge)
    store = Store(tmp_path)
    for query in (lambda: store.find().nonce(start.nonce).seq(1000).select(keys=["loss"]),
                  lambda: store.find().nonce(start.nonce).select(keys=["loss"]),
                  lambda: Store(tmp_path).find().sort("loss").select(keys=["loss"])):
        with pytest.raises(CorruptSegment, match=os.path.basename(path)):
            query()
    code, output = audit_cli(tmp_path)
    assert code == 1 and os.path.basename(path) in output


def test_a_forged_seq_range_within_the_files_seqs_is_refused(tmp_path):
    """Statistics cannot catch a key's range moved inside the file's: the seqs a reader reads do."""
    start = node = Node.start("proj.integrity.two")
    with Store(tmp_path).writer() as w:
        for i in range(6):
            w.write(node, {"loss": 10.0 + i, **({"early": 1.0} if i < 3 else {})})
            node = node.next()
    path = only_segment(tmp_path)

    def move(keys, index):
        index["blocks"]["early"][2:4] = [3, 5]
        return keys, index

    rewrite_footer(path, move)
    with pytest.raises(CorruptSegment, match=os.path.basename(path)):
        Store(tmp_path).find().nonce(start.nonce).select(keys=["early"])
    code, output = audit_cli(tmp_path)
    assert code == 1 and os.path.basename(path) in output


def test_audit_reports_the_segments_readers_reject(tmp_path):
    """A valid Parquet file without the theseus footer, or with a keys footer that is not JSON."""
    for case, edit in (("nofooter", lambda keys, index: (keys, None)),
                       ("notjson", lambda keys, index: (b"{not json", index))):
        root = tmp_path / case
        start = write_run(root)
        path = only_segment(root)
        if case == "nofooter":
            pq.write_table(pq.read_table(path).replace_schema_metadata(None), path)
        else:
            rewrite_footer(path, edit)
        with pytest.raises(CorruptSegment, match=os.path.basename(path)):
            Store(root).find().nonce(start.nonce).select(keys=["loss"])
        code, output = audit_cli(root)
        assert code == 1 and os.path.basename(path) in output, output


def flip(path: str, value: float) -> None:
    """Flip one bit of the only copy of ``value``'s bytes in a file (a value inside a data page)."""
    data = bytearray(open(path, "rb").read())
    needle = np.float64(value).tobytes()
    assert data.count(needle) == 1
    data[data.index(needle) + 2] ^= 0x10
    open(path, "wb").write(bytes(data))


def test_a_flipped_byte_in_a_segment_is_refused_and_audited(tmp_path):
    start = write_run(tmp_path)
    path = only_segment(tmp_path)
    flip(path, 11.0)
    with pytest.raises(CorruptSegment, match=os.path.basename(path)):
        Store(tmp_path).find().nonce(start.nonce).select(keys=["loss"])
    with Store(tmp_path).writer() as w:  # a second segment of the run: compaction would merge both
        w.write(Node(start.name, start.nonce, 3), {"loss": 13.0})
    with pytest.raises(CorruptSegment, match=os.path.basename(path)):  # never republished with fresh checksums
        Store(tmp_path).compact()
    assert os.path.exists(path)
    code, output = audit_cli(tmp_path)
    assert code == 1 and os.path.basename(path) in output, output


def compacted_root(root, runs: int = 3) -> list[Node]:
    """``runs`` runs of 3 nodes (loss 100 * run + seq + 0.25), compacted: the view holds them all."""
    starts = []
    for r in range(runs):
        start = node = Node.start(f"proj.integrity.run{r}")
        with Store(root).writer() as w:
            for i in range(3):
                w.write(node, {"loss": 100.0 * r + i + 0.25})
                node = node.next()
        starts.append(start)
    Store(root).compact()
    return starts


@contextlib.contextmanager
def logged_warnings():
    """The warnings theseus logs (loguru) while inside."""
    found: list[str] = []
    sink = logger.add(lambda message: found.append(str(message)), level="WARNING")
    try:
        yield found
    finally:
        logger.remove(sink)


def test_a_flipped_byte_in_a_view_is_audited_and_never_served(tmp_path):
    compacted_root(tmp_path)
    [view] = os.listdir(tmp_path / "view")
    flip(str(tmp_path / "view" / view), 101.25)  # run 1, seq 1: neither the smallest nor the largest loss
    expected = [0.25, 1.25, 2.25, 100.25, 101.25, 102.25, 200.25, 201.25, 202.25]
    with logged_warnings() as warned:
        losses = Store(tmp_path).find().sort("loss").select(keys=["loss"])
    assert [row["loss"] for row in losses] == expected
    assert any(view in w for w in warned), warned
    code, output = audit_cli(tmp_path)
    assert code == 1 and view in output and "marked rejected" in output, output
    losses = Store(tmp_path).find().sort("loss").select(keys=["loss"])
    assert [row["loss"] for row in losses] == expected


def test_a_view_that_disagrees_with_the_log_is_audited_ignored_and_replaced(tmp_path):
    """A view rewritten with a changed value (its checksums valid) is named by audit; from then on
    readers skip it, and the next compaction replaces it."""
    compacted_root(tmp_path, runs=10)  # enough runs for a whole-root query to read the view
    [view] = os.listdir(tmp_path / "view")
    path = str(tmp_path / "view" / view)
    table = pq.read_table(path)
    loss = table["loss"].to_numpy().copy()
    changed = loss[4]
    loss[4] = -1.0
    table = table.set_column(table.schema.get_field_index("loss"), "loss", [loss])
    pq.write_table(table, path, write_page_checksum=True)
    assert -1.0 in [r["loss"] for r in Store(tmp_path).find().select(keys=["loss"])]  # served until audited
    code, output = audit_cli(tmp_path)
    assert code == 1 and view in output and "disagrees with the log" in output and "marked rejected" in output, output
    losses = [r["loss"] for r in Store(tmp_path).find().select(keys=["loss"])]
    assert -1.0 not in losses and changed in losses
    Store(tmp_path).compact()
    assert (sorted(os.listdir(tmp_path / "view")) != [view, view + ".rejected"]
            and len(os.listdir(tmp_path / "view")) == 1)
    code, output = audit_cli(tmp_path)
    assert code == 0, output


def test_a_flipped_byte_in_a_views_record_is_audited_and_loses_no_run(tmp_path):
    """A byte of the view's footer record (run names, row starts...: not in any page) is caught by its digest."""
    compacted_root(tmp_path)
    [view] = os.listdir(tmp_path / "view")
    path = str(tmp_path / "view" / view)
    data = bytearray(open(path, "rb").read())
    at = data.index(b'"name":["proj.integrity.run0') + len(b'"name":["proj.integrity.r')
    data[at] ^= 0x01  # run0 is renamed in the record: its folder would not be listed
    open(path, "wb").write(bytes(data))
    code, output = audit_cli(tmp_path)
    assert code == 1 and view in output, output
    try:
        losses = [row["loss"] for row in Store(tmp_path).find().select(keys=["loss"])]
    except CorruptSegment as e:  # named, never a silent answer
        assert view in str(e)
    else:
        assert losses == [0.25, 1.25, 2.25, 100.25, 101.25, 102.25, 200.25, 201.25, 202.25]
