"""A new lineage's nonce is unique in its root: a clash is drawn again (jobs) or refused before any record
is written (a script's Node.start + writer), never merged; also when two writers start at once, locally
and on gs://."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from theseus.jobs import get_job
from theseus.store import Node, Store
from theseus.store import node as node_module
from theseus.store.nonces import NonceTaken, claims, holders


def forced(monkeypatch, *nonces: str) -> None:
    """Make the next draws return ``nonces``, then random ones again."""
    queue = list(nonces)
    real = node_module.draw_nonce
    monkeypatch.setattr(node_module, "draw_nonce", lambda: queue.pop(0) if queue else real())


def written(store: Store, nonce: str) -> list[str]:
    """The names with records under ``nonce``."""
    return sorted({name for name, _ in store._index.runs("*", nonce)})


def test_node_start_never_draws_a_nonce_this_process_holds(monkeypatch):
    a = Node.start("p.g.first")
    forced(monkeypatch, a.nonce, a.nonce, "0b0b0b")
    b = Node.start("p.g.second")
    assert b.nonce == "0b0b0b" and len(b.nonce) == 6


def test_a_scripts_taken_nonce_is_refused_before_anything_is_written(root, monkeypatch):
    store = Store(root)
    a = Node.start("proj.nonce.first")
    with store.writer() as w:
        for step in range(3):
            w.write(a, {"train/loss": 3.0 - step})
            a = a.next()
    for name in ("proj.nonce.second", "proj.nonce.first"):  # another name, or another lineage of the same name
        forced(monkeypatch, a.nonce)
        b = Node.start(name)
        assert b.nonce == a.nonce
        with store.writer() as w:
            with pytest.raises(NonceTaken, match=rf"nonce '{a.nonce}' is already used .* by run proj.nonce.first"):
                w.write(b, {"train/loss": 9.0})
            with pytest.raises(NonceTaken):  # a commit record is refused too, and stays refused
                w.job(b, "doc/job", "lr: 1\n")
        node_module.take_drawn(b.name, b.nonce)  # this process holds the refused draw: forget it, as another would
    assert written(store, a.nonce) == ["proj.nonce.first"]
    assert [n.seq for n in store.find().nonce(a.nonce).all()] == [0, 1, 2]
    assert store.runs().height == 1
    fresh = Node.start("proj.nonce.second")  # drawing again: accepted
    with store.writer() as w:
        w.write(fresh, {"train/loss": 1.0})
    assert store.runs().height == 2


def test_a_named_lineage_is_continued_but_not_taken_by_another_name(root):
    store = Store(root)
    a = Node.start("proj.nonce.named")
    with store.writer() as w:
        w.write(a, {"loss": 1.0})
    with store.writer() as w:  # later, another writer: the same lineage goes on (a resume, evaluations on it)
        w.write(Node(a.name, a.nonce, 1, a.id), {"loss": 0.5})
        w.write(Node(a.name, a.nonce, 0), {"eval/x": 1.0})
        with pytest.raises(NonceTaken):
            w.write(Node("proj.nonce.intruder", a.nonce, 0), {"loss": 1.0})
    assert written(store, a.nonce) == [a.name]
    assert store.find().nonce(a.nonce).last().seq == 1


def test_a_job_draws_again_when_its_nonce_is_taken(tmp_path, monkeypatch):
    store = Store(tmp_path / "root")
    a = Node.start("tok")
    with store.writer() as w:
        w.write(a, {"loss": 1.0})
    forced(monkeypatch, a.nonce)
    job = get_job("data/tokenize/pydoc").create(store, "tok", overrides=["data.max_samples=3"])
    assert job.node.nonce == a.nonce  # drawn at create(): the clash is found when it starts writing
    job()
    assert job.node.nonce != a.nonce
    assert store.run_record(job.node.nonce)["_job"] == "data/tokenize/pydoc"
    assert store.runs().height == 2 and store.find().nonce(a.nonce).all() == [a]
    given = get_job("data/tokenize/pydoc").create(store, "tok2", overrides=["data.max_samples=3", "data.suffix=b"],
                                                    nonce=a.nonce)
    with pytest.raises(NonceTaken, match="nothing was written.*was given its nonce"):  # it cannot draw again
        given()
    assert written(store, a.nonce) == [a.name]


@pytest.mark.parametrize("rounds", [12])
def test_two_writers_starting_one_nonce_at_once_never_both_go_on(root, rounds):
    """Each round, two writers claim the same nonce for new lineages at the same moment (as jobs do):
    at most one goes on, the other is refused before writing; nothing is merged."""
    store = Store(root)
    free = []  # the nonces of rounds where both were refused
    for i in range(rounds):
        nonce = f"{i:06x}"
        barrier, outcome = threading.Barrier(2), {}

        def start(name: str) -> None:
            node = Node(name, nonce, 0)
            with Store(root).writer() as w:
                barrier.wait()
                try:
                    w.begin(node)
                except NonceTaken:
                    outcome[name] = "refused"
                    return
                except Exception as e:  # noqa: BLE001 - named in the assertion below
                    outcome[name] = repr(e)
                    return
                w.write(node, {"loss": 1.0})
                outcome[name] = "wrote"

        threads = [threading.Thread(target=start, args=(f"proj.race.r{j}",)) for j in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        went_on = [name for name, result in outcome.items() if result == "wrote"]
        assert set(outcome.values()) <= {"wrote", "refused"} and len(went_on) <= 1, outcome
        assert written(store, nonce) == went_on
        assert list(claims(store._index, nonce)) == went_on  # a refused claim is withdrawn
        if not went_on:
            free.append(nonce)
    for nonce in free:  # both refused: the withdrawn claims leave the nonce free for a later start
        with store.writer() as w:
            w.begin(Node("proj.race.later", nonce, 0))


SCRIPT = textwrap.dedent("""
    import sys, time
    from theseus.store import Node, Store, node
    from theseus.store.nonces import NonceTaken
    root, name, nonce, start = sys.argv[1:5]
    node.draw_nonce = lambda: nonce
    n = Node.start(name)
    w = Store(root).writer()
    time.sleep(max(0.0, float(start) - time.time()))
    try:
        w.write(n, {"loss": 1.0})
    except NonceTaken as e:
        print("refused:", e)
    else:
        print("wrote")
    w.close()
""")


def test_two_scripts_drawing_one_nonce_at_once_never_merge(tmp_path):
    """Two processes whose Node.start draws the same nonce write their first record at the same moment."""
    root = str(tmp_path / "root")
    for i in range(2):
        nonce = f"ab{i:04x}"
        start = time.time() + 6
        procs = [subprocess.Popen([sys.executable, "-c", SCRIPT, root, f"proj.script.s{j}", nonce, str(start)],
                                  stdout=subprocess.PIPE, text=True, cwd=os.getcwd()) for j in range(2)]
        outs = [p.communicate(timeout=120)[0] for p in procs]
        wrote = [out for out in outs if out.startswith("wrote")]
        assert len(wrote) <= 1 and all(o.startswith(("wrote", "refused: nonce")) for o in outs), outs
        assert len(written(Store(root), nonce)) == len(wrote)


def test_holders_name_claims_and_runs(tmp_path):
    store = Store(tmp_path / "root")
    a, b = Node.start("proj.hold.a"), Node.start("proj.hold.b")
    with store.writer() as w:
        w.write(a, {"loss": 1.0})
        w.begin(b)  # claimed, no record yet
    assert holders(store._index, a.nonce) == {a.name: "log"}
    assert holders(store._index, b.nonce) == {b.name: "claim"}


def test_the_claim_costs_little_on_a_writers_first_flush(tmp_path, monkeypatch):
    """The time of a new lineage's first write + flush on local disk, with and without the claim."""
    def first_flush(i: int) -> float:
        store = Store(tmp_path / f"root{i}")
        node = Node.start("proj.bench.run")
        with store.writer() as w:
            began = time.perf_counter()
            w.write(node, {"loss": 1.0})
            w.flush()
            return time.perf_counter() - began

    counter = itertools.count()
    first_flush(next(counter))  # warm up imports and caches
    with_claim = sorted(first_flush(next(counter)) for _ in range(15))[7]
    monkeypatch.setattr("theseus.store.nonces.begin", lambda *args, **kwargs: None)
    without = sorted(first_flush(next(counter)) for _ in range(15))[7]
    print(f"first write + flush, local disk (median of 15): {with_claim * 1e3:.2f} ms with the nonce claim, "
          f"{without * 1e3:.2f} ms without")
    assert with_claim - without < 0.005 + 0.5 * without


def test_a_claim_a_full_disk_refuses_leaves_the_check_standing(tmp_path, monkeypatch):
    """A claim that cannot be published (ENOSPC) does not stop the write: the nonce was checked free, and the
    records are published (or kept pending) as any segment is."""
    import errno

    def full(*args):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("theseus.store.nonces._publish", full)
    store = Store(tmp_path / "root")
    node = Node.start("proj.nonce.full")
    with store.writer() as w:
        w.write(node, {"loss": 1.0})
    assert store.find().nonce(node.nonce).all() == [node] and claims(store._index, node.nonce) == {}
