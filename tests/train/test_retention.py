"""Checkpoint retention (``logging.keep_checkpoints`` / ``keep_best``): what a run keeps, what it retires, and that
resume, audit and gc still see a whole root."""

from __future__ import annotations

import os

import pytest

from tests.train._helpers import config, write_dataset
from theseus.audit import audit, gc
from theseus.quick import quick
from theseus.replay.restore import checkpoint_for
from theseus.store import Node, Store
from theseus.train.retention import Policy, Retention

STEPS = 8


def train(root, name, steps, **logging):
    """A fresh run of ``steps`` steps, a checkpoint and a validation every step; its nonce."""
    with quick(root) as q:
        q.build("gpt/train/pretrain", name).config.merge_with(config(
            training={"tokens": 8 * 32 * steps},
            logging={"report_interval": 1, "checkpoint_interval": 1, "validation_interval": 1, **logging}))
        return q().nonce


def losses(store, nonce):
    rows = store.find().nonce(nonce).has("train/loss").frame(keys=["train/loss"]).collect()
    return dict(rows.select("seq", "train/loss").iter_rows())


def complete_folders(store, nonce):
    """Seqs of the run whose object folder holds a complete checkpoint (its MANIFEST)."""
    nodes = store.find().nonce(nonce).all()
    return sorted(n.seq for n in nodes if os.path.exists(os.path.join(store.objects(n), "MANIFEST.json")))


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("retention"))
    write_dataset(root)
    return root


@pytest.fixture(scope="module")
def straight(root):
    """The default: every checkpoint kept."""
    return train(root, "straight", STEPS)


@pytest.mark.slow
def test_default_keeps_every_checkpoint(root, straight):
    store = Store(root)
    assert [n.seq for n in store.find().nonce(straight).checkpoint().all()] == list(range(1, STEPS + 1))
    assert complete_folders(store, straight) == list(range(1, STEPS + 1))


@pytest.mark.slow
def test_keeps_the_newest_and_the_best_and_records_the_rest(root):
    nonce = train(root, "kept", STEPS, keep_checkpoints=2, keep_best="val/loss", keep_best_mode="max")
    store = Store(root)
    values = {r["seq"]: r["val/loss"] for r in store.find().nonce(nonce).frame(keys=["val/loss"]).collect()
              .iter_rows(named=True)}
    worst = max(values, key=lambda s: (values[s], s))  # mode max: the highest validation loss is "best"
    kept = sorted({STEPS - 1, STEPS, worst})
    assert [n.seq for n in store.find().nonce(nonce).checkpoint().all()] == kept
    assert complete_folders(store, nonce) == kept
    for node in store.find().nonce(nonce).all():
        if node.seq == 0:
            continue
        record = store.record(node)
        assert record["_checkpoint"] == f"objects/{node.id}"  # append-only: every commit record stays
        assert ("_retired" in record) == (node.seq not in kept)
        if node.seq not in kept:
            assert "keep_checkpoints=2" in record["_retired"]
            assert not os.path.exists(os.path.join(store.objects(node), "checkpoint"))
    report = audit(root, nonce)
    assert report.ok, report.errors
    assert [c.seq for r in report.runs if r.nonce == nonce for c in r.checkpoints] == kept
    assert not gc(root, dry_run=True, min_age_s=0).retired  # the job cleared what it retired


@pytest.mark.slow
def test_resume_after_retention_is_bitwise_the_straight_run(root, straight):
    nonce = train(root, "resumed", 5, keep_checkpoints=2)
    store = Store(root)
    assert complete_folders(store, nonce) == [4, 5]
    with quick(root) as q:
        q.find().nonce(nonce).checkpoint().resume()
        q.config.training.tokens = 8 * 32 * STEPS  # the schedule is constant: the same steps as the straight run
        job = q.build().create()
        assert job.node.nonce == nonce  # the lineage's tip: it continues
        job()
    assert [n.seq for n in store.find().nonce(nonce).checkpoint().all()] == [STEPS - 1, STEPS]
    resumed, reference = losses(store, nonce), losses(store, straight)
    assert {s: resumed[s] for s in range(6, STEPS + 1)} == {s: reference[s] for s in range(6, STEPS + 1)}


@pytest.mark.slow
def test_a_retired_checkpoint_is_not_restored(root):
    nonce = train(root, "gone", 3, keep_checkpoints=1)
    store = Store(root)
    first = store.find().nonce(nonce).seq(1).first()
    with quick(root) as q:
        q.find().nonce(nonce).seq(1).resume()
        with pytest.raises(ValueError, match="retired"):
            q.build().create()
    assert store.record(first)["_retired"]
    # sample, eval, verify: a retired node is refused by name; a run's nonce takes its newest live checkpoint
    with pytest.raises(ValueError, match=r"its checkpoint was retired \(logging.keep_checkpoints=1\) "
                                         r"\(seqs with one: \[3\]\)"):
        checkpoint_for(store, first.id)
    assert checkpoint_for(store, nonce)[0].seq == 3


@pytest.mark.parametrize("logging, message", [
    ({"keep_checkpoints": 0}, "keep_checkpoints must be a positive integer"),
    ({"keep_checkpoints": -2}, "keep_checkpoints must be a positive integer"),
    ({"keep_checkpoints": 2, "keep_best": "val/loss", "keep_best_mode": "lowest"}, "keep_best_mode must be one of"),
    ({"keep_checkpoints": 2, "keep_best": "val/loss", "keep_best_count": 0}, "keep_best_count must be a positive"),
    ({"keep_best": "val/loss"}, "needs logging.keep_checkpoints"),
    ({"keep_checkpoints": 2, "keep_best_count": 3}, "need logging.keep_best"),
    ({"keep_checkpoints": 2, "keep_best": "_checkpoint"}, "logging.keep_best: invalid key"),
])
def test_bad_retention_settings_fail_before_anything_is_written(tmp_path, logging, message):
    write_dataset(tmp_path)
    with quick(str(tmp_path)) as q:
        q.build("gpt/train/pretrain", "bad").config.merge_with(config(logging=logging))
        with pytest.raises(ValueError, match=message):
            q.create()
    assert Store(tmp_path).find().all() == []


def test_a_checkpoint_another_lineage_starts_from_is_never_retired(tmp_path):
    store = Store(str(tmp_path))
    nodes = [Node("general.default.a", "a1b2c3", seq) for seq in range(5)]
    branch = Node("general.default.b", "d4e5f6", 0, nodes[1].id)  # a branch (or init_from) from seq 1
    retention = Retention(Policy(keep=1), store)
    with store.writer() as w:
        w.job(branch, "gpt/train/pretrain", "{}")
        retired = []
        for node in nodes[1:]:
            w.checkpoint(node, f"objects/{node.id}")
            retired += retention.committed(node, w)
    assert retired == [nodes[2].id, nodes[3].id]
    assert [n.seq for n in store.find().nonce("a1b2c3").checkpoint().all()] == [1, 4]
