"""Reliability through the public API: concurrent writers, kill -9 mid-write, readers during compaction."""

import contextlib
import os
import random
import signal
import subprocess
import sys
import threading
import time

import pytest
from typer.testing import CliRunner

from tests.store._segments import segment_files
from theseus.cli import app
from theseus.store import Node, Store

WRITER = r"""
import sys, json
from theseus.store import Store, Node
root, name, nonce, keys, steps = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4].split(","), int(sys.argv[5])
store = Store(root)
node = Node(name, nonce, 0)
with store.writer(flush_interval=0.05) as w:
    for step in range(steps):
        w.write(node, {k: float(step * 10 + i) for i, k in enumerate(keys)})
        node = node.next()
"""


def spawn(*args):
    return subprocess.Popen([sys.executable, "-c", WRITER, *map(str, args)])


def test_many_processes_one_root(tmp_path):
    """8 processes write 8 runs while 2 more write different keys of the same nodes."""
    steps = 40
    runs = [Node.start(f"proj.conc.run{i}") for i in range(8)]
    shared = Node.start("proj.conc.shared")
    procs = [spawn(tmp_path, n.name, n.nonce, "a,b", steps) for n in runs]
    procs += [spawn(tmp_path, shared.name, shared.nonce, "x", steps),
              spawn(tmp_path, shared.name, shared.nonce, "y", steps)]
    for p in procs:
        assert p.wait(timeout=120) == 0
    store = Store(tmp_path)
    for n in runs:
        rows = store.find().nonce(n.nonce).select(keys=["a", "b"])
        assert rows == [{"a": float(s * 10), "b": float(s * 10 + 1)} for s in range(steps)]
    rows = store.find().nonce(shared.nonce).select(keys=["x", "y"])
    assert rows == [{"x": float(s * 10), "y": float(s * 10)} for s in range(steps)]


CRASHER = r"""
import sys, os
from theseus.store import Store, Node
root, nonce = sys.argv[1], sys.argv[2]
store = Store(root)
node = Node("proj.crash.run", nonce, 0)
w = store.writer(flush_interval=0.01)
step = 0
while True:
    w.write(node, {"step": step, "payload": "x" * (step % 97)})
    if step % 7 == 0:
        w.flush()
        # everything up to this step is durable now: tell the parent
        os.write(1, f"{step}\n".encode())
    node = node.next()
    step += 1
"""


@pytest.mark.slow
def test_kill_dash_nine_never_loses_flushed_records(tmp_path):
    rng = random.Random(0)
    for trial in range(20):
        root = tmp_path / f"t{trial}"
        nonce = f"{trial:06x}"
        proc = subprocess.Popen([sys.executable, "-c", CRASHER, str(root), nonce], stdout=subprocess.PIPE)
        durable = -1
        os.set_blocking(proc.stdout.fileno(), False)
        buf = b""
        started = time.time() + 60  # the kill lands a random moment after the first durable flush
        while not buf and time.time() < started:  # (a loaded machine may take seconds to import)
            buf += proc.stdout.read() or b""
            time.sleep(0.005)
        deadline = time.time() + rng.random() * 1.5
        while time.time() < deadline:
            buf += proc.stdout.read() or b""
            time.sleep(0.005)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        buf += proc.stdout.read() or b""
        lines = [int(x) for x in buf.decode().split()]
        durable = max(lines) if lines else -1
        store = Store(root)
        rows = store.find().nonce(nonce).select(keys=["step"])
        steps = [r["step"] for r in rows]
        assert steps == list(range(len(steps))), f"trial {trial}: gap in the log"
        assert len(steps) > durable, f"trial {trial}: flushed step {durable} lost (have {len(steps)})"
        for dirpath, _, files in os.walk(root):
            assert all(not f.endswith(".parquet") or not f.startswith(".") for f in files)


def test_reader_during_compaction_sees_the_same_answer(tmp_path):
    store = Store(tmp_path)
    node = Node.start("proj.compact.run")
    nonce = node.nonce
    for i in range(30):
        with store.writer() as w:
            w.write(node, {"loss": float(i), "tokens": i * 10})
            node = node.next()
    expected = (store.find().nonce(nonce).where("tokens", ">=", 50).sort("loss", ascending=False)
                .select(keys=["loss", "tokens"]))
    answers, errors = [], []
    stop = threading.Event()

    def read():
        reader = Store(tmp_path)
        while not stop.is_set():
            try:
                answers.append(reader.find().nonce(nonce).where("tokens", ">=", 50).sort("loss", ascending=False)
                               .select(keys=["loss", "tokens"]))
            except Exception as e:  # noqa: BLE001 - any failure is the test's failure
                errors.append(e)

    threads = [threading.Thread(target=read) for _ in range(2)]
    for t in threads:
        t.start()
    for _ in range(5):
        store.compact()
        # add more small segments and compact again, so readers race several compactions
        with store.writer() as w:
            w.write(Node(node.name, nonce, 0), {"loss": 0.0})
        with store.writer() as w:
            w.write(Node(node.name, nonce, 0), {"loss": 0.0})
    store.compact()
    time.sleep(0.2)
    stop.set()
    for t in threads:
        t.join()
    assert not errors, errors[:3]
    assert answers and all(a == expected for a in answers)
    assert len(segment_files(store)) == 1


def log_rows(root) -> int:
    """Rows in every published segment of the log, read with fsspec and pyarrow alone (no theseus)."""
    import fsspec
    import pyarrow.parquet as pq

    fs, path = fsspec.core.url_to_fs(str(root))
    paths = [p for p in fs.glob(f"{path}/log/*/*/*.parquet") if not p.rsplit("/", 1)[-1].startswith(".")]
    total = 0
    for p in paths:
        with fs.open(p, "rb") as f:
            total += pq.read_metadata(f).num_rows
    return total


@pytest.mark.parametrize("root", ["local", pytest.param("gcs", marks=[pytest.mark.gcs, pytest.mark.slow])],
                         indirect=True)
def test_concurrent_compactions_never_multiply_records(root):
    """Three compaction loops race one writer; every record stays once in answers, and the log
    holds no more rows than were written (two compactions of the same records publish them once),
    on GCS too, where no conditional write lets only one of them publish."""
    writer_node = Node.start("proj.compact.many")
    written, errors, stop = [], [], threading.Event()

    def write():
        node = writer_node
        with Store(root).writer(flush_interval=60) as w:
            for seq in range(400):
                w.write(node, {"loss": float(seq)})
                w.flush()  # a segment per record: something to compact all the time
                written.append(seq)
                node = node.next()
                if stop.is_set():
                    return

    def compact_loop():
        store = Store(root)
        while not stop.is_set():
            try:
                store.compact()
            except Exception as e:  # noqa: BLE001 - any failure is the test's failure
                errors.append(e)

    with Store(root).writer() as w:  # the root exists before compactions start: compacting no root is an error
        w.write(Node.start("proj.compact.other"), {"loss": 0.0})
    threads = [threading.Thread(target=compact_loop) for _ in range(3)]
    for t in threads:
        t.start()
    deadline = time.time() + 4
    writer = threading.Thread(target=write)
    writer.start()
    while writer.is_alive() and time.time() < deadline:
        time.sleep(0.05)
    stop.set()
    for t in [writer, *threads]:
        t.join()
    store = Store(root)
    store.compact()
    rows = store.find().nonce(writer_node.nonce).select(keys=["loss"])
    assert rows == [{"loss": float(s)} for s in written]
    assert log_rows(root) <= len(written) + 1  # and the other run's one record
    assert not errors, errors[:3]


@contextlib.contextmanager
def compacting(root, nodes):
    """While inside: a thread that keeps adding small segments to the runs of ``nodes`` and compacting them."""
    stop, errors = threading.Event(), []

    def loop():
        store = Store(root)
        try:
            while not stop.is_set():
                for node in nodes:
                    for _ in range(2):
                        with store.writer() as w:
                            w.write(node, {"loss": 0.5})
                store.compact()
        except Exception as e:  # noqa: BLE001 - reported by the test
            errors.append(e)

    thread = threading.Thread(target=loop)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
    assert not errors, errors[:3]


def _runs_reader(root, nodes):
    runs = Store(root).runs()
    assert sorted(runs["nonce"].to_list()) == sorted(n.nonce for n in nodes)


def _cli_reader(*args, expect=()):
    def read(root, nodes):
        result = CliRunner().invoke(app, [args[0], str(root), *args[1:]], env={"COLUMNS": "300"})
        assert result.exit_code == 0, result.output
        assert "unreadable-segment" not in result.output
        for text in expect:
            assert text.format(*nodes) in result.output, result.output
    return read


@pytest.mark.parametrize("reader", [
    _runs_reader,
    _cli_reader("ls", expect=["{0.nonce}", "{1.nonce}"]),
    _cli_reader("audit", "--no-checksums"),
    _cli_reader("gc", "--dry-run", "--min-age", "0", expect=["would delete objects/{0.id}"]),
], ids=["runs", "ls", "audit", "gc"])
def test_readers_during_compaction_see_the_whole_log(tmp_path, reader):
    """store.runs(), `theseus ls`, `audit` and `gc` list segments, then read them: a compaction that
    retires one in between makes them list again, as the cursor does (never an error or a false problem)."""
    store = Store(tmp_path)
    nodes = [Node.start(f"proj.read.run{i}") for i in range(2)]
    for node in nodes:
        for seq in range(5):
            with store.writer() as w:
                w.write(Node(node.name, node.nonce, seq), {"loss": float(seq)})
    os.makedirs(tmp_path / "objects" / nodes[0].id)  # no record references it: gc reads its run's log again
    calls, deadline = 0, time.time() + 3
    with compacting(tmp_path, nodes):
        while time.time() < deadline:
            reader(tmp_path, nodes)
            calls += 1
    assert calls > 1


TIMED_WRITER = r"""
import sys, time
from theseus.store import Store, Node
root, name, nonce, keys, seconds = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4].split(","), float(sys.argv[5])
node, steps, deadline = Node(name, nonce, 0), 0, time.time() + seconds
with Store(root).writer(flush_interval=0.2) as w:
    while time.time() < deadline:
        w.write(node, {k: float(steps * 10 + i) for i, k in enumerate(keys)})
        node, steps = node.next(), steps + 1
        time.sleep(0.01)
print(steps)
"""

# Each loops until the file STOP exists, checks what it reads, and prints how many times it read.
LOOPER = r"""
import os, random, sys
from typer.testing import CliRunner
from theseus.cli import app
from theseus.store import Store
root, kind, stop, nonces = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4].split(",")
rounds, store, runner = 0, Store(root), CliRunner()


def cli(*args):
    result = runner.invoke(app, [args[0], root, *args[1:]], env={"COLUMNS": "300"})
    assert result.exit_code == 0 and "unreadable-segment" not in result.output, result.output
    return result.output


while not os.path.exists(stop) or rounds == 0:
    if kind == "compact":
        store.compact()
    elif kind == "cursor":  # a run's visible records are a prefix of what its writer wrote
        rows = store.find().nonce(random.choice(nonces)).select(keys=["a", "b"])
        assert rows == [{"a": 10.0 * s, "b": 10.0 * s + 1} for s in range(len(rows))], rows[:5]
    elif kind == "runs":
        runs = store.runs()
        assert (runs["nodes"] == runs["last seq"] + 1).all(), runs
    elif kind == "ls":
        cli("ls")
    elif kind == "audit":
        cli("audit", "--no-checksums")
    rounds += 1
print(rounds)
"""


@pytest.mark.slow
def test_writers_compactors_and_readers_at_once(tmp_path):
    """16 writer processes, 2 more writing other keys of one run's nodes, 2 compactors and a reader
    of every kind (cursor, runs(), `theseus ls`, `theseus audit`) for 20 s: nobody fails, every
    record is answered exactly once, and the log holds no more rows than were written."""
    seconds, stop = 20, tmp_path / "STOP"
    root = tmp_path / "root"
    runs = [Node.start(f"proj.grown.run{i}") for i in range(16)]
    shared = Node.start("proj.grown.shared")
    out = tmp_path / "out"
    out.mkdir()

    def start(name, *args):
        with open(out / f"{name}.out", "w") as o, open(out / f"{name}.err", "w") as e:
            return name, subprocess.Popen([sys.executable, "-c", *map(str, args)], stdout=o, stderr=e)

    nonces = ",".join(n.nonce for n in runs)
    others = [start(f"compact{i}", LOOPER, root, "compact", stop, nonces) for i in range(2)]
    others += [start(kind, LOOPER, root, kind, stop, nonces) for kind in ("cursor", "runs", "ls", "audit")]
    writers = [start(f"writer{i}", TIMED_WRITER, root, n.name, n.nonce, "a,b", seconds) for i, n in enumerate(runs)]
    writers += [start(f"shared-{k}", TIMED_WRITER, root, shared.name, shared.nonce, k, seconds) for k in "xy"]
    for name, proc in writers:
        assert proc.wait(timeout=seconds + 300) == 0, (out / f"{name}.err").read_text()
    stop.touch()
    for name, proc in others:
        assert proc.wait(timeout=300) == 0, (out / f"{name}.err").read_text()
    for name, _ in writers + others:
        assert "Traceback" not in (out / f"{name}.err").read_text(), name
    steps = {name: int((out / f"{name}.out").read_text()) for name, _ in writers}
    rounds = {name: int((out / f"{name}.out").read_text()) for name, _ in others}
    assert all(rounds.values()), rounds

    store = Store(root)
    store.compact()
    for i, n in enumerate(runs):
        rows = store.find().nonce(n.nonce).select(keys=["a", "b"])
        assert rows == [{"a": 10.0 * s, "b": 10.0 * s + 1} for s in range(steps[f"writer{i}"])], n
    shared_rows = store.find().nonce(shared.nonce).select(keys=["x", "y"])
    longest = max(steps["shared-x"], steps["shared-y"])
    assert shared_rows == [{k: 10.0 * s if s < steps[f"shared-{k}"] else None for k in "xy"} for s in range(longest)]
    written = 2 * sum(steps[f"writer{i}"] for i in range(16)) + steps["shared-x"] + steps["shared-y"]
    assert log_rows(root) == written  # each record once: none lost, none multiplied
    print(f"{written} records written; rounds {rounds}")
