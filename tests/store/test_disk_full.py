"""A full disk (ENOSPC on a small tmpfs): flushes and compactions fail clearly, lose nothing,
show readers no partial or temporary segment, and succeed once space is freed."""

from __future__ import annotations

import errno
import hashlib
import json
import os

import polars as pl
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from tests.tmpfs import fill, small_tmpfs
from theseus.cli import app
from theseus.store import FlushError, Node, Store
from theseus.store.fs import TEMPORARY

NO_SPACE = r"No space left on device|ENOSPC"


@pytest.fixture
def root(tmp_path):
    with small_tmpfs(tmp_path / "disk", 2 << 20) as folder:
        yield folder


def answers(root: str) -> tuple:
    """What a fresh reader answers: every node with its user columns, and the finished nodes."""
    store = Store(root)
    nodes = store.find().frame().collect().sort("node").to_dicts()
    return nodes, sorted(n.id for n in store.find().finished().all())


def files(root: str) -> dict[str, str]:
    """sha256 of every file under the root, by relative path."""
    out = {}
    for top, _, names in os.walk(root):
        for name in names:
            with open(os.path.join(top, name), "rb") as f:
                out[os.path.relpath(os.path.join(top, name), root)] = hashlib.sha256(f.read()).hexdigest()
    return out


def check_published_only(root: str) -> None:
    """No temporary file is left, and every segment a reader lists reads whole."""
    names = files(root)
    assert not [p for p in names if TEMPORARY.match(os.path.basename(p))], names
    segments = [p for p in names if p.endswith(".parquet")]
    assert segments
    for rel in segments:
        pq.read_table(os.path.join(root, rel))  # a truncated or partial segment raises


def records_per_key(root: str) -> dict[tuple[str, str], int]:
    """How many records the raw log holds for each (node, key), read without theseus."""
    log = pl.scan_parquet(f"{root}/log/**/*.parquet", hive_partitioning=True)
    counts = log.group_by("node", "key").len().collect()
    return {(r["node"], r["key"]): r["len"] for r in counts.to_dicts()}


def audit_ok(root: str) -> None:
    result = CliRunner().invoke(app, ["audit", root, "--json"])
    assert result.exit_code == 0, result.output
    kinds = {p["kind"] for p in json.loads(result.output)["problems"]}
    assert kinds <= {"temporary-file"}, result.output


def test_flush_on_a_full_disk_fails_clearly_keeps_records_pending_and_publishes_them_once(root):
    store = Store(root)
    a = Node.start("disk.full.a")
    with store.writer() as w:  # published before the disk fills
        for i in range(5):
            w.write(a, {"train/loss": 1.0 / (i + 1), "train/tokens": 100 * i})
            a = a.next()
    before = answers(root)
    assert len(before[0]) == 5

    filler = os.path.join(root, "filler")
    fill(filler)
    w = store.writer(flush_interval=3600)  # no background flush: every attempt below is the test's
    for i in range(5, 10):  # the same run, one more segment
        w.write(a, {"train/loss": 1.0 / (i + 1), "train/tokens": 100 * i})
        a = a.next()
    b = Node.start("disk.full.b")  # a new run (a new folder) with a new key and a string
    for i in range(3):
        w.write(b, {"val/loss": 0.5 + i, "note": f"step {i}"})
        b = b.next()
    with pytest.raises(FlushError, match=NO_SPACE) as failure:
        w.flush()
    message = str(failure.value)
    assert "disk.full.a" in message and "disk.full.b" in message and "kept pending" in message
    assert isinstance(failure.value.__cause__, OSError) and failure.value.__cause__.errno == errno.ENOSPC
    # a commit record is durable on return: on a full disk its write raises
    with pytest.raises(FlushError, match=NO_SPACE):
        w.finished(b)
    with pytest.raises(FlushError, match=NO_SPACE):  # still pending: retried, still no space
        w.flush()
    with pytest.raises(FlushError, match=NO_SPACE):  # close() refuses to drop them
        w.close()
    assert answers(root) == before  # readers see only what was published
    check_published_only(root)

    os.remove(filler)
    w.close()  # retried: publishes every pending record
    nodes, finished = answers(root)
    by_run = {}
    for row in nodes:
        by_run.setdefault(row["name"], []).append(row)
    assert sorted(r["train/tokens"] for r in by_run["disk.full.a"]) == [100 * i for i in range(10)]
    assert sorted(r["seq"] for r in by_run["disk.full.b"]) == [0, 1, 2, 3]
    assert sorted(r["note"] for r in by_run["disk.full.b"] if r["note"]) == ["step 0", "step 1", "step 2"]
    assert finished == sorted(n["node"] for n in by_run["disk.full.b"])
    counts = records_per_key(root)  # each record published exactly once
    assert set(counts.values()) == {1}
    assert len(counts) == 10 * 2 + 3 * 2 + 2  # user values, and b's finished + status records
    check_published_only(root)
    # what a writer killed mid-write leaves: a partial temporary, which readers never list
    segment = next(p for p in files(root) if p.endswith(".parquet"))
    folder, name = os.path.split(os.path.join(root, segment))
    with open(os.path.join(root, segment), "rb") as src, open(f"{folder}/.{name}.0123abcd.tmp", "wb") as dst:
        dst.write(src.read(100))
    assert answers(root) == (nodes, finished)
    audit_ok(root)


def test_compact_on_a_full_disk_fails_clearly_and_loses_nothing(root):
    store = Store(root)
    runs = [Node.start("disk.full.c"), Node.start("disk.full.d")]
    for batch in range(3):  # several segments per run, and a view that the last ones outdate
        with store.writer() as w:
            for k, node in enumerate(runs):
                for _ in range(4):
                    w.write(node, {"train/loss": batch + k / 10, "train/tokens": node.seq})
                    node = node.next()
                runs[k] = node
            if batch == 2:
                w.finished(runs[1])
        if batch == 0:
            store.compact()
    before, snapshot = answers(root), files(root)
    assert len(before[0]) == 25

    filler = os.path.join(root, "filler")
    fill(filler)
    snapshot["filler"] = files(root)["filler"]
    with pytest.raises(OSError, match=NO_SPACE) as failure:
        store.compact()
    assert failure.value.errno == errno.ENOSPC
    assert files(root) == snapshot  # nothing published, retired or left behind
    assert answers(root) == before
    assert records_per_key(root) and set(records_per_key(root).values()) == {1}

    os.remove(filler)
    merged = store.compact()
    assert sorted(merged) == sorted(f"{n.name}/{n.nonce}" for n in runs)
    assert answers(root) == before
    segments = [p for p in files(root) if p.startswith("log/") and p.endswith(".parquet")]
    assert len(segments) == 2  # one per run
    check_published_only(root)
    audit_ok(root)
