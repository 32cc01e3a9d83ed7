"""``<family>/train/lora_dpo``: DPO whose policy is LoRA adapters over a frozen base and whose reference is that base
alone. Step 0 is log 2 (fresh adapters add zero), the margin grows, checkpoints hold the adapters only and name the
base, a resume continues bit for bit, the audit finds a missing base, and what it cannot do is refused."""

from __future__ import annotations

import json
import math
import os

import pytest

from tests.docstrings import examples_fail, names_without_examples
from tests.train.test_dpo import (  # noqa: F401 (base: a fixture)
    assert_refused,
    assert_resume_replays,
    base,
    dpo_config,
    over_a_llama,
    run_pinned,
)
from tests.train.test_lora_job import _index
from theseus.store import Store

LORA = {"rank": 4, "alpha": 8.0}


def lora_dpo_config(init_from, steps, **sections):
    """`dpo_config` with a ``lora`` section, at a rate adapters learn at in a few steps."""
    cfg = dpo_config(init_from, steps, **sections)
    cfg["lora"] = {**LORA, **cfg.get("lora", {})}
    cfg["optimization"] = {**cfg["optimization"], "lr": 1e-2}
    return cfg


@pytest.fixture(scope="module")
def straight(base):  # noqa: F811 (the imported fixture)
    root, last = base
    return root, last, run_pinned(root, "gpt/train/lora_dpo", "lora-dpo", lora_dpo_config(last.nonce, 12), last)


def _checkpoint_bytes(store, node):
    folder = os.path.join(store.objects(node), "checkpoint")
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(folder) for f in files)


@pytest.mark.slow
def test_a_lora_dpo_run_starts_at_log_2_and_its_margin_grows(straight):
    root, _, end = straight
    rows = Store(root).find().nonce(end.nonce).has("dpo/loss").select(
        keys=["train/step", "dpo/loss", "dpo/reward_margin", "dpo/accuracy"])
    assert [r["train/step"] for r in rows] == list(range(1, 13))
    assert abs(rows[0]["dpo/loss"] - math.log(2)) < 1e-6 and abs(rows[0]["dpo/reward_margin"]) < 1e-6
    margins = [r["dpo/reward_margin"] for r in rows]
    assert margins[-1] > margins[5] > margins[1] > 0 and rows[-1]["dpo/accuracy"] == 1.0
    assert Store(root).record(end)["val/loss"] < math.log(2)  # the held-out pairs moved too


@pytest.mark.slow
def test_its_checkpoints_hold_the_adapters_only_and_name_the_base(straight):
    root, base_node, end = straight
    store = Store(root)
    paths = _index(store, end)
    params = [p for p in paths if p.startswith("params/")]
    assert params and all(p.endswith(("/lora_a", "/lora_b")) for p in params)
    assert not any("kernel" in p or "embedding" in p for p in paths)  # the base is in no checkpoint, no moment
    with open(os.path.join(store.objects(end), "job.json")) as f:
        assert json.load(f)["adapts"] == base_node.id
    assert _checkpoint_bytes(store, end) < _checkpoint_bytes(store, base_node) / 4


@pytest.mark.slow
def test_a_resumed_lora_dpo_run_replays_the_same_steps_bit_for_bit(straight):
    root, _, end = straight
    assert_resume_replays(root, end, 8)


@pytest.mark.slow
def test_a_restored_node_reads_base_plus_adapters_and_audit_finds_a_missing_base(straight, tmp_path):
    import functools
    import shutil

    import numpy as np

    from theseus.audit import audit
    from theseus.replay.restore import restored_trainer
    from theseus.train.objective import plain_model

    root, base_node, end = straight
    tuned, source = restored_trainer(root, end.id), restored_trainer(root, base_node.id)
    try:
        frozen, start = (np.asarray(t["wte"]["embedding"]) for t in (tuned.frozen, source.params))
        assert np.array_equal(frozen, start)  # the base read back frozen beside the adapters
        model, merged = plain_model(tuned.model, tuned.params, tuned.frozen)  # what sampling decodes with
        kernel = ("blocks_0", "mlp", "c_fc", "kernel")
        assert model is tuned.model.base and sorted(merged) == sorted(tuned.frozen)
        assert not np.array_equal(*(np.asarray(functools.reduce(dict.get, kernel, t)) for t in (merged, tuned.frozen)))
    finally:
        tuned.close()
        source.close()
    assert not [p for p in audit(root).problems if p.kind == "missing-base"]
    copy = str(tmp_path / "copy")
    shutil.copytree(root, copy)
    with Store(copy).writer() as w:  # the base's checkpoint retired, as retention would
        w.retire(base_node, "a test")
    found = [p for p in audit(copy).problems if p.kind == "missing-base" and end.nonce in p.path]
    assert found and base_node.id in found[0].message and "LoRA adapters over the base" in found[0].message


@pytest.mark.slow
def test_a_decoder_family_runs_lora_dpo_and_exports_its_adapters_for_peft(base, tmp_path):  # noqa: F811
    from theseus.hf.peft import export_peft

    root, _ = base
    source, end, rows = over_a_llama(root, "llama/train/lora_dpo", "llama-lora-dpo",
                                     lambda node: lora_dpo_config(node, 2))
    assert abs(rows[0]["dpo/loss"] - math.log(2)) < 1e-6
    record = export_peft(root, end.id, str(tmp_path / "adapter"))
    assert record["export/peft/base"] == source.id
    assert sorted(os.listdir(tmp_path / "adapter")) == ["adapter_config.json", "adapter_model.safetensors"]


@pytest.mark.slow  # its fixture trains the run it names
def test_init_from_a_lora_checkpoint_is_refused_as_not_implemented(straight):
    root, _, end = straight
    assert_refused(root, "gpt/train/lora_dpo", lora_dpo_config(end.id, 4), {}, f"training.init_from={end.id} is a "
                   "LoRA checkpoint: DPO over LoRA continuing its adapters is not implemented")


@pytest.mark.parametrize("change, message", [
    ({"training": {"init_from": ""}}, "set training.init_from to its node id or nonce"),
    ({"data": {"dataset": "fineweb"}}, "dataset 'fineweb' holds no preference pairs"),
    ({"loss": {"z_loss": 1e-4}}, "loss.z_loss=0.0001 is not implemented for DPO runs"),
    ({"training": {"per_device_batch_size": 1}}, "a DPO step of 4 pairs cannot be split into 8 micro-batches"),
    ({"training": {"per_device_batch_size": -1}}, "autobatch"),
    ({"dpo": {"beta": 0.0}}, "dpo.beta must be a positive number"),
    ({"lora": {"rank": 0}}, "lora.rank"),
])
def test_what_a_lora_dpo_run_cannot_do_is_refused_before_it_starts(base, change, message):  # noqa: F811
    root, last = base
    assert_refused(root, "gpt/train/lora_dpo", lora_dpo_config(last.id, 4), change, message)


def test_docstring_examples():
    assert examples_fail("theseus.train.lora_dpo_jobs")[0] == 0
    assert names_without_examples("theseus.train.lora_dpo_jobs") == []
