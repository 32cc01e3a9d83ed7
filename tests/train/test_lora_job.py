"""``<family>/train/lora``: adapters trained over a frozen base through the composed trainer. The checkpoints hold the
adapters and their optimizer state only and name their base; a resume continues bit for bit; sampling reads base +
adapters; audit finds a missing base; settings a LoRA run cannot honour are refused."""

from __future__ import annotations

import json
import os

import jax
import numpy as np
import pytest

from tests.train._helpers import config, write_dataset
from theseus.quick import quick
from theseus.store import Store

LLAMA = {"n_embd": 32, "n_layers": 2, "n_head": 4, "n_kv_head": 2, "intermediate_size": 48, "block_size": 32,
         "vocab_size": 256, "dtype": {"activation": "float32"}}


def _lora(q, name, base, steps, **lora):
    cfg = config(architecture={}, training={"tokens": 8 * 32 * steps, "init_from": base},
                 logging={"report_interval": 1, "checkpoint_interval": 2, "validation_interval": 2})
    cfg["lora"] = {"rank": 4, "alpha": 8.0, **lora}
    q.build("llama/train/lora", name).config.merge_with(cfg)
    return q.create()


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """A root with the test dataset and a 4-step llama run (its last node: the base)."""
    root = str(tmp_path_factory.mktemp("lora"))
    write_dataset(root)
    with quick(root) as q:
        q.build("llama/train/pretrain", "base").config.merge_with(
            config(architecture=LLAMA, training={"tokens": 8 * 32 * 4}, logging={"checkpoint_interval": 4}))
        return root, q()


@pytest.fixture(scope="module")
def run(base):
    root, node = base
    with quick(root) as q:
        job = _lora(q, "adapt", node.nonce, 4)
        first = job.node
        last = job()
    return root, node, first, last


def _index(store, node):
    with open(os.path.join(store.objects(node), "checkpoint", "index.json")) as f:
        return [leaf["path"] for leaf in json.load(f)["leaves"]]


@pytest.mark.slow
def test_only_the_adapters_train_and_are_checkpointed_over_the_named_base(run):
    root, base, first, last = run
    store = Store(root)
    assert first.parent == base.id and last.seq == 4
    paths = _index(store, last)
    assert paths and all(p.startswith(("params/blocks_", "opt_state/", "step")) for p in paths)
    params = [p for p in paths if p.startswith("params/")]
    assert len(params) == 2 * 2 * 7 and all(p.endswith(("/lora_a", "/lora_b")) for p in params)
    assert not any("kernel" in p or "embed" in p for p in paths)  # the base is in no checkpoint, no moment
    with open(os.path.join(store.objects(last), "job.json")) as f:
        assert json.load(f)["adapts"] == base.id
    losses = [r["train/loss"] for r in store.find().nonce(first.nonce).has("train/loss").select(keys=["train/loss"])]
    assert len(losses) == 4 and losses[-1] != losses[0]
    assert abs(losses[0] - _base_loss(root, base)) < 1e-5  # fresh adapters (B = 0): step 1 is the base model's loss


def _base_loss(root, base):
    """The base checkpoint's mean loss on batch 0 of the data (what a LoRA run's first step sees)."""
    from theseus.model.gpt import loss_fn
    from theseus.replay.restore import restored_trainer

    trainer = restored_trainer(root, base)
    try:
        batch = trainer.loader.batch(0)
        logits = trainer.model.apply({"params": trainer.params}, jax.numpy.asarray(batch["x"]))
        return float(loss_fn(logits, jax.numpy.asarray(batch["y"]), jax.numpy.asarray(batch["padding_mask"])))
    finally:
        trainer.close()


@pytest.mark.slow
def test_a_resumed_lora_run_continues_bitwise_and_samples_base_plus_adapters(run):
    from theseus.model import lora
    from theseus.replay.restore import restored_trainer

    root, base, first, _ = run
    store = Store(root)
    straight = {r["seq"]: r["train/loss"] for r in store.find().nonce(first.nonce).has("train/loss")
                .frame().collect().iter_rows(named=True)}
    with quick(root) as q:
        q.find().nonce(first.nonce).seq(2).resume()
        job = q.build().create()
        branch = job.node
        job()
    resumed = store.find().nonce(branch.nonce).has("train/loss").select(keys=["train/loss"])
    assert [r["train/loss"] for r in resumed] == [straight[3], straight[4]]

    trainer = restored_trainer(root, first.nonce)
    try:
        model = trainer.model
        tokens = jax.numpy.asarray(np.arange(16)[None] % 256)
        merged = lora.merge(trainer.frozen, trainer.params, model.spec)
        expected = model.base.apply({"params": merged}, tokens)
        got = model.apply({"params": trainer.params}, tokens, frozen=trainer.frozen)
        assert float(jax.numpy.abs(got - expected).max()) < 1e-4
        [sample] = trainer.generate("a", max_new_tokens=4, temperature=0.0)
        assert len(sample.tokens) == 4
    finally:
        trainer.close()


@pytest.mark.slow
def test_audit_finds_a_lora_run_whose_base_is_gone(run, tmp_path):
    import shutil

    from theseus.audit import audit

    root, base, first, _ = run
    assert not [p for p in audit(root).problems if p.kind == "missing-base"]
    copy = str(tmp_path / "copy")
    shutil.copytree(root, copy)
    store = Store(copy)
    with store.writer() as w:  # the base's checkpoint retired, as retention would
        w.retire(base, "a test")
    found = [p for p in audit(copy).problems if p.kind == "missing-base"]
    assert found and base.id in found[0].message and first.nonce in found[0].path


@pytest.mark.parametrize("settings, match", [
    ({"training": {"init_from": ""}}, "set training.init_from"),
    ({"training": {"per_device_batch_size": -1}}, "autobatch"),
    ({"lora": {"rank": 0}}, "lora.rank"),
    ({"lora": {"targets": "no_such_proj"}}, "selects no projection"),
])
def test_settings_a_lora_run_cannot_honour_are_refused(base, settings, match):
    root, node = base
    with quick(root) as q:
        cfg = config(training={"tokens": 8 * 32, "init_from": node.nonce, **settings.get("training", {})})
        cfg["lora"] = settings.get("lora", {})
        q.build("llama/train/lora", "refused").config.merge_with(cfg)
        with pytest.raises(ValueError, match=match):
            q.create()


def test_lora_dropout_is_drawn_from_the_step_key_and_changes_training():
    from theseus.train.example import tiny_example
    from theseus.train.lora_jobs import LoraGpt
    from theseus.train.trainer import Trainer

    root, settings = tiny_example()
    base = Trainer(settings, root, peak_flops=1e12, progress=False).params

    def losses(dropout):
        trainer = Trainer({**settings, "lora": {"rank": 4, "dropout": dropout}}, root, recipe=LoraGpt.RECIPE(),
                          peak_flops=1e12, progress=False)
        trainer.freeze(base)
        try:
            return [trainer.tick()["train/loss"] for _ in range(3)]
        finally:
            trainer.close()

    plain, dropped = losses(0.0), losses(0.5)
    assert plain[0] == dropped[0]  # fresh adapters add nothing, dropped or not
    assert plain[1:] != dropped[1:] and dropped == losses(0.5)
