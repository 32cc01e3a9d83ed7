"""Packed rows: GPT and the decoder family take `segment_ids` and `positions`, so several sequences in one row give
the logits, loss and gradients each gets alone, and padding (segment 0) changes nothing."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from theseus.errors import BadInput
from theseus.model.config import GPTConfig
from theseus.model.decoder import Decoder
from theseus.model.decoder_config import DecoderConfig
from theseus.model.gpt import GPT, cross_entropy
from theseus.model.layers import gqa

FIRST = [5, 17, 3, 42, 8]
SECOND = [11, 2, 29, 7]
PADDING = 3
ROW = len(FIRST) + len(SECOND) + PADDING

MODELS = {
    "gpt_rope": lambda: GPT(GPTConfig(n_embd=32, n_head=4, n_layers=2, vocab_size=64, block_size=ROW,
                                      activation_dtype="float32")),
    "gpt_learned": lambda: GPT(GPTConfig(n_embd=32, n_head=4, n_layers=2, vocab_size=64, block_size=ROW, rope=False,
                                         activation_dtype="float32")),
    "llama": lambda: Decoder(DecoderConfig.for_family(
        "llama", n_embd=32, n_head=4, n_kv_head=2, n_layers=2, vocab_size=64, intermediate_size=64, block_size=ROW,
        activation_dtype="float32", remat="nothing_saveable")),
    "gemma_window": lambda: Decoder(DecoderConfig.for_family(
        "gemma", n_embd=32, n_head=4, n_kv_head=1, n_layers=2, vocab_size=64, intermediate_size=64, block_size=ROW,
        sliding_window=3, activation_dtype="float32")),
}


def packed_row(pad_token: int = 0) -> tuple[jax.Array, jax.Array, jax.Array]:
    """tokens, segment ids and positions [1, ROW] of FIRST then SECOND then PADDING pad tokens."""
    tokens = jnp.array([FIRST + SECOND + [pad_token] * PADDING], jnp.int32)
    segments = jnp.array([[1] * len(FIRST) + [2] * len(SECOND) + [0] * PADDING], jnp.int32)
    positions = jnp.array([list(range(len(FIRST))) + list(range(len(SECOND))) + list(range(PADDING))], jnp.int32)
    return tokens, segments, positions


def setup_model(name: str):
    """The model ``name`` (its `apply` jitted: eager layer-by-layer dispatch is the slow part here) and its params."""
    model = MODELS[name]()
    params = model.init(jax.random.PRNGKey(0), jnp.zeros((1, ROW), jnp.int32))["params"]
    return model, params


def logits_of(model, params, tokens, **packing) -> jax.Array:
    return jax.jit(model.apply)({"params": params}, tokens, **packing)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_packed_logits_equal_each_sequence_alone(name):
    model, params = setup_model(name)
    tokens, segments, positions = packed_row()
    packed = logits_of(model, params, tokens, segment_ids=segments, positions=positions)
    first = logits_of(model, params, jnp.array([FIRST]))
    second = logits_of(model, params, jnp.array([SECOND]))
    np.testing.assert_allclose(packed[:, :len(FIRST)], first, atol=1e-5)
    np.testing.assert_allclose(packed[:, len(FIRST):len(FIRST) + len(SECOND)], second, atol=1e-5)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_padding_does_not_change_real_tokens(name):
    model, params = setup_model(name)
    real = len(FIRST) + len(SECOND)
    logits = [logits_of(model, params, tokens, segment_ids=segments, positions=positions)[:, :real]
              for tokens, segments, positions in (packed_row(0), packed_row(63))]
    np.testing.assert_array_equal(logits[0], logits[1])


def sequence_loss_sum(model, params, tokens, targets, **packing) -> jax.Array:
    """Sum over tokens whose target is >= 0 of their cross-entropy."""
    logits = model.apply({"params": params}, tokens, **packing)
    mask = (targets >= 0).astype(jnp.float32)
    return jnp.sum(cross_entropy(logits, jnp.maximum(targets, 0)) * mask)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["gpt_learned", "llama", "gemma_window"])
def test_packed_loss_and_gradients_equal_unpacked(name):
    model, params = setup_model(name)
    tokens, segments, positions = packed_row()
    # next-token targets inside each sequence; the last token of a sequence and the padding have none (-1)
    targets = jnp.array([FIRST[1:] + [-1] + SECOND[1:] + [-1] + [-1] * PADDING])

    def packed(p):
        return sequence_loss_sum(model, p, tokens, targets, segment_ids=segments, positions=positions)

    def unpacked(p):
        return sum(sequence_loss_sum(model, p, jnp.array([seq]), jnp.array([seq[1:] + [-1]]))
                   for seq in (FIRST, SECOND))

    packed_loss, packed_grads = jax.jit(jax.value_and_grad(packed))(params)
    loss, grads = jax.jit(jax.value_and_grad(unpacked))(params)
    np.testing.assert_allclose(packed_loss, loss, rtol=1e-5)
    for got, want in zip(jax.tree.leaves(packed_grads), jax.tree.leaves(grads)):
        np.testing.assert_allclose(got, want, atol=1e-5)


@pytest.mark.parametrize("name", ["gpt_rope", "llama"])
def test_one_segment_at_default_positions_is_the_plain_pass(name):
    model, params = setup_model(name)
    tokens = jnp.array([FIRST + SECOND + [1, 2, 3]])
    plain = logits_of(model, params, tokens)
    np.testing.assert_allclose(logits_of(model, params, tokens, segment_ids=jnp.ones_like(tokens)), plain, atol=1e-6)
    np.testing.assert_allclose(logits_of(model, params, tokens, positions=jnp.arange(ROW)[None]), plain, atol=1e-6)


@pytest.mark.parametrize("name", ["gpt_rope", "llama"])
def test_bad_packing_arguments_are_refused(name):
    model, params = setup_model(name)
    tokens, segments, positions = packed_row()
    with pytest.raises(BadInput, match="segment_ids must have idx's shape"):
        model.apply({"params": params}, tokens, segment_ids=segments[:, :4])
    with pytest.raises(BadInput, match="positions must have idx's shape"):
        model.apply({"params": params}, tokens, positions=positions[0])
    with pytest.raises(BadInput, match="decoding takes none"):
        model.apply({"params": params}, tokens, positions=positions, segment_ids=segments,
                    cache=model.init_cache(1, ROW))


def test_auto_attention_takes_xla_for_packed_rows_on_a_gpu(monkeypatch):
    """cuDNN's fused kernel has no segment mask: packed rows run XLA's even where "auto" would pick cuDNN."""
    implementations = []
    attention = jax.nn.dot_product_attention

    def recording(*args, implementation=None, **kwargs):
        implementations.append(implementation)
        return attention(*args, implementation="xla", **kwargs)

    monkeypatch.setattr(jax.nn, "dot_product_attention", recording)
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    q = jnp.ones((1, 4, 2, 8), jnp.bfloat16)
    mask = jnp.ones((1, 1, 4, 4), bool)
    gqa.causal_attention(q, q, q, 0, "auto", mask)
    gqa.causal_attention(q, q, q, 0, "auto")
    assert implementations == ["xla", "cudnn"]
