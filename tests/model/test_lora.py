"""LoRA's math on every model family: fresh adapters leave the model as it was, trained ones equal the merged
kernels, the gradient w.r.t. the adapters never forms a base-kernel-sized array, dropout follows its key, and
targets that select nothing are refused."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

from theseus.errors import BadInput
from theseus.model import lora
from theseus.model.config import GPTConfig
from theseus.model.decoder import Decoder
from theseus.model.decoder_config import FAMILIES, DecoderConfig
from theseus.model.gpt import GPT

IDX = (jnp.arange(16).reshape(2, 8) * 7) % 64


def _model(family):
    if family == "gpt":
        return GPT(GPTConfig(n_embd=32, n_head=4, n_layers=2, vocab_size=64, block_size=8, activation_dtype="float32"))
    return Decoder(DecoderConfig.for_family(family, n_embd=32, n_head=4, n_kv_head=2 if family != "gpt_neox" else -1,
                                            n_layers=2, vocab_size=64, intermediate_size=48, block_size=8,
                                            activation_dtype="float32"))


def _setup(family, spec):
    model = _model(family)
    params = model.init(jax.random.PRNGKey(0), IDX)["params"]
    adapters = lora.init_adapters(spec, lora.projections(model, spec, 8), jax.random.PRNGKey(1))
    return model, params, adapters


@pytest.mark.parametrize("family", ["gpt", *FAMILIES])
def test_adapters_start_at_the_base_and_train_to_the_merged_model(family):
    spec = lora.LoraSpec(rank=4, alpha=8.0)
    model, params, adapters = _setup(family, spec)
    base = model.apply({"params": params}, IDX)
    assert jnp.array_equal(lora.apply(model, params, adapters, spec, IDX), base)
    kernels = [path for path, _ in lora.leaves(adapters)]
    per_block = {"gpt": 4, "gpt_neox": 6}.get(family, 7)  # every attention and MLP projection
    assert len(kernels) == 2 * per_block
    trained = jax.tree.map(lambda a: a + 0.05, adapters)
    adapted = lora.apply(model, params, trained, spec, IDX)
    assert float(jnp.abs(adapted - base).max()) > 1e-3
    merged = model.apply({"params": lora.merge(params, trained, spec)}, IDX)
    assert float(jnp.abs(adapted - merged).max()) < 1e-4


def _shapes_formed(jaxpr) -> set[tuple[int, ...]]:
    out = set()
    for eqn in jaxpr.eqns:
        out.update(tuple(v.aval.shape) for v in eqn.outvars)
        for value in eqn.params.values():
            inner = getattr(value, "jaxpr", value)
            if hasattr(inner, "eqns"):
                out |= _shapes_formed(inner)
    return out


@pytest.mark.parametrize("remat", ["none", "nothing_saveable"])
def test_the_gradient_is_the_adapters_only_and_forms_no_base_kernel_gradient(remat):
    spec = lora.LoraSpec(rank=4, alpha=8.0, targets="up_proj,down_proj")
    model = Decoder(DecoderConfig.for_family("llama", n_embd=32, n_head=4, n_layers=1, vocab_size=64,
                                             intermediate_size=48, block_size=8, activation_dtype="float32",
                                             remat=remat))
    params = model.init(jax.random.PRNGKey(0), IDX)["params"]
    adapters = lora.init_adapters(spec, lora.projections(model, spec, 8), jax.random.PRNGKey(1))

    def loss(adapters, params):
        return jnp.mean(lora.apply(model, params, adapters, spec, IDX) ** 2)

    grads = jax.jit(jax.grad(loss))(adapters, params)
    assert jax.tree.structure(grads) == jax.tree.structure(adapters)
    assert float(jnp.abs(grads["blocks_0"]["mlp"]["up_proj"]["lora_b"]).max()) > 0
    formed = _shapes_formed(jax.make_jaxpr(jax.grad(loss))(adapters, params).jaxpr)
    assert (32, 48) not in formed and (48, 32) not in formed  # the up / down kernels' gradients never exist


def test_dropout_follows_its_key_and_is_off_without_one():
    spec = lora.LoraSpec(rank=4, alpha=8.0, dropout=0.5)
    model, params, adapters = _setup("llama", spec)
    adapters = jax.tree.map(lambda a: a + 0.05, adapters)
    plain = lora.apply(model, params, adapters, spec, IDX)
    first = lora.apply(model, params, adapters, spec, IDX, rng=jax.random.PRNGKey(3))
    again = lora.apply(model, params, adapters, spec, IDX, rng=jax.random.PRNGKey(3))
    other = lora.apply(model, params, adapters, spec, IDX, rng=jax.random.PRNGKey(4))
    assert jnp.array_equal(first, again) and not jnp.array_equal(first, other)
    assert not jnp.array_equal(first, plain)
    assert jnp.array_equal(plain, lora.apply(model, params, adapters, spec, IDX))


def test_decoding_with_a_cache_goes_through_the_adapters():
    spec = lora.LoraSpec(rank=4, alpha=8.0)
    model, params, adapters = _setup("qwen2", spec)
    trained = jax.tree.map(lambda a: a + 0.1, adapters)
    empty = model.init_cache(2, 8)
    logits, _ = lora.apply(model, params, trained, spec, IDX, positions=jnp.tile(jnp.arange(8), (2, 1)), cache=empty)
    assert float(jnp.abs(logits - lora.apply(model, params, trained, spec, IDX)).max()) < 1e-4


@pytest.mark.parametrize("spec, match", [
    (dict(targets="q_prj"), "selects no projection"),
    (dict(targets=" , "), "is empty"),
    (dict(targets="blocks_[0"), "neither a module name nor a pattern"),
    (dict(rank=-1), "lora.rank"),
    (dict(alpha=0), "lora.alpha"),
    (dict(dropout=1.0), "lora.dropout"),
])
def test_bad_settings_are_refused_naming_them(spec, match):
    with pytest.raises(BadInput, match=match):
        lora.projections(_model("llama"), lora.LoraSpec(**spec), 8)


def test_targets_take_names_and_patterns():
    model = _model("mistral")
    found = lora.projections(model, lora.LoraSpec(targets="q_proj, blocks_1/mlp/.*"), 8)
    assert sorted(found) == ["blocks_0/attn/q_proj", "blocks_1/attn/q_proj", "blocks_1/mlp/down_proj",
                             "blocks_1/mlp/gate_proj", "blocks_1/mlp/up_proj"]
    assert found["blocks_1/mlp/down_proj"] == (48, 32)
