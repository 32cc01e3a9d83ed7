import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from theseus.model.config import GPTConfig
from theseus.model.layers.attention import CausalSelfAttention
from theseus.model.layers.block import Block
from theseus.model.layers.mlp import MLP
from theseus.model.layers.rope import apply_rope

CFG = GPTConfig(n_embd=32, n_head=4, n_layers=2, vocab_size=256, block_size=16, activation_dtype="float32")


def test_mlp_submodules_are_callable_when_bound():
    mlp = MLP(CFG)
    x = jax.random.normal(jax.random.PRNGKey(0), (2, 5, 32))
    params = mlp.init(jax.random.PRNGKey(1), x)["params"]
    assert params["c_fc"]["kernel"].shape == (32, 128)
    assert params["c_proj"]["kernel"].shape == (128, 32)
    layer = mlp.bind({"params": params})
    h = layer.c_fc(x)
    assert h.shape == (2, 5, 128)
    np.testing.assert_allclose(layer(x), layer.c_proj(jax.nn.gelu(h)), rtol=1e-6, atol=1e-6)


def test_mlp_dropout_only_when_not_deterministic():
    cfg = GPTConfig(n_embd=32, n_head=4, n_layers=2, dropout=0.5, activation_dtype="float32")
    mlp = MLP(cfg)
    x = jnp.ones((2, 5, 32))
    params = mlp.init(jax.random.PRNGKey(0), x)["params"]
    a = mlp.apply({"params": params}, x)
    b = mlp.apply({"params": params}, x, deterministic=False, rngs={"dropout": jax.random.PRNGKey(1)})
    assert not np.allclose(a, b)
    assert np.allclose(a, mlp.apply({"params": params}, x, deterministic=True))


def test_intercept_methods_sees_mlp_inputs():
    block = Block(CFG)
    x = jax.random.normal(jax.random.PRNGKey(0), (1, 4, 32))
    params = block.init(jax.random.PRNGKey(1), x)["params"]
    seen = {}

    def interceptor(next_fun, args, kwargs, context):
        if isinstance(context.module, MLP) and context.method_name == "__call__":
            seen[context.module.path] = args[0]
        return next_fun(*args, **kwargs)

    with nn.intercept_methods(interceptor):
        block.apply({"params": params}, x)
    assert list(seen) == [("mlp",)]
    assert seen[("mlp",)].shape == (1, 4, 32)


def _reference_attention(params, x, cfg):
    """Plain softmax attention, float32, no RoPE."""
    B, T, C = x.shape
    qkv = x @ params["c_attn"]["kernel"] + params["c_attn"]["bias"]
    q, k, v = (a.reshape(B, T, cfg.n_head, cfg.head_dim) for a in jnp.split(qkv, 3, axis=-1))
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(cfg.head_dim)
    scores = jnp.where(jnp.tril(jnp.ones((T, T), bool)), scores, -jnp.inf)
    y = jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(scores, axis=-1), v).reshape(B, T, C)
    return y @ params["c_proj"]["kernel"] + params["c_proj"]["bias"]


def test_attention_matches_plain_softmax():
    cfg = GPTConfig(n_embd=32, n_head=4, n_layers=2, rope=False, activation_dtype="float32")
    attn = CausalSelfAttention(cfg)
    x = jax.random.normal(jax.random.PRNGKey(0), (2, 6, 32))
    params = attn.init(jax.random.PRNGKey(1), x)["params"]
    np.testing.assert_allclose(attn.apply({"params": params}, x), _reference_attention(params, x, cfg), atol=1e-5)


@pytest.mark.parametrize("rope", [True, False])
def test_attention_is_causal(rope):
    cfg = GPTConfig(n_embd=32, n_head=4, n_layers=2, rope=rope, activation_dtype="float32")
    attn = CausalSelfAttention(cfg)
    x = jax.random.normal(jax.random.PRNGKey(0), (1, 6, 32))
    params = attn.init(jax.random.PRNGKey(1), x)["params"]
    y1 = attn.apply({"params": params}, x)
    y2 = attn.apply({"params": params}, x.at[:, 4:].set(7.0))
    np.testing.assert_allclose(y1[:, :4], y2[:, :4], atol=1e-6)
    assert not np.allclose(y1[:, 4:], y2[:, 4:])


def test_bfloat16_activations_float32_params():
    cfg = GPTConfig(n_embd=32, n_head=4, n_layers=2)
    block = Block(cfg)
    x = jnp.ones((1, 4, 32), jnp.bfloat16)
    out, variables = block.init_with_output(jax.random.PRNGKey(0), x)
    assert out.dtype == jnp.bfloat16
    assert {leaf.dtype for leaf in jax.tree.leaves(variables)} == {jnp.dtype("float32")}


def test_rope_scores_depend_only_on_offset():
    q = jax.random.normal(jax.random.PRNGKey(0), (1, 1, 1, 8))
    k = jax.random.normal(jax.random.PRNGKey(1), (1, 1, 1, 8))

    def score(i, j):
        qi = apply_rope(jnp.broadcast_to(q, (1, 10, 1, 8)), jnp.arange(10))[0, i, 0]
        kj = apply_rope(jnp.broadcast_to(k, (1, 10, 1, 8)), jnp.arange(10))[0, j, 0]
        return float(qi @ kj)

    assert score(5, 2) == pytest.approx(score(7, 4), abs=1e-5)
    assert score(5, 2) != pytest.approx(score(5, 4), abs=1e-3)


def test_rope_rejects_odd_head_dim():
    with pytest.raises(ValueError, match="even head_dim"):
        apply_rope(jnp.ones((1, 2, 1, 3)), jnp.arange(2))
