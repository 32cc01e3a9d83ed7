"""A top-k over many runs read from the log folds only the runs that can hold its first nodes
(``theseus.store.topk``), and answers exactly what folding every run answers."""

import math

import pytest

from theseus.store import Node, Store, topk
from theseus.store.segments import CorruptSegment

RUNS = topk.MIN_RUNS + 6


def messy_root(root) -> Store:
    """RUNS runs of 4 nodes; run 0 has a superseded record lower than any value, run 1 logs int
    losses, run 2 NaN, run 3 rewrites a node from another writer, run 4 has nodes without loss,
    runs 10-19 tie at 0.25."""
    store = Store(root)
    nodes = [Node.start(f"proj.top.run-{r:03d}") for r in range(RUNS)]
    with store.writer() as w:
        for r, first in enumerate(nodes):
            node = first
            for i in range(4):
                if r == 1:
                    value = 3 + i  # an int key among floats
                elif r == 2 and i == 1:
                    value = float("nan")
                elif 10 <= r < 20:
                    value = 0.25
                else:
                    value = 1.0 + r / 100 + i / 1000
                w.write(node, {"loss": value, "tokens": 10 * i} if not (r == 4 and i % 2) else {"tokens": 10 * i})
                node = node.next()
        w.write(nodes[0], {"loss": -100.0})  # superseded below: raw, the lowest loss of the root
    with store.writer() as w:
        w.write(nodes[0], {"loss": 50.0})
        w.write(Node(nodes[3].name, nodes[3].nonce, 2), {"loss": -1.0})  # a rewrite that wins
    return store


QUERIES = {
    "top-10": lambda f: f.has("loss").sort("loss").limit(10),
    "top-10 desc": lambda f: f.has("loss").sort("loss", ascending=False).limit(10),
    "where": lambda f: f.where("loss", ">", 0.5).sort("loss").limit(5),
    "ties": lambda f: f.has("loss").sort("loss").limit(12),
    "no has, past the holders": lambda f: f.sort("loss").limit(4 * RUNS),
    "sort by another key": lambda f: f.has("loss").sort("tokens", ascending=False).limit(3),
    "finished only": lambda f: f.finished(False).has("loss").sort("loss").limit(7),
}


def test_a_pruned_top_k_answers_what_folding_every_run_answers(tmp_path, monkeypatch):
    store = messy_root(tmp_path)
    started = []
    real_start = topk.start
    monkeypatch.setattr(topk, "start", lambda *a, **k: started.append(a[1]) or real_start(*a, **k))
    proofs, real_proves = [], topk.proves
    monkeypatch.setattr(topk, "proves", lambda *a: proofs.append(real_proves(*a)) or proofs[-1])
    pruned = {name: (query(store.find()).select(keys=["loss", "tokens"]), query(Store(tmp_path).find()).all())
              for name, query in QUERIES.items()}
    keys = ["loss", "loss", "loss", "loss", "loss", "tokens", "loss"]
    assert started == [k for k in keys for _ in range(2)], "a query was not pruned"
    assert proofs[:2] == [True, True] and False in proofs  # top-10 proved; past the key's holders, folded all
    monkeypatch.setattr(topk, "MIN_RUNS", 10**9)  # every run folded
    for name, query in QUERIES.items():
        full = query(Store(tmp_path).find())
        assert repr(pruned[name][0]) == repr(full.select(keys=["loss", "tokens"])), name  # NaN == NaN in a repr
        assert pruned[name][1] == full.all(), name


def test_the_pruned_answers_hold_the_fold(tmp_path):
    store = messy_root(tmp_path)
    top = store.find().has("loss").sort("loss").limit(3).select(keys=["loss"])
    assert [r["loss"] for r in top] == [-1.0, 0.25, 0.25]  # run 0's superseded -100 is not a node's value
    desc = store.find().has("loss").sort("loss", ascending=False).limit(3).select(keys=["loss"])
    assert math.isnan(desc[0]["loss"]) and desc[1:] == [{"loss": 50.0}, {"loss": 6.0}]  # NaN first, then the int


def test_a_damaged_segment_is_named_by_a_pruned_query(tmp_path):
    store = messy_root(tmp_path)
    victim = store._index.segments()[5]
    with open(victim, "r+b") as f:
        f.truncate(100)
    with pytest.raises(CorruptSegment, match=victim.rsplit("/", 1)[-1]):
        Store(tmp_path).find().has("loss").sort("loss").limit(10).select(keys=["loss"])
