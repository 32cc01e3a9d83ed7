"""``latest()`` is the seeds' walkthrough: every matching node once, at its latest record, the runs
interleaved by seq; ``newest()`` is the one most recently written node."""

from __future__ import annotations

from theseus.store import Node, Store


def two_runs(store: Store) -> tuple[Node, Node]:
    """Two lineages of train-gpt (7 and 3 nodes) written alternately; a node of the long one
    rewritten after both; then a node of another run."""
    a, b = Node.start("train-gpt"), Node.start("train-gpt")
    with store.writer() as w:
        for i in range(7):
            w.write(a, {"train/loss": 10.0 - i})
            if i < 3:
                w.write(b, {"train/loss": 20.0 - i})
                b = b.next() if i < 2 else b
            a = a.next() if i < 6 else a
    with store.writer() as w:
        w.write(Node(a.name, a.nonce, 2), {"train/loss": 0.5})
    return a, b


def test_latest_lists_every_node_of_both_runs_by_seq_as_the_seed_prints(tmp_path):
    store = Store(tmp_path)
    a, b = two_runs(store)
    with store.writer() as w:
        w.write(Node.start("other"), {"train/loss": 1.0})
    found = store.find().spec(run="train-gpt").latest().all()
    expected = sorted([(s, a.nonce) for s in range(7)] + [(s, b.nonce) for s in range(3)])
    assert [(n.seq, n.nonce) for n in found] == expected
    assert len(set(found)) == len(found) == 10
    rows = store.find().spec(run="train-gpt").latest().select(keys=["train/loss"])
    by_node = dict(zip(((n.nonce, n.seq) for n in found), rows))
    assert by_node[(a.nonce, 2)] == {"train/loss": 0.5}  # its latest record


def test_newest_is_the_most_recently_written_node(tmp_path):
    store = Store(tmp_path)
    a, b = two_runs(store)
    assert store.find().spec(run="train-gpt").newest().all() == [Node(a.name, a.nonce, 2, Node(a.name, a.nonce, 1).id)]
    assert store.find().nonce(b.nonce).newest().first().seq == 2
    assert [n.seq for n in store.find().nonce(a.nonce).sort("train/loss").latest().limit(2).all()] == [2, 6]
