"""One bad segment (a FIFO named like one, a published segment cut short) costs its own run at most:
Store.runs() shows the other runs (the bad one left out with a warning naming the file), queries of
other runs answer, and writers of other runs, of the same run and new writers of the root succeed."""

import os
import threading
import warnings

import pytest

from theseus.store import CorruptSegment, Node, Store
from theseus.store.summary import UnreadableRun


def within(seconds: float, fn):
    """``fn()``'s result, or a test failure when it has not returned in ``seconds`` (a FIFO read blocks)."""
    out: dict = {}

    def call():
        try:
            out["value"] = fn()
        except BaseException as e:  # handed to the test thread
            out["error"] = e

    worker = threading.Thread(target=call, daemon=True)
    worker.start()
    worker.join(seconds)
    assert not worker.is_alive(), f"{fn} still blocked after {seconds} s"
    if "error" in out:
        raise out["error"]
    return out["value"]


def root_with_bad_run(root, kind: str) -> tuple[Node, Node, str]:
    """Two runs (``good``, ``bad``) and a bad file in ``bad``'s folder; returns both seq-0 nodes and its path."""
    store, good, bad = Store(root), Node.start("proj.bad.good"), Node.start("proj.bad.bad")
    with store.writer() as w:
        w.write(good, {"train/loss": 1.0})
        w.write(bad, {"train/loss": 2.0})
    folder = f"{root}/log/name={bad.name}/nonce={bad.nonce}"
    [segment] = os.listdir(folder)
    path = f"{folder}/s-9999999999999999999-badfile0-000000.parquet"
    if kind == "fifo":
        os.mkfifo(path)
    else:
        with open(f"{folder}/{segment}", "rb") as f:
            data = f.read(100)
        with open(path, "wb") as f:
            f.write(data)
    return good, bad, path


@pytest.mark.parametrize("kind", ["fifo", "truncated"])
def test_runs_shows_the_other_runs_and_names_the_bad_file(tmp_path, kind):
    good, bad, path = root_with_bad_run(tmp_path, kind)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        frame = within(30, lambda: Store(tmp_path).runs())
    assert frame["nonce"].to_list() == [good.nonce]
    assert any(issubclass(w.category, UnreadableRun) and os.path.basename(path) in str(w.message) for w in caught)


@pytest.mark.parametrize("kind", ["fifo", "truncated"])
def test_queries_of_other_runs_answer_and_the_bad_run_names_its_file(tmp_path, kind):
    good, bad, path = root_with_bad_run(tmp_path, kind)
    store = Store(tmp_path)
    assert within(30, lambda: store.find().nonce(good.nonce).select(keys=["train/loss"])) == [{"train/loss": 1.0}]
    assert within(30, lambda: store.find().name(good.name).all()) == [good]
    with pytest.raises(CorruptSegment, match=os.path.basename(path)):
        within(30, lambda: store.find().nonce(bad.nonce).select(keys=["train/loss"]))


@pytest.mark.parametrize("kind", ["fifo", "truncated"])
def test_writers_of_the_root_are_not_blocked_by_a_bad_segment(tmp_path, kind):
    good, bad, path = root_with_bad_run(tmp_path, kind)

    def write() -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UnreadableRun)
            with Store(tmp_path).writer() as w:  # a new writer of the root, a new run
                w.write(Node.start("proj.bad.new"), {"train/loss": 3.0, "fresh/key": 1})
            with Store(tmp_path).writer() as w:  # another run, and the bad run itself
                w.write(good.next(), {"train/loss": 0.5})
                w.write(bad.next(), {"train/loss": 1.5})

    within(30, write)
    store = Store(tmp_path)
    assert store.find().nonce(good.nonce).select(keys=["train/loss"]) == [{"train/loss": 1.0}, {"train/loss": 0.5}]
    assert store.find().name("proj.bad.new").select(keys=["fresh/key"]) == [{"fresh/key": 1}]
