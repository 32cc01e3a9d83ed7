"""Helpers of the replay tests: a tiny pretraining run through the quick API, losses, state hashes."""

from __future__ import annotations

from tests.train._helpers import config, tree_hash, write_dataset
from theseus.quick import quick
from theseus.replay.verify import logged_losses
from theseus.store import Store

ROWS, BLOCK = 8, 32
TOKENS_PER_STEP = ROWS * BLOCK


def tiny_config(steps: int, checkpoint_interval: int = 4, layers: int = 2) -> dict:
    """The trainer tests' tiny GPT (``layers`` layers, 32 wide), ``steps`` steps, a report every step."""
    return config(architecture={"n_layers": layers}, training={"tokens": TOKENS_PER_STEP * steps},
                  logging={"report_interval": 1, "checkpoint_interval": checkpoint_interval,
                           "validation_interval": 100})


def train_run(root: str, steps: int = 8, checkpoint_interval: int = 4, layers: int = 2,
              with_data: bool = True) -> str:
    """Write the synthetic dataset (optionally) and train a fresh run of ``steps`` steps; its nonce."""
    if with_data:
        write_dataset(root)
    with quick(root) as q:
        q.build("gpt/train/pretrain", "train-gpt").config.merge_with(tiny_config(steps, checkpoint_interval, layers))
        job = q.create()
        job()
    return job.node.nonce


def continue_run(root: str, nonce: str, total_steps: int) -> tuple[dict[int, float], str, str]:
    """Resume the last checkpoint of run ``nonce`` in ``root`` with the budget raised to ``total_steps``,
    run it; ``({seq: train/loss} of the new nodes, params hash, whole-state hash)``."""
    with quick(root) as q:
        base = q.find().nonce(nonce).checkpoint().resume().base
        q.build()
        q.config.training.tokens = TOKENS_PER_STEP * total_steps
        job = q.create()
        job()
    assert job.node.nonce == nonce  # the same lineage goes on
    losses = logged_losses(Store(root), base)
    state = job.trainer.state
    return losses, tree_hash(state["params"]), tree_hash(state)
