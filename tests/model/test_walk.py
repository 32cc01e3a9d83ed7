"""The module walker on a GPT and a decoder-family model: the paths it finds are the ones a pass calls, the
calls it hands over carry the numbers the model computed, and debug's capture and the analyses' trace
(both visitors of it) agree with one another."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from theseus.errors import BadInput
from theseus.model import GPT, GPTConfig
from theseus.model.debug import capture
from theseus.model.decoder import Decoder
from theseus.model.decoder_config import DecoderConfig
from theseus.model.layers.block import Block
from theseus.model.layers.decoder_block import DecoderBlock
from theseus.model.layers.feedforward import DecoderMLP
from theseus.model.layers.gqa import GroupedQueryAttention
from theseus.model.layers.mlp import MLP
from theseus.model.walk import StopWalk, bind_arguments, call_at, find_modules, walk
from theseus.train.analyses.trace import record


def gpt():
    model = GPT(GPTConfig(n_embd=32, n_head=4, n_layers=2, vocab_size=64, block_size=8, activation_dtype="float32"))
    tokens = np.random.default_rng(0).integers(0, 64, (2, 8)).astype(np.int32)
    return model, model.init(jax.random.PRNGKey(0), tokens), tokens, Block, MLP


def llama():
    cfg = DecoderConfig.for_family("llama", n_embd=32, n_head=4, n_kv_head=2, n_layers=2, vocab_size=64,
                                   intermediate_size=48, block_size=8, activation_dtype="float32")
    model = Decoder(cfg)
    tokens = np.random.default_rng(0).integers(0, 64, (2, 8)).astype(np.int32)
    return model, model.init(jax.random.PRNGKey(1), tokens), tokens, DecoderBlock, DecoderMLP


@pytest.mark.parametrize("build", [gpt, llama], ids=["gpt", "llama"])
def test_found_paths_are_the_called_ones_and_the_traced_blocks(build):
    model, variables, tokens, block, mlp = build()
    blocks = find_modules(model, variables, block, tokens)
    assert blocks == [("blocks_0",), ("blocks_1",)]
    entered = []
    walk(model, variables, tokens, on_enter=lambda call: entered.append(call.path) if call.is_call else None,
         deterministic=True)
    assert entered[0] == () and [p for p in entered if p in blocks] == blocks  # the model first, then in order
    assert find_modules(model, variables, (block, mlp), tokens) == [
        ("blocks_0",), ("blocks_0", "mlp"), ("blocks_1",), ("blocks_1", "mlp")]  # call order, not return order

    trace = record(model, variables["params"], tokens)
    assert trace.n_layers == len(blocks)
    for i, path in enumerate(blocks):
        # what debug's capture and the trace each read of one block, through the same walk
        with capture(model, variables, path, jnp.asarray(tokens), deterministic=True) as result:
            np.testing.assert_array_equal(np.asarray(result.output), np.asarray(trace.blocks[i]))
            np.testing.assert_array_equal(np.asarray(result.layer(**result.inputs)), np.asarray(result.output))


@pytest.mark.parametrize("build", [gpt, llama], ids=["gpt", "llama"])
def test_returned_calls_carry_their_outputs_and_a_stop_ends_the_pass(build):
    model, variables, tokens, block, _ = build()
    logits = walk(model, variables, tokens, deterministic=True)
    returned = []
    assert np.array_equal(np.asarray(walk(model, variables, tokens, on_return=returned.append,
                                          deterministic=True)), np.asarray(logits))
    assert returned[-1].path == () and returned[-1].output is not None
    first_block = next(c for c in returned if isinstance(c.module, block) and c.is_call)
    assert bind_arguments(first_block.module, first_block.args, first_block.kwargs)["x"].shape == (2, 8, 32)

    def stop(call):
        seen.append(call.path)
        if call.path == ("blocks_0",):
            raise StopWalk

    seen: list = []
    assert walk(model, variables, tokens, on_return=stop, deterministic=True) is None
    assert seen[-1] == ("blocks_0",) and not any(p[:1] == ("blocks_1",) for p in seen)
    call = call_at(model, variables, "blocks_0", tokens, deterministic=True)
    assert np.array_equal(np.asarray(call.output), np.asarray(first_block.output))


def test_a_walk_sees_methods_other_than_call():
    model, variables, tokens, _, _ = llama()
    methods = set()
    walk(model, variables, tokens, on_return=lambda call: methods.add((type(call.module), call.method)),
         deterministic=True)
    assert (GroupedQueryAttention, "_qkv") in methods  # where the trace reads the decoder's heads


def test_an_abstract_walk_computes_nothing_and_a_missing_path_is_bad_input():
    model, _, _, _, _ = gpt()
    idx = jax.ShapeDtypeStruct((1, 8), jnp.int32)
    abstract = jax.eval_shape(model.init, jax.random.PRNGKey(0), idx)
    shapes = []
    out = walk(model, abstract, idx, on_return=lambda call: shapes.append(call.output), abstract=True)
    assert isinstance(out, jax.ShapeDtypeStruct) and out.shape == (1, 8, 64)
    assert shapes and all(isinstance(x, jax.core.Tracer) for x in jax.tree.leaves(shapes))
    with pytest.raises(BadInput, match="blocks_9/mlp"):
        call_at(model, model.init(jax.random.PRNGKey(0), jnp.zeros((1, 8), jnp.int32)), "blocks_9/mlp",
                jnp.zeros((1, 8), jnp.int32))
    with pytest.raises(BadInput, match="at least one name"):
        call_at(model, abstract, "", idx)
