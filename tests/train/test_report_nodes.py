"""The nodes of a training run with report, validation and checkpoint intervals that do not divide
each other: every node carries its position (``train/step``, ``train/tokens``), and the seeds' and
the README's "resume the lowest-loss checkpoint" queries pick the lowest-loss checkpoint."""

from __future__ import annotations

import pytest

from tests.train._helpers import pretrain
from theseus.quick import quick
from theseus.store import Store

STEPS = 13
TOKENS_PER_STEP = 8 * 32
LOGGING = {"report_interval": 3, "validation_interval": 5, "checkpoint_interval": 4}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("intervals"))
    return root, pretrain(root, "intervals", STEPS, **LOGGING)


def test_every_node_of_a_training_run_carries_its_step_and_tokens(run):
    root, last = run
    rows = Store(root).find().nonce(last.nonce).frame().collect().to_dicts()
    assert [r["seq"] for r in rows] == sorted({0, *range(3, 14, 3), *range(5, 14, 5), *range(4, 14, 4), 13})
    for row in rows:
        assert row["train/step"] == row["seq"], row
        assert row["train/tokens"] == row["seq"] * TOKENS_PER_STEP, row
    assert {r["seq"] for r in rows if r["val/loss"] is not None} == {5, 10, 13}


def test_a_descending_loss_sort_resumes_the_lowest_loss_checkpoint(run):
    root, last = run
    store = Store(root)
    holders = store.find().nonce(last.nonce).checkpoint().has("train/loss").frame(keys=["train/loss"]).collect()
    best = holders.sort("train/loss")["seq"][0]
    assert set(holders["seq"]) == {12, 13}  # checkpoints at 4 and 8 report no loss
    with quick(root) as q:
        q.find().nonce(last.nonce).checkpoint().sort("train/loss", ascending=False).resume()  # the README's
        assert q.base.seq == best
        (q.find().nonce(last.nonce).checkpoint()  # the seeds'
         .where("train/tokens", "<=", TOKENS_PER_STEP * STEPS).where("train/grad_norm", ">=", 0)
         .sort("train/loss", ascending=False).resume())
        assert q.base.seq == best
