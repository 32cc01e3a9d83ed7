"""A LoRA run on 8 CPU devices (subprocess): FSDP shards the frozen base and the adapters like params, trains like
one device, and its checkpoint restores onto one device over the same base."""

from __future__ import annotations

import numpy as np
import pytest

from tests.train._subproc import run_python

CODE = r"""
import sys, tempfile
sys.path.insert(0, {repo!r})
import jax
from tests.train._helpers import write_dataset, config
from theseus.train.lora_jobs import LoraGpt
from theseus.train.trainer import Trainer

root = tempfile.mkdtemp()
write_dataset(root, tokens=12_000)
settings = dict(architecture={{"dtype": {{"activation": "float32"}}}}, training={{"tokens": 8 * 32 * 6}},
                logging={{"report_interval": 1, "validation_interval": 100}})

def make(devices, per_device, recipe=None, **shard):
    cfg = config(**settings, shard=shard)
    cfg["training"]["per_device_batch_size"] = per_device
    if recipe is not None:
        cfg["lora"] = {{"rank": 4, "alpha": 8.0}}  # no dropout: its masks follow the micro-batch split
    return Trainer(cfg, root, devices=devices, recipe=recipe, peak_flops=1e12, progress=False)

base = jax.device_get(make(jax.devices()[:1], 4).params)  # host arrays: each trainer places them on its mesh
out = {{}}
one = make(jax.devices()[:1], 4, LoraGpt.RECIPE())
one.freeze(base)
out["single"] = [one.tick()["train/loss"] for _ in range(6)]
eight = make(jax.devices(), 1, LoraGpt.RECIPE(), fsdp=True)
eight.freeze(base)
out["fsdp"] = [eight.tick()["train/loss"] for _ in range(3)]
out["frozen_spec"] = [str(s) for s in eight.frozen["blocks_0"]["mlp"]["c_fc"]["kernel"].sharding.spec]
out["adapter_spec"] = [str(s) for s in eight.params["blocks_0"]["mlp"]["c_fc"]["lora_a"].sharding.spec]
out["devices"] = len(eight.frozen["blocks_0"]["mlp"]["c_fc"]["kernel"].sharding.device_set)
folder = tempfile.mkdtemp() + "/step-3"
eight.save(folder); eight.wait()
back = make(jax.devices()[:1], 4, LoraGpt.RECIPE())
back.restore(folder)
back.freeze(base)
out["restored"] = [back.tick()["train/loss"] for _ in range(3)]
emit(out)
"""


@pytest.mark.slow
def test_a_lora_run_shards_over_8_devices_and_restores_on_one():
    import pathlib

    repo = str(pathlib.Path(__file__).resolve().parents[2])
    out = run_python(CODE.format(repo=repo), devices=8, timeout=600)
    single = np.array(out["single"])
    np.testing.assert_allclose(out["fsdp"], single[:3], rtol=1e-5)
    np.testing.assert_allclose(out["restored"], single[3:], rtol=1e-5)
    assert "data" in out["frozen_spec"] and out["devices"] == 8  # the frozen base is sharded, not replicated
    assert out["adapter_spec"]
