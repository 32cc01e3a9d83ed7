"""A sort on a key ranks only the nodes that hold it: first() and last() after a sort, in either
direction, are nodes with the key."""

from __future__ import annotations

import pytest

from theseus.store import EmptyResult, Node, Store


@pytest.fixture
def store(tmp_path):
    store, n = Store(tmp_path), Node.start("r")
    with store.writer() as w:
        for values in ({"train/loss": 3.0}, {"val/loss": 9.0}, {"train/loss": 1.0}, {"train/tokens": 30}):
            w.write(n, values)
            n = n.next()
    return store


def test_a_descending_sort_ends_at_the_lowest_value_not_at_a_node_without_the_key(store):
    assert store.find().sort("train/loss", ascending=False).last().seq == 2
    assert store.find().sort("train/loss", ascending=False).first().seq == 0
    assert store.find().sort("train/loss").last().seq == 0
    assert [n.seq for n in store.find().sort("train/loss").all()] == [2, 0]


def test_a_sort_keeps_only_the_holders_of_its_key_whatever_is_selected(store):
    assert store.find().sort("train/loss").select(keys=["val/loss", "train/loss"]) == [
        {"val/loss": None, "train/loss": 1.0}, {"val/loss": None, "train/loss": 3.0}]
    assert [n.seq for n in store.find().sort("val/loss").sort("train/loss").all()] == []
    with pytest.raises(EmptyResult):
        store.find().sort("train/tokens").where("train/tokens", ">", 30).last()
    assert [n.seq for n in store.find().sort("train/tokens").limit(5).all()] == [3]
