import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax.traverse_util import flatten_dict

from theseus.model import GPT, GPTConfig, count_params, cross_entropy, loss_fn
from theseus.model.layers.mlp import MLP


def tiny(**kw):
    base = dict(n_embd=32, n_head=4, n_layers=2, vocab_size=256, block_size=16, activation_dtype="float32")
    return GPTConfig(**(base | kw))


def init(cfg, T=None):
    idx = jnp.zeros((1, T or cfg.block_size), jnp.int32)
    return jax.jit(GPT(cfg).init)(jax.random.PRNGKey(0), idx)["params"]


def apply(cfg, params, idx, **kw):
    return jax.jit(GPT(cfg).apply, static_argnames="deterministic")({"params": params}, idx, **kw)


def paths(params):
    return {"/".join(k): v.shape for k, v in flatten_dict(params).items()}


def block_paths(i, C=32, H=128):
    return {
        f"blocks_{i}/ln_1/scale": (C,), f"blocks_{i}/ln_1/bias": (C,),
        f"blocks_{i}/attn/c_attn/kernel": (C, 3 * C), f"blocks_{i}/attn/c_attn/bias": (3 * C,),
        f"blocks_{i}/attn/c_proj/kernel": (C, C), f"blocks_{i}/attn/c_proj/bias": (C,),
        f"blocks_{i}/ln_2/scale": (C,), f"blocks_{i}/ln_2/bias": (C,),
        f"blocks_{i}/mlp/c_fc/kernel": (C, H), f"blocks_{i}/mlp/c_fc/bias": (H,),
        f"blocks_{i}/mlp/c_proj/kernel": (H, C), f"blocks_{i}/mlp/c_proj/bias": (C,),
    }


def test_param_paths_with_rope():
    expected = {"wte/embedding": (256, 32), "ln_f/scale": (32,), "ln_f/bias": (32,)}
    expected |= block_paths(0) | block_paths(1)
    assert paths(init(tiny())) == expected


def test_param_paths_with_learned_positions():
    got = paths(init(tiny(rope=False)))
    assert got["wpe/embedding"] == (16, 32)
    assert len(got) == 3 + 1 + 2 * 12


def test_no_bias_leaves_when_bias_off():
    got = paths(init(tiny(bias=False)))
    assert not [p for p in got if p.endswith("/bias")]
    assert "blocks_1/ln_2/scale" in got


def test_seed_model_size():
    # the seed's 4-layer, 128-wide model reports "Total Parameters: 13.63m"
    cfg = GPTConfig(n_embd=128, n_layers=4)
    abstract = jax.eval_shape(lambda: GPT(cfg).init(jax.random.PRNGKey(0), jnp.zeros((1, 8), jnp.int32)))
    assert count_params(abstract["params"]) == 13_630_208
    assert paths(abstract["params"])["blocks_2/mlp/c_fc/kernel"] == (128, 512)


def test_count_params_non_embedding_drops_wpe():
    params = init(tiny(rope=False))
    assert count_params(params) - count_params(params, non_embedding=True) == 16 * 32


def test_init_scales():
    cfg = tiny(n_embd=64, n_layers=2)
    params = init(cfg)
    assert np.std(params["wte"]["embedding"]) == pytest.approx(0.02, rel=0.1)
    assert np.std(params["blocks_0"]["mlp"]["c_fc"]["kernel"]) == pytest.approx(0.02, rel=0.1)
    assert np.std(params["blocks_0"]["mlp"]["c_proj"]["kernel"]) == pytest.approx(0.02 / math.sqrt(4), rel=0.1)
    assert np.std(params["blocks_1"]["attn"]["c_proj"]["kernel"]) == pytest.approx(0.01, rel=0.1)
    assert not np.any(params["blocks_0"]["attn"]["c_attn"]["bias"])
    assert np.all(params["ln_f"]["scale"] == 1)


@pytest.mark.parametrize("activation", ["float32", "bfloat16"])
def test_logits_shape_and_dtype(activation):
    cfg = tiny(activation_dtype=activation)
    params = init(cfg)
    idx = jax.random.randint(jax.random.PRNGKey(1), (2, 16), 0, 256)
    logits = apply(cfg, params, idx)
    assert logits.shape == (2, 16, 256)
    assert logits.dtype == jnp.float32
    assert {p.dtype for p in jax.tree.leaves(params)} == {jnp.dtype("float32")}
    # freshly initialised: close to uniform over targets other than the input token
    y = jax.random.randint(jax.random.PRNGKey(2), (2, 16), 0, 256)
    loss = loss_fn(logits, y, jnp.ones((2, 16), bool))
    assert float(loss) == pytest.approx(math.log(256), abs=0.1)


def test_unembedding_is_tied():
    cfg = tiny()
    params = init(cfg)
    idx = jnp.arange(16)[None]
    bumped = jax.tree.map(lambda a: a, params)
    bumped["wte"]["embedding"] = params["wte"]["embedding"].at[3].add(1.0)
    a = apply(cfg, params, idx)
    b = apply(cfg, bumped, jnp.where(idx == 3, 4, idx))  # token 3 never read
    assert not np.allclose(a[..., 3], b[..., 3])


@pytest.mark.parametrize("rope", [True, False])
def test_model_is_causal(rope):
    cfg = tiny(rope=rope)
    params = init(cfg)
    idx = jax.random.randint(jax.random.PRNGKey(1), (1, 16), 0, 256)
    a = apply(cfg, params, idx)
    b = apply(cfg, params, idx.at[:, 10:].set(0))
    np.testing.assert_allclose(a[:, :10], b[:, :10], atol=1e-5)


def test_shorter_sequences_and_block_size_limit():
    cfg = tiny(rope=False)
    params = init(cfg)
    assert apply(cfg, params, jnp.zeros((1, 5), jnp.int32)).shape == (1, 5, 256)
    with pytest.raises(ValueError, match="block_size 16"):
        apply(cfg, params, jnp.zeros((1, 17), jnp.int32))


def test_dropout_needs_rng_and_changes_output():
    cfg = tiny(dropout=0.3)
    params = init(cfg)
    idx = jnp.arange(16)[None]
    a = apply(cfg, params, idx)
    b = apply(cfg, params, idx, deterministic=False, rngs={"dropout": jax.random.PRNGKey(2)})
    c = apply(cfg, params, idx, deterministic=False, rngs={"dropout": jax.random.PRNGKey(2)})
    assert not np.allclose(a, b)
    np.testing.assert_array_equal(b, c)


def test_bound_mlp_from_checkpoint_params():
    # what trainer.debug will do: rebuild one layer from its parameter subtree
    cfg = tiny()
    params = init(cfg)
    layer = MLP(cfg).bind({"params": params["blocks_1"]["mlp"]})
    x = jnp.ones((2, 16, 32))
    assert layer.c_fc(x).shape == (2, 16, 128)


def test_cross_entropy_and_masked_loss():
    logits = jax.random.normal(jax.random.PRNGKey(0), (2, 3, 7))
    y = jnp.array([[1, 2, 3], [4, 5, 6]])
    expected = -jax.nn.log_softmax(logits)[jnp.arange(2)[:, None], jnp.arange(3)[None], y]
    np.testing.assert_allclose(cross_entropy(logits, y), expected, rtol=1e-6)
    mask = jnp.array([[True, False, True], [False, False, True]])
    np.testing.assert_allclose(loss_fn(logits, y, mask), expected[mask].mean(), rtol=1e-6)
    assert float(loss_fn(logits, y, jnp.zeros((2, 3), bool))) == 0.0


def test_loss_is_stable_for_large_bfloat16_logits():
    logits = jnp.full((1, 1, 4), 1e4, jnp.bfloat16).at[0, 0, 1].set(1e4 + 64)
    assert float(cross_entropy(logits, jnp.array([[1]]))[0, 0]) == pytest.approx(0.0, abs=1e-6)
