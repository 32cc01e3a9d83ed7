"""The trainer's extension points: hooks with a cadence, an objective with its own metrics, a frozen tree held
beside the params, a batch's optional keys reaching the model, the peak asked for explicitly, and a job that
holds its recipe."""

from __future__ import annotations

import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.train._helpers import config
from theseus.errors import BadInput
from theseus.train.jobs import Pretrain
from theseus.train.objective import TokenObjective
from theseus.train.recipe import Recipe


class Scored(TokenObjective):
    """Cross-entropy, reporting the mean token loss again as ``my/loss`` and reading the frozen tree's scale."""

    metrics = ("my/loss",)

    def __call__(self, forward, params, frozen, batch, rng):
        loss_sum, _ = super().__call__(forward, params, frozen, batch, rng)
        scale = 1.0 if frozen is None else frozen["gain"]
        return loss_sum * scale, {"my/loss": loss_sum * scale}


class ScoredRecipe(Recipe):
    def objective(self, config, loss):
        return Scored(loss)


def test_objective_metrics_are_reported_with_the_train_loss(make_trainer):
    reports = []
    trainer = make_trainer(config(logging={"report_interval": 1}), recipe=ScoredRecipe,
                           on_report=lambda step, m: reports.append(m))
    trainer.train(until=2)
    assert [m["my/loss"] == pytest.approx(m["train/loss"]) for m in reports] == [True, True]


def test_frozen_tree_reaches_the_objective_not_the_optimizer_nor_checkpoints(make_trainer, tmp_path):
    plain, frozen = make_trainer(recipe=ScoredRecipe), make_trainer(recipe=ScoredRecipe)
    frozen.freeze({"gain": jnp.float32(2.0)})
    assert frozen.tick()["train/loss"] == pytest.approx(2 * plain.tick()["train/loss"], rel=1e-5)
    assert sorted(frozen.state) == ["opt_state", "params", "step"]
    frozen.save(str(tmp_path / "ckpt"))
    frozen.wait()
    index = json.loads(open(tmp_path / "ckpt" / "MANIFEST.json").read())["files"]
    assert not [f["path"] for f in index if "gain" in f["path"]]


def test_optional_batch_keys_reach_the_forward():
    from theseus.model import GPT, GPTConfig
    from theseus.train.step import make_train_step

    seen = []

    def forward(params, frozen, batch, *, deterministic=True, rng=None):
        seen.append(sorted(batch))
        return model.apply({"params": params}, batch["x"], deterministic=deterministic)

    model = GPT(GPTConfig(n_embd=32, n_head=4, n_layers=1, vocab_size=64, block_size=8))
    import optax

    from theseus.train.step import init_state

    state = init_state(model, optax.sgd(0.1), jax.random.PRNGKey(0), 8)
    batch = {"x": jnp.zeros((4, 8), jnp.int32), "y": jnp.zeros((4, 8), jnp.int32),
             "padding_mask": jnp.ones((4, 8), bool), "positions": jnp.tile(jnp.arange(8), (4, 1)),
             "segment_ids": jnp.ones((4, 8), jnp.int32), "note": jnp.zeros((4, 8))}
    make_train_step(model, optax.sgd(0.1), 2, forward=forward)(state, batch, jax.random.PRNGKey(1))
    assert seen[0] == ["padding_mask", "positions", "segment_ids", "x", "y"]  # "note" is not a step's key


def test_hooks_run_at_their_cadence(make_trainer, tmp_path):
    trainer = make_trainer(config(training={"tokens": 8 * 32 * 5}, logging={"report_interval": 10,
                                                                            "checkpoint_interval": 100}))
    steps, reports, commits = [], [], []
    trainer.add_hook(lambda step: steps.append(step) or {"my/step": step}, every=2, on="step")
    trainer.add_hook(lambda step, m: reports.append((step, m.get("my/step"))), every=1)
    trainer.checkpoint_to(lambda step: str(tmp_path / f"step-{step}"))
    trainer.add_hook(lambda step, folder: commits.append(step), on="commit")
    trainer.train(until=3)
    assert steps == [2] and commits == [3]  # the checkpoint where train() stops
    assert reports == [(2, 2), (3, None)]
    with pytest.raises(BadInput, match="every"):
        trainer.add_hook(print, every=0)


def test_peak_is_measured_only_when_asked(make_trainer, data_root, tmp_path, monkeypatch):
    from theseus.train import mfu

    calls = []
    monkeypatch.setattr(mfu, "measure_cpu_peak", lambda dtype="float32", **k: calls.append(dtype) or 3e11)
    trainer = make_trainer(peak_cache=str(tmp_path / "peak"))
    assert calls == [] and not os.path.exists(tmp_path / "peak")
    assert trainer.measure_peak() == 3e11 and trainer.measure_peak() == 3e11
    assert calls == ["bfloat16"]


def test_unknown_setting_is_refused(make_trainer):
    with pytest.raises(BadInput, match="unknown settings"):
        make_trainer(peak_flop=1e12)


def test_a_job_holds_its_recipe_and_a_hook_override_moves_to_it():
    class Smooth(Pretrain):
        SMOOTHING = 0.5

        def loss(self, config):
            base = super().loss(config)
            return lambda logits, y: base(logits, y) * self.SMOOTHING

    assert not issubclass(Smooth, Recipe) and issubclass(Smooth.RECIPE, Pretrain.RECIPE)
    from theseus.train.config import load_config

    cfg = load_config(None, Smooth.Config)
    logits, y = jax.random.normal(jax.random.PRNGKey(0), (1, 2, 4)), jnp.zeros((1, 2), jnp.int32)
    assert np.allclose(Smooth.RECIPE().loss(cfg)(logits, y), 0.5 * Pretrain.RECIPE().loss(cfg)(logits, y))
    assert Smooth.Config is Smooth.RECIPE.Config
