"""The writer under concurrency, failures, bad records and fork: no record lost, refused or multiplied."""

import os
import subprocess
import sys
import time

import pytest

from tests.store._segments import segment_files
from theseus.store import FlushError, Node, Store
from theseus.store.nonces import NonceTaken

COMPACTOR = r"""
import os, sys, time
import pytest

from theseus.store import FlushError, Node, Store
root, seconds = sys.argv[1], float(sys.argv[2])
store, busy = Store(root), [Node.start(f"proj.race.busy{i}") for i in range(20)]
print("ready", flush=True)
end = time.monotonic() + seconds
while time.monotonic() < end and not os.path.exists(os.path.join(root, "stop")):
    with store.writer(flush_interval=60) as w:
        for _ in range(3):  # small segments of many runs for the next compaction to retire
            for node in busy:
                w.write(node, {"loss": 1.0})
            w.flush()
    store.compact()
"""


def test_first_write_while_another_process_compacts(tmp_path):
    """A fresh writer's first write() reads the root's key types; a compaction retiring
    the segments it lists meanwhile must not make that write fail."""
    root = tmp_path / "root"
    compactor = subprocess.Popen([sys.executable, "-c", COMPACTOR, str(root), "30"], stdout=subprocess.PIPE, text=True)
    assert compactor.stdout.readline() == "ready\n"
    written, errors = [], []
    try:
        deadline = time.monotonic() + 6
        while len(written) < 150 and time.monotonic() < deadline:
            node = Node.start("proj.race.fresh")
            w = Store(root).writer(flush_interval=60)
            try:
                w.write(node, {"loss": 2.0, "step": 1})
            except NonceTaken:  # a random nonce the compactor's runs already hold: the store's refusal, drawn again
                w.close()
                continue
            except Exception as e:  # noqa: BLE001 - any failure is the test's failure
                errors.append(e)
            w.close()
            written.append(node)
    finally:
        (root / "stop").touch()
        assert compactor.wait(timeout=60) == 0
    assert not errors, f"{len(errors)} of {len(written)} first writes failed: {errors[:3]!r}"
    assert len(written) >= 20
    assert {n.nonce for n in Store(root).find().spec(group="race", run="fresh").all()} == {n.nonce for n in written}


def blocked(root, node: Node):
    """A regular file where the run's log folder goes: every flush of the run fails until it is removed."""
    folder = root / "log" / f"name={node.name}"
    folder.parent.mkdir(parents=True, exist_ok=True)
    folder.write_text("not a folder")
    return folder


def rows_of(store: Store, node: Node) -> int:
    """Rows the log holds for a run (a record published twice counts twice)."""
    import pyarrow.parquet as pq

    return sum(pq.read_metadata(p).num_rows for p in segment_files(store, node.name, node.nonce))


def test_a_failed_flush_keeps_every_record_until_published_or_discarded(tmp_path):
    """A flush that fails keeps its records: close() raises (the last error, once) until they are
    published; the background thread retries them; close(discard=True) drops them."""
    store = Store(tmp_path)
    node = Node.start("proj.fail.run")
    block = blocked(tmp_path, node)
    w = store.writer(flush_interval=0.01)
    for step in range(100):
        w.write(node, {"loss": float(step)})
        node = node.next()
    time.sleep(0.3)  # the background thread fails many times meanwhile
    for _ in range(3):  # each close retries, raises, and drops nothing
        with pytest.raises(FlushError, match=r"100 record\(s\) of run proj\.fail\.run .* not published") as info:
            w.close()
        assert isinstance(info.value.__cause__, OSError) and info.value.__cause__.__cause__ is None
        assert len(str(info.value)) < 600  # the last error, not one nested per retry
    block.unlink()
    w.close()
    w.close()  # idempotent once published
    assert [n.seq for n in store.find().nonce(node.nonce).all()] == list(range(100))
    assert rows_of(store, node) == 100

    # the background thread retries on its own once the disk is writable again
    other = Node.start("proj.fail.retry")
    block = blocked(tmp_path, other)
    w = store.writer(flush_interval=0.01)
    w.write(other, {"loss": 1.0})
    time.sleep(0.1)
    block.unlink()
    deadline = time.monotonic() + 10
    while not store.find().nonce(other.nonce).all() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert store.find().nonce(other.nonce).select(keys=["loss"]) == [{"loss": 1.0}]
    w.close()

    # or the caller drops them, explicitly
    dropped = Node.start("proj.fail.dropped")
    block = blocked(tmp_path, dropped)
    w = store.writer(flush_interval=0.01)
    w.write(dropped, {"loss": 1.0})
    with pytest.raises(FlushError):
        w.close()
    w.close(discard=True)
    block.unlink()
    w.close()
    assert store.find().nonce(dropped.nonce).all() == []
    with pytest.raises(RuntimeError, match="closed"):
        w.write(dropped, {"loss": 2.0})


def test_write_refuses_what_no_flush_could_publish(tmp_path):
    """A seq beyond int64, a run name too long for its folder, a string that is not Unicode:
    refused by write() with a clear error, so the writer's other records still publish."""
    store = Store(tmp_path)
    good = Node.start("proj.bad.good")
    with store.writer(flush_interval=60) as w:
        w.write(good, {"loss": 1.0, "tag": "a"})
        for make in [lambda: Node(good.name, good.nonce, 2**63), lambda: Node(good.name, good.nonce, 2**63 - 1).next()]:
            with pytest.raises(ValueError, match=r"seq .*9223372036854775808"):  # refused by Node, or else by write()
                w.write(make(), {"loss": 2.0})
        w.write(Node(good.name, good.nonce, 2**63 - 1), {"loss": 3.0})  # the last seq that fits
        longest = Node.start("proj.bad." + "r" * (250 - len("proj.bad.")))
        w.write(longest, {"loss": 4.0})
        for name in ["proj.bad." + "r" * (251 - len("proj.bad.")), "r" * 240]:
            with pytest.raises(ValueError,  # refused by Node itself
                               match=r"is 25\d characters: the log's folder name=<name> allows at most 250"):
                w.write(Node.start(name), {"loss": 2.0})
        with pytest.raises(ValueError, match=r"value of 'tag' '\\udc80' is not valid Unicode"):
            w.write(good.next(), {"loss": 2.0, "tag": "\udc80"})  # the checked shape of a known record
        with pytest.raises(ValueError, match=r"value of 'other' .* not valid Unicode"):
            w.write(good.next(), {"other": "x\ud800"})
        with pytest.raises(ValueError, match=r"status .* not valid Unicode"):
            w.status(good, "\udc80")
        w.failed(longest, "cannot open /data/\udcff")  # an error text is escaped, never refused
    assert store.find().nonce(good.nonce).select(keys=["loss"]) == [{"loss": 1.0}, {"loss": 3.0}]
    assert store.record(longest)["_error"] == "cannot open /data/\\udcff"


def test_a_run_that_cannot_be_published_does_not_block_the_others(tmp_path):
    """Each run is published on its own: a failing run keeps only its own records pending,
    and the good run is published once, however often the flush is retried."""
    store = Store(tmp_path)
    good, bad = Node.start("proj.per.good"), Node.start("proj.per.bad")
    block = blocked(tmp_path, bad)
    w = store.writer(flush_interval=60)
    node = bad
    for step in range(10):
        w.write(node, {"loss": float(step)})
        w.write(good, {"loss": float(step)})
        good, node = good.next(), node.next()
    for _ in range(3):
        with pytest.raises(FlushError, match=r"10 record\(s\) of run proj\.per\.bad nonce") as info:
            w.flush()
        assert "proj.per.good" not in str(info.value)
    assert len(store.find().nonce(good.nonce).all()) == 10
    assert rows_of(store, good) == 10  # published once, not once per retry
    w.write(good, {"loss": 10.0})  # later records of the good run publish too
    with pytest.raises(FlushError):
        w.flush()
    assert rows_of(store, good) == 11
    block.unlink()
    w.close()
    assert store.find().nonce(bad.nonce).select(keys=["loss"]) == [{"loss": float(step)} for step in range(10)]
    assert rows_of(store, bad) == 10


@pytest.mark.filterwarnings("ignore:.*fork:DeprecationWarning")
def test_a_writer_inherited_through_fork_raises_in_the_child(tmp_path):
    """A forked child gets a copy of the writer (pending records, and its lock maybe held by
    the parent's background thread): its calls raise a clear error, never hang, and the
    parent's records are published once, by the parent."""
    store = Store(tmp_path)
    node = Node.start("proj.fork.run")
    w = store.writer(flush_interval=0.001)  # the background thread flushes all the time
    written = 0
    for trial in range(10):
        for _ in range(500):
            w.write(node, {"loss": float(written)})
            node, written = node.next(), written + 1
        pid = os.fork()
        if pid == 0:  # the child: report through the exit code only
            code = 1
            try:
                for call in (lambda: w.flush(), lambda: w.write(node, {"loss": 0.0}), lambda: w.status(node, "x")):
                    try:
                        call()
                        code = 2  # published or buffered the parent's records
                        break
                    except RuntimeError as e:
                        code = 0 if "inherited by process" in str(e) and "through a fork" in str(e) else 3
                        if code:
                            break
                if not code:
                    w.close()  # leaves the records to the parent
            finally:
                os._exit(code)
        deadline = time.monotonic() + 10
        while (done := os.waitpid(pid, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        if done[0] == 0:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            pytest.fail(f"trial {trial}: the forked child hung in the writer")
        assert os.waitstatus_to_exitcode(done[1]) == 0, f"trial {trial}"
    w.close()
    assert rows_of(store, node) == written
    assert len(store.find().nonce(node.nonce).all()) == written


def test_two_writers_racing_a_new_keys_type(tmp_path):
    """Two writers type a new key differently before either flushes: the first type published
    wins, the other run's flush is refused with a clear error (its records kept), and the key
    stays readable and writable with the winning type."""
    store = Store(tmp_path)
    a, b, c = Node.start("proj.types.a"), Node.start("proj.types.b"), Node.start("proj.types.c")
    first, second = store.writer(flush_interval=60), Store(tmp_path).writer(flush_interval=60)
    first.write(a, {"x/k": 1.5})
    second.write(b, {"x/k": "high"})  # nothing published yet: accepted
    second.write(c, {"x/other": 1})  # another run of the refused writer
    first.flush()
    with pytest.raises(FlushError,
                       match=r"run proj\.types\.b .* key 'x/k' was published as float .* gave it str") as info:
        second.flush()
    assert "proj.types.c" not in str(info.value)
    with pytest.raises(ValueError, match="'x/k' holds float values; got str"):
        second.write(b.next(), {"x/k": "low"})  # now checked against the published type
    second.write(b.next(), {"x/k": 2})  # the winning type (ints mix with floats) is accepted
    with pytest.raises(FlushError):
        second.close()  # the refused records are kept until dropped
    second.close(discard=True)
    first.close()
    assert store.keys()["x/k"] == "float"
    assert store.find().has("x/k").select(keys=["x/k"]) == [{"x/k": 1.5}]
    assert store.find().nonce(c.nonce).select(keys=["x/other"]) == [{"x/other": 1}]
    with store.writer() as w:  # later writes of the winning type still work
        w.write(a.next(), {"x/k": 2.5})
        with pytest.raises(ValueError, match="'x/k' holds float values; got str"):
            w.write(a.next(), {"x/k": "s"})

    # flushing at the same instant: exactly one type is published, every time
    import threading

    for trial in range(20):
        key = f"race/k{trial}"
        writers = [Store(tmp_path).writer(flush_interval=60) for _ in range(2)]
        nodes = [Node.start("proj.types.race"), Node.start("proj.types.race")]
        writers[0].write(nodes[0], {key: 1.0})
        writers[1].write(nodes[1], {key: "s"})
        barrier, outcomes = threading.Barrier(2), [None, None]

        def flush(i):
            barrier.wait()
            try:
                writers[i].flush()
                outcomes[i] = "published"
            except FlushError:
                outcomes[i] = "refused"

        threads = [threading.Thread(target=flush, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(outcomes) == ["published", "refused"], f"trial {trial}: {outcomes}"
        assert store.keys()[key] == ("float" if outcomes[0] == "published" else "str")
        for w in writers:
            w.close(discard=True)
