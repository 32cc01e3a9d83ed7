"""Composed training jobs: parts replaced one at a time, mixtures, code overrides, evaluation and analysis hooks."""

from __future__ import annotations

import math
import os

import jax.numpy as jnp
import numpy as np
import pytest
from omegaconf import OmegaConf

from tests.train._helpers import VOCAB, config, write_dataset, write_padded
from theseus.audit import gc
from theseus.jobs import job
from theseus.quick import quick
from theseus.store import Store
from theseus.train import losses, optimizers, schedules
from theseus.train.evaluations import Analysis
from theseus.train.jobs import Pretrain
from theseus.train.recipe import Recipe, Sampling, as_recipe


@pytest.fixture
def mixed_root(tmp_path):
    write_dataset(tmp_path, name="fineweb", tokens=20_000)
    write_dataset(tmp_path, name="prose", tokens=20_000, seed=3)
    write_padded(tmp_path)
    return str(tmp_path)


@job("tests/train/mix", "A 70/30 mixture of contiguous and padded data with Lion and a cosine schedule.")
class Mix(Pretrain):
    DATA = [Sampling("prose", 0.7), Sampling("chat", 0.3)]
    OPTIMIZER = optimizers.Lion
    SCHEDULE = schedules.Cosine


@job("tests/train/plus-one", "Pretrain whose per-token loss is cross-entropy plus one.")
class PlusOne(Pretrain):
    def loss(self, config):
        base = super().loss(config)
        return lambda logits, targets: base(logits, targets) + 1.0


@job("tests/train/flat", "Pretrain of a model whose logits are all zero.")
class Flat(Pretrain):
    def model(self, config):
        import flax.linen as nn

        class Zeroed(nn.Module):
            inner: nn.Module

            def __call__(self, idx, deterministic=True):
                return self.inner(idx, deterministic=deterministic) * 0.0

        return Zeroed(super().model(config))


class Norms(Analysis):
    """Writes the parameter count as a scalar and the embedding as a .npy file."""

    @classmethod
    def run(cls, context):
        import io

        buffer = io.BytesIO()
        np.save(buffer, np.asarray(context.params["wte"]["embedding"]))
        context.write("wte.npy", buffer.getvalue())
        return {"analysis/step": context.step}


@job("tests/train/analysed", "Pretrain with an analysis that writes a file.")
class Analysed(Pretrain):
    ANALYSIS = [Norms]


def small(**sections):
    """A 4-step run reporting every step, validating and checkpointing every 2; ``sections`` update it."""
    cfg = config(training={"tokens": 8 * 32 * 4},
                 logging={"report_interval": 1, "checkpoint_interval": 2, "validation_interval": 2})
    for section, values in sections.items():
        cfg.setdefault(section, {}).update(values)
    return cfg


def mixed(**sections):
    """`small` for a job whose cosine schedule has no decay_pct."""
    cfg = small(**sections)
    cfg["optimization"].pop("decay_pct", None)
    return cfg


def run(root, key, cfg, name="run"):
    with quick(root) as q:
        q.build(key, name)
        q.config.merge_with(OmegaConf.create(cfg))
        job = q.create()
        job()
    return job


def records(root, nonce):
    return {n.seq: Store(root).record(n) for n in Store(root).find().nonce(nonce).all()}


def test_pretrain_config_keeps_the_seed_sections_and_adds_loss():
    cfg = OmegaConf.structured(Pretrain.Config)
    assert list(cfg) == ["architecture", "eval", "tokenizer", "data", "optimization", "training", "logging",
                         "shard", "loss"]
    assert list(cfg.optimization) == ["weight_decay", "beta1", "beta2", "lr", "warmup_pct", "decay_pct",
                                      "final_lr_frac"]
    assert cfg.data.dataset == "fineweb" and cfg.loss.z_loss == 0.0


def test_a_subclass_replaces_one_part_at_a_time():
    cfg = OmegaConf.structured(Mix.Config)
    assert list(cfg.optimization) == [f.name for f in __import__("dataclasses").fields(optimizers.Lion.Config)] + [
        f.name for f in __import__("dataclasses").fields(schedules.Cosine.Config)
        if f.name not in {g.name for g in __import__("dataclasses").fields(optimizers.Lion.Config)}]
    assert [dict(s) for s in cfg.data.mixture] == [{"dataset": "prose", "rate": 0.7}, {"dataset": "chat", "rate": 0.3}]
    assert "dataset" not in cfg.data
    assert Mix.MODEL is Pretrain.MODEL and Mix.LOSS is Pretrain.LOSS  # the rest is inherited
    with pytest.raises(AttributeError, match="dataset"):  # struct mode: a mixture job has no data.dataset
        with quick("/tmp/unused-root") as q:
            q.build("tests/train/mix", "x").config.data.dataset = "fineweb"


def test_a_bad_part_is_refused_at_class_definition():
    with pytest.raises(TypeError, match="OPTIMIZER must be a theseus.train.optimizers.Optimizer subclass"):
        class Bad(Recipe):
            OPTIMIZER = schedules.WSD
    with pytest.raises(TypeError, match="DATA must be None or a non-empty list of Sampling"):
        class Empty(Recipe):
            DATA = []
    with pytest.raises(ValueError, match="names a dataset twice"):
        class Twice(Recipe):
            DATA = [Sampling("a", 1), Sampling("a", 2)]


def test_composed_job_trains_resumes_and_reports_each_source(mixed_root):
    first = run(mixed_root, "tests/train/mix", mixed(optimization={"lr": 1e-3}))
    nonce = first.node.nonce
    got = records(mixed_root, nonce)
    assert sorted(got) == [0, 1, 2, 3, 4]
    for seq in (2, 4):  # validation steps: the mixture's val/loss and one per source
        assert {"val/loss", "val/prose/loss", "val/chat/loss"} <= set(got[seq])
    assert "val/prose/loss" not in got[1]
    lrs = [got[s]["train/lr"] for s in (1, 2, 3, 4)]
    assert lrs == sorted(lrs, reverse=True) or lrs[0] <= lrs[1]  # warmup then cosine decay
    assert all(math.isfinite(got[s]["train/loss"]) for s in (1, 2, 3, 4))
    assert got[0]["_job"] == "tests/train/mix"

    with quick(mixed_root) as q:  # the checkpoint of step 2 resumes into the same batches and losses
        q.find().nonce(nonce).seq(2).resume()
        q.build()
        resumed = q.create()
        assert resumed.trainer.step == 2 and type(resumed) is Mix
        resumed.tick()
        again = q.find().nonce(nonce).seq(3).all()
    assert len(again) == 1
    branch = Store(mixed_root).find().nonce(resumed.node.nonce).all()
    assert Store(mixed_root).record(branch[-1])["train/loss"] == pytest.approx(got[3]["train/loss"], rel=1e-5)


def test_mixture_batches_follow_the_rates_and_the_padding_mask(mixed_root):
    with quick(mixed_root) as q:
        q.build("tests/train/mix", "m").config.merge_with(OmegaConf.create(mixed()))
        job = q.create()
    loader = job.trainer.loader
    sources = np.concatenate([loader.source(k) for k in range(400)])
    share = np.bincount(sources, minlength=2) / sources.size
    assert abs(share[0] - 0.7) < 0.01 and abs(share[1] - 0.3) < 0.01
    batch = job.batch()
    chat = loader.source(0) == 1
    assert chat.any() and not batch["padding_mask"][chat].all()  # padded rows mask their prompt and padding
    assert batch["padding_mask"][~chat].all()
    assert batch is job.batch()
    job.tick()
    assert job.batch() is not batch


def test_missing_dataset_of_a_mixture_names_its_tokenize_job(tmp_path):
    write_dataset(tmp_path, name="prose", tokens=5000)
    with pytest.raises(FileNotFoundError, match="data/tokenize/chat"):
        run(str(tmp_path), "tests/train/mix", mixed())
    assert Store(str(tmp_path)).find().all() == []


def test_a_loss_override_shows_in_the_logged_loss(tmp_path):
    write_dataset(tmp_path)
    plain = records(str(tmp_path), run(str(tmp_path), "gpt/train/pretrain", small(), "plain").node.nonce)
    plus = records(str(tmp_path), run(str(tmp_path), "tests/train/plus-one", small(), "plus").node.nonce)
    assert plus[1]["train/loss"] == pytest.approx(plain[1]["train/loss"] + 1.0, abs=1e-5)
    # a constant has no gradient: the same params, validated with the job's loss
    for key in ("val/loss", "val/fineweb/loss"):
        assert plus[2][key] == pytest.approx(plain[2][key] + 1.0, abs=1e-5)


def test_a_model_override_shows_in_the_logged_loss(tmp_path):
    write_dataset(tmp_path)
    flat = records(str(tmp_path), run(str(tmp_path), "tests/train/flat", small(), "flat").node.nonce)
    assert flat[1]["train/loss"] == pytest.approx(math.log(VOCAB), abs=1e-4)  # uniform logits


def test_z_loss_adds_its_term(tmp_path):
    write_dataset(tmp_path)
    plain = records(str(tmp_path), run(str(tmp_path), "gpt/train/pretrain", small(), "plain").node.nonce)
    z = records(str(tmp_path), run(str(tmp_path), "gpt/train/pretrain", small(loss={"z_loss": 1e-2}), "z").node.nonce)
    assert z[1]["train/loss"] > plain[1]["train/loss"]
    with pytest.raises(ValueError, match="z_loss must be non-negative"):
        run(str(tmp_path), "gpt/train/pretrain", small(loss={"z_loss": -1.0}), "bad")


def test_analysis_writes_scalars_and_files_that_gc_keeps(tmp_path):
    write_dataset(tmp_path)
    root = str(tmp_path)
    nonce = run(root, "tests/train/analysed", small(logging={"checkpoint_interval": 100})).node.nonce
    store = Store(root)
    got = records(root, nonce)
    assert got[2]["analysis/step"] == 2 and got[4]["analysis/step"] == 4 and "analysis/step" not in got[1]
    node = store.find().nonce(nonce).seq(2).last()
    path = os.path.join(root, "objects", node.id, "analysis", "wte.npy")
    assert np.load(path).shape == (VOCAB, 32)
    assert got[2]["_artifacts"] == f"objects/{node.id}"
    assert "_checkpoint" not in got[2]  # no checkpoint at step 2: the record alone keeps the folder
    report = gc(root, min_age_s=0)
    assert f"objects/{node.id}" not in report.deleted and os.path.exists(path)
    # a checkpoint of that node (a save at step 4, the last step) leaves the analysis files alone
    last = store.find().nonce(nonce).seq(4).last()
    assert os.path.exists(os.path.join(root, "objects", last.id, "analysis", "wte.npy"))
    assert os.path.exists(os.path.join(root, "objects", last.id, "MANIFEST.json"))


def test_training_analyze_and_evaluate_turn_the_hooks_off(tmp_path):
    write_dataset(tmp_path)
    root = str(tmp_path)
    nonce = run(root, "tests/train/analysed", small(training={"analyze": False, "evaluate": False})).node.nonce
    got = records(root, nonce)
    assert "analysis/step" not in got[2] and "val/fineweb/loss" not in got[2] and "val/loss" in got[2]


@pytest.mark.parametrize("setting, message", [
    ({"eval": {"length": 0}}, "eval.length must be -1 (all examples) or a positive integer, got 0"),
    ({"logging": {"remote": True, "remote_backend": "mlflow"}}, "unknown mirror backend 'mlflow'"),
    ({"architecture": {"instrumentation": {"residual": True}}},
     "architecture.instrumentation.residual=True does nothing here"),
    ({"training": {"warmup_pct": 0.2}}, "training.warmup_pct=0.2 is not read by the schedule: "
                                        "the learning-rate schedule reads optimization.warmup_pct"),
    ({"training": {"decay_pct": 0.5}}, "training.decay_pct=0.5 is not read by the schedule"),
])
def test_settings_that_do_nothing_are_refused(tmp_path, setting, message):
    write_dataset(tmp_path, tokens=5000)
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        run(str(tmp_path), "gpt/train/pretrain", config(**setting))
    assert Store(str(tmp_path)).find().all() == []  # refused before anything was written


def test_a_cosine_schedule_without_decay_pct_refuses_training_decay_pct(tmp_path):
    write_dataset(tmp_path, tokens=5000)
    with pytest.raises(ValueError, match="training.decay_pct=0.5 is not implemented for this job's schedule"):
        run(str(tmp_path), "tests/train/mix", mixed(training={"decay_pct": 0.5}))


def test_recipe_hooks_build_the_parts():
    from theseus.train.config import load_config

    cfg = load_config(None, Mix.Config)
    mix = as_recipe(Mix)
    opt = mix.optimizer(cfg, 100)
    params = {"w": jnp.ones((2, 2))}
    updates, _ = opt.update({"w": jnp.ones((2, 2))}, opt.init(params), params)
    assert np.allclose(np.abs(np.asarray(updates["w"])), np.abs(np.asarray(updates["w"]))[0, 0])  # Lion: sign * lr
    assert mix.sources(cfg) == [Sampling("prose", 0.7), Sampling("chat", 0.3)]
    assert mix.loss(cfg) is losses.CrossEntropy.build(cfg.loss)  # z_loss 0: plain cross-entropy


def test_a_mixture_is_edited_like_any_config_key():
    from theseus.config import ConfigError, apply_overrides, structured

    cfg = structured(Mix.Config)
    assert apply_overrides(cfg.copy(), ["data.mixture.0.rate=0.4"]).data.mixture[0].rate == 0.4
    whole = apply_overrides(cfg.copy(), ["data.mixture=[{dataset: pydoc, rate: 2}]"])
    assert [(s.dataset, s.rate) for s in whole.data.mixture] == [("pydoc", 2.0)]
    for bad, message in [("data.mixture.5.rate=1", "unknown config key 'data.mixture.5.rate'"),
                         ("data.mixture.0.rate=fast", "could not be converted"),
                         ("data.mixture=[{datset: pydoc}]", "datset")]:
        with pytest.raises(ConfigError, match=message):
            apply_overrides(cfg.copy(), [bad])


def test_per_dataset_validation_is_off_with_validation(mixed_root):
    nonce = run(mixed_root, "tests/train/mix", mixed(training={"validation": False})).node.nonce
    got = records(mixed_root, nonce)
    assert not any(key.startswith("val/") for seq in got for key in got[seq])
