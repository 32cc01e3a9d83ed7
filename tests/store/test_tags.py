"""`find().tag(x)`: the runs whose latest tag set holds x, from the log and from a compacted view alike."""

from __future__ import annotations

import pytest

from theseus.store import Node, Store, marks


def make(root) -> tuple[Store, Node, Node]:
    store = Store(str(root))
    a, b = Node.start("p.g.a"), Node.start("p.g.b")
    with store.writer() as w:
        for node in (a, b):
            w.write(node, {"train/loss": 1.0})
            w.write(node.next(), {"train/loss": 0.5})
    return store, a, b


@pytest.mark.parametrize("compacted", [False, True])
def test_tag_selects_the_runs_tagged_now(tmp_path, compacted):
    store, a, b = make(tmp_path)
    marks.mark(store, a.nonce, tags=["baseline", "keep"])
    marks.mark(store, b.nonce, tags=["keep"])
    if compacted:
        store.compact()
        store = Store(str(tmp_path))  # a reader that finds the view
    assert {n.nonce for n in store.find().tag("keep").all()} == {a.nonce, b.nonce}
    assert [n.seq for n in store.find().tag("baseline").all()] == [0, 1]
    assert store.find().tag("baseline").tag("keep").select(keys=["train/loss"]) == [
        {"train/loss": 1.0}, {"train/loss": 0.5}]
    marks.mark(store, a.nonce, untag=["baseline"])  # a newer record over the view's
    assert store.find().tag("baseline").all() == []
    assert {n.nonce for n in Store(str(tmp_path)).find().tag("keep").all()} == {a.nonce, b.nonce}


def test_tags_in_store_runs_and_a_bad_tag(tmp_path):
    store, a, _ = make(tmp_path)
    marks.mark(store, a.nonce, tags=["x"], note="why", hidden=True)
    row = store.runs().filter(nonce=a.nonce).row(0, named=True)
    assert marks.marks_of(row) == {"tags": ["x"], "note": "why", "hidden": True}
    with pytest.raises(ValueError, match="invalid tag"):
        store.find().tag("has space")
    with pytest.raises(ValueError, match="invalid tag"):
        marks.mark(store, a.nonce, tags=["ok", "no/slash"])
    assert marks.marks_of(store.runs().filter(nonce=a.nonce).row(0, named=True))["tags"] == ["x"]


def test_concurrent_taggers_each_keep_their_tag(tmp_path):
    import threading

    store, a, _ = make(tmp_path)
    tags = [f"t{i}" for i in range(4)]
    threads = [threading.Thread(target=marks.mark, args=(Store(str(tmp_path)), a.nonce), kwargs={"tags": [t]})
               for t in tags]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert marks.tags_of(Store(str(tmp_path)).run_record(a.nonce)["_tags"]) == tags
