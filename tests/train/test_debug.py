"""trainer.find / trainer.debug: module paths, captured arguments, eager bound layers."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from tests.train._helpers import ListLog, config
from theseus.model.layers.attention import CausalSelfAttention
from theseus.model.layers.block import Block
from theseus.model.layers.mlp import MLP


@pytest.fixture(scope="module")
def trained(data_root, peak_cache, _compilation_cache):
    from theseus.train.trainer import Trainer

    log = ListLog()
    trainer = Trainer(config(), data_root, log=log, peak_cache=peak_cache,
                      progress=False)
    trainer.tick()
    trainer.tick()
    return trainer, log


def test_find_lists_paths_in_forward_order(trained):
    trainer, _ = trained
    assert trainer.find(MLP) == [("blocks_0", "mlp"), ("blocks_1", "mlp")]
    assert trainer.find(CausalSelfAttention) == [("blocks_0", "attn"), ("blocks_1", "attn")]
    assert trainer.find(Block) == [("blocks_0",), ("blocks_1",)]
    assert trainer.find(int) == []  # a class no module is
    with pytest.raises(TypeError):
        trainer.find("MLP")


def test_debug_layer_recomputes_captured_output_bitwise(trained):
    trainer, log = trained
    trainer.find(MLP)
    before = len(log.records)
    layer, inputs = result = trainer.debug(("blocks_1", "mlp"))
    # micro-batch 0 of the next step: rows 0, 2, 4, 6 (accumulation 2)
    assert inputs.x.shape == (4, 32, 32) and inputs.x.dtype == jnp.bfloat16
    assert set(inputs) == {"x", "deterministic"} and inputs.deterministic is True
    assert dict(**inputs).keys() == inputs.keys()
    out = layer(**inputs)
    assert out.dtype == result.output.dtype
    assert np.array_equal(np.asarray(out), np.asarray(result.output))
    assert np.array_equal(np.asarray(out), np.asarray(layer.captured_output))

    del log.records[before:]
    hidden = layer.c_fc(inputs.x)
    assert hidden.shape == (4, 32, 128)
    assert log.messages("DEBUG | ") == [
        "DEBUG | blocks_1/mlp/c_fc/bias | reused parameter shape=(128,)",
        "DEBUG | blocks_1/mlp/c_fc/kernel | reused parameter shape=(32, 128)",
    ]
    # the bound parameters are the trainer's current ones
    kernel = trainer.state["params"]["blocks_1"]["mlp"]["c_fc"]["kernel"]
    assert np.array_equal(np.asarray(layer.c_fc.variables["params"]["kernel"]), np.asarray(kernel))
    layer.close()
    assert layer.closed
    with pytest.raises(ValueError, match="closed"):
        layer.c_fc(inputs.x)


def test_debug_inputs_come_from_the_next_batch(trained):
    trainer, _ = trained
    batch = trainer.batch()
    params = trainer.state["params"]
    with trainer.debug(("blocks_0",)) as (layer, inputs):
        # blocks_0 receives the token embeddings of rows micro::accumulation of batch()
        rows = batch["x"][0::trainer.accumulation]
        expected = jnp.asarray(params["wte"]["embedding"]).astype(jnp.bfloat16)[rows]
        assert np.array_equal(np.asarray(inputs.x), np.asarray(expected))
    assert layer.closed
    with trainer.debug(("blocks_0",), micro=1) as (_, inputs):
        expected = jnp.asarray(params["wte"]["embedding"]).astype(jnp.bfloat16)[batch["x"][1::2]]
        assert np.array_equal(np.asarray(inputs.x), np.asarray(expected))


def test_debug_without_path_uses_last_find(trained, make_trainer):
    trainer, _ = trained
    trainer.find(CausalSelfAttention)
    with trainer.debug() as (layer, inputs):
        assert layer.path == ("blocks_0", "attn")
        assert np.array_equal(np.asarray(layer(**inputs)), np.asarray(layer.captured_output))
        assert layer.c_attn(inputs.x).shape == (4, 32, 96)
    fresh = make_trainer()  # no find yet: the first MLP, as the seed calls it on a fresh trainer
    with fresh.debug() as (layer, inputs):
        assert layer.path == ("blocks_0", "mlp")
        assert np.array_equal(np.asarray(layer(**inputs)), np.asarray(layer.captured_output))
    with pytest.raises(ValueError, match="blocks_9/mlp"):
        trainer.debug("blocks_9/mlp")
    with pytest.raises(ValueError, match="micro"):
        trainer.debug("blocks_0/mlp", micro=2)


def test_debug_follows_tick(trained):
    trainer, _ = trained
    x0 = np.asarray(trainer.debug("blocks_0").inputs.x)
    again = np.asarray(trainer.debug("blocks_0").inputs.x)
    assert np.array_equal(x0, again)
    trainer.tick()
    assert not np.array_equal(np.asarray(trainer.debug("blocks_0").inputs.x), x0)
