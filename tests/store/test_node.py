"""Node identity: ids, names, lineage."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from theseus.store import Node
from theseus.store.node import decode_id, encode_id

SEED_ID = "Z2VuZXJhbC5kZWZhdWx0LnRyYWluLWdwdDo5NDllODg6MA"


def test_seed_id_decodes():
    node = Node.from_id(SEED_ID)
    assert node == Node("general.default.train-gpt", "949e88", 0)
    assert node.id == SEED_ID


def test_start_and_next():
    a = Node.start("train-gpt")
    assert a.name == "general.default.train-gpt" and a.seq == 0 and a.parent is None
    assert len(a.nonce) == 6 and int(a.nonce, 16) >= 0
    b = a.next()
    assert (b.name, b.nonce, b.seq, b.parent) == (a.name, a.nonce, 1, a.id)
    assert len({Node.start("train-gpt").nonce for _ in range(50)}) > 45


def test_branch_parent():
    a = Node.start("x").next()
    b = Node.start("x", parent=a)
    assert b.parent == a.id and b.seq == 0 and b.name == a.name


@pytest.mark.parametrize("bad", ["a/b", "..", "a..b", "a=b", "", "a b", "a.b", "a.b.c.d", ".run", "run/../x"])
def test_bad_names(bad):
    with pytest.raises(ValueError):
        Node.start(bad)


@pytest.mark.parametrize("bad", ["", "!!!", "Zm9v", "Z2VuZXJhbC5kZWZhdWx0LnRyYWluLWdwdDo5NDllODg6LTE", SEED_ID + "$"])
def test_malformed_ids(bad):
    with pytest.raises(ValueError, match="malformed node id"):
        Node.from_id(bad)


def test_bad_nonce_and_seq():
    with pytest.raises(ValueError, match="nonce"):
        Node("a.b.c", "XYZ", 0)
    with pytest.raises(ValueError, match="seq"):
        Node("a.b.c", "949e88", -1)


names = st.from_regex(r"[a-z0-9][a-z0-9_\-]{0,10}\.[a-z0-9][a-z0-9_\-]{0,10}\.[a-z0-9][a-z0-9_\-]{0,10}",
                      fullmatch=True)


@given(names, st.from_regex(r"[0-9a-f]{6}", fullmatch=True), st.integers(0, 10**9))
def test_id_round_trip(name, nonce, seq):
    assert decode_id(encode_id(name, nonce, seq)) == (name, nonce, seq)


@given(names, st.from_regex(r"[0-9a-f]{6}", fullmatch=True),
       st.lists(st.integers(0, 10**18), max_size=64))  # both sides of _FEW_IDS
def test_encode_ids_matches_encode_id(name, nonce, seqs):
    from theseus.store.node import encode_ids

    assert encode_ids(name, nonce, np.array(seqs, np.int64)).to_pylist() == [encode_id(name, nonce, s) for s in seqs]


@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 2_000)), min_size=1, max_size=30))
def test_id_columns_match_each_nodes_ids(plan):
    """Any mix of next() chains (pending as seqs, as the writer keeps them), branch points and
    nodes read back, in any order, gets every id and parent right."""
    from theseus.store.node import lineage_columns
    from theseus.store.writer import split_runs

    start = Node.start("x")
    branch = Node.start("x", parent=start.id)
    made, entries = [], []
    for kind, seq in plan:
        if kind == 0:
            node = Node(start.name, start.nonce, seq).next()
        elif kind == 1:
            node = Node(start.name, start.nonce, seq, parent=branch.id)
        elif kind == 2:
            node = Node(start.name, start.nonce, seq)
        else:
            node = Node(start.name, start.nonce, seq * 10**12).next()
        made.append(node)
        entries.append(node.seq if kind in (0, 3) else node)  # the writer keeps next()'s nodes as seqs
    seqs, set_parents, rows_of = split_runs(entries, (start.name, start.nonce))
    assert rows_of == {(start.name, start.nonce): None}
    ids, parents = lineage_columns(start.name, start.nonce, seqs, set_parents)
    assert seqs.tolist() == [n.seq for n in made]
    assert ids.to_pylist() == [n.id for n in made]
    assert parents.to_pylist() == [n.parent for n in made]


def test_nodes_are_immutable_hashable_and_pickle():
    import copy
    import pickle

    a = Node.start("x").next()
    with pytest.raises(AttributeError):
        a.seq = 3
    b = pickle.loads(pickle.dumps(a))
    assert b == a and hash(b) == hash(a) and b.parent == a.parent and copy.deepcopy(a) is a
    assert {a, Node(a.name, a.nonce, 1, a.parent)} == {a}
    assert a != Node(a.name, a.nonce, 1) and a != (a.name, a.nonce, 1, a.parent)


def test_id_columns_refuse_a_previous_node_before_seq_0():
    from theseus.store.node import lineage_columns

    with pytest.raises(ValueError, match="seq 0 has no previous node"):
        lineage_columns("x.y.z", "949e88", np.array([0, 1]))  # seq 0 without its parent given
    ids, parents = lineage_columns("x.y.z", "949e88", np.array([0, 1]), {0: None})
    assert parents.to_pylist() == [None, ids[0].as_py()]
