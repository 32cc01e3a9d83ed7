"""The writer's buffer and flush: any mix of runs, shapes, types and seq order in one flush reads back."""

import gc

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.store._segments import segment_files
from theseus.store import Node, Store

KEYS = {"f": ("x/f", st.floats(allow_nan=False, allow_infinity=False, width=64)),
        "i": ("x/i", st.integers(-(2**62), 2**62)),
        "s": ("x/s", st.text(max_size=5)),
        "b": ("x/b", st.booleans())}
record = st.tuples(
    st.integers(0, 2),  # lineage: a run, a branch of it, another run
    st.integers(0, 6),  # seq
    st.booleans(),  # reach the node through next() (lazy parent id) or build it by hand
    st.dictionaries(st.sampled_from(sorted(KEYS)), st.integers(0, 10**6), min_size=1),
)


def node_at(start: Node, seq: int, chained: bool) -> Node:
    if not chained:
        return Node(start.name, start.nonce, seq,
                    start.parent if seq == 0 else Node(start.name, start.nonce, seq - 1).id)
    node = start
    for _ in range(seq):
        node = node.next()
    return node


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(plan=st.lists(record, min_size=1, max_size=25), data=st.data())
def test_one_flush_of_mixed_runs_shapes_and_seq_order_reads_back(tmp_path_factory, plan, data):
    store = Store(tmp_path_factory.mktemp("writer"))
    a = Node.start("p")
    starts = [a, Node.start("p", parent=a.next().id), Node.start("q")]
    expected: dict[Node, dict] = {}
    with store.writer(flush_interval=60) as w:  # one flush, at close
        for lineage, seq, chained, picks in plan:
            node = node_at(starts[lineage], seq, chained)
            values = {KEYS[k][0]: data.draw(KEYS[k][1]) for k in picks}
            w.write(node, values)
            expected.setdefault(node, {}).update(values)
    for start in starts:
        mine = {n: v for n, v in expected.items() if n.nonce == start.nonce}
        if not mine:
            continue
        assert store.find().nonce(start.nonce).all() == sorted(mine, key=lambda n: n.seq)
        for node, values in mine.items():
            got = store.record(node)
            assert got["parent"] == node.parent
            assert {k: got[k] for k in values} == values


def test_pending_records_of_a_next_chain_hold_no_collected_objects(tmp_path):
    """A buffered record of the writer's lineage made by next() keeps nothing the garbage
    collector must walk (only its seq), so a training loop triggers no collections."""
    store = Store(tmp_path)
    keys = [f"k{i}" for i in range(8)]
    with store.writer(flush_interval=60) as w:
        node = Node.start("gc")
        w.write(node, dict.fromkeys(keys, 0.5))
        gc.collect()
        before = len(gc.get_objects())
        for step in range(4000):
            node = node.next()
            w.write(node, {k: step + 0.5 for k in keys})
        gc.collect()
        grown = len(gc.get_objects()) - before
    assert grown < 100, grown  # an object kept per record would grow by thousands
    assert store.find().nonce(node.nonce).last() == node
    assert [n.parent for n in store.find().nonce(node.nonce).all()[:2]] == [None, Node(node.name, node.nonce, 0).id]


def test_pending_records_of_other_lineages_keep_their_nodes(tmp_path):
    """Nodes of a second lineage, a branch, or built by hand are kept whole and read back with their parents."""
    store = Store(tmp_path)
    a = Node.start("main")
    branch = Node.start("main", parent=a.next().id)
    other = Node.start("other")
    written = [a, a.next(), other, branch, a.next().next(), other.next(), branch.next(),
               Node(a.name, a.nonce, 7, other.id)]
    with store.writer(flush_interval=60) as w:
        for i, node in enumerate(written):
            w.write(node, {"k": float(i)})
    for node in written:
        got = store.record(node)
        assert (got["parent"], got["k"]) == (node.parent, float(written.index(node))), node


def test_keys_first_seen_as_floats_still_check_each_value(tmp_path):
    """Keys once written with float values only are looked up by their names alone; a later
    int, bool, string or array under those keys still goes through the full check."""
    import io

    import numpy as np
    import pyarrow.parquet as pq
    import pytest

    store = Store(tmp_path)
    n = Node.start("proj.writer.floats")
    with store.writer() as w:
        w.write(n, {"a": 1.0, "b": 2.0})
        w.write(n, {"a": 1.5, "b": 2.5})  # the keys-only lookup
        w.write(n.next(), {"a": 3, "b": 4.0})  # an int: kept in the int column
        with pytest.raises(ValueError, match="'a' holds float values; got str"):
            w.write(n.next().next(), {"a": "x", "b": 5.0})
        with pytest.raises(ValueError, match="'a' holds float values; got bool"):  # a float to struct, not to the check
            w.write(n.next().next(), {"a": True, "b": 5.0})
        with pytest.raises(ValueError, match=r"store\.objects"):
            w.write(n.next().next(), {"a": np.zeros(3), "b": 5.0})
        w.write(n.next().next(), {"a": np.float32(0.5), "b": 6.0})  # a numpy float: converted, read as 0.5
    assert store.find().nonce(n.nonce).select(keys=["a", "b"]) == [{"a": 1.5, "b": 2.5}, {"a": 3.0, "b": 4.0},
                                                                   {"a": 0.5, "b": 6.0}]
    (path,) = segment_files(store)
    table = pq.read_table(io.BytesIO(store.fs.cat_file(path)))
    assert [v for v in table["int"].to_pylist() if v is not None] == [3]
