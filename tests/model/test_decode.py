"""Decoding with a key/value cache: the logits equal the full forward pass, greedy cached equals greedy
uncached, padded batches equal prompts one by one, seeds repeat, top-k / top-p restrict the support."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from theseus.model.config import GPTConfig
from theseus.model.decode import Sampler, Vocabulary, cached_logits, filter_logits, generate_tokens, sample_logits
from theseus.model.gpt import GPT

VOCAB, BLOCK = 64, 24


def model_and_params(rope: bool):
    """A 2-layer float32 GPT whose weights are scaled up, so its logits are far from uniform (no near-ties)."""
    model = GPT(GPTConfig(n_embd=32, n_head=4, n_layers=2, vocab_size=VOCAB, block_size=BLOCK, rope=rope,
                          activation_dtype="float32"))
    params = model.init(jax.random.PRNGKey(1), jnp.zeros((1, BLOCK), jnp.int32))["params"]
    return model, jax.tree.map(lambda p: p * 3.0, params)


@pytest.fixture(scope="module", params=[True, False], ids=["rope", "learned"])
def gpt(request):
    return model_and_params(request.param)


PROMPTS = [[3, 17, 9, 40, 2, 11], [5], [60, 1, 1]]


@pytest.mark.parametrize("prompt_length", [1, 5])
def test_cached_logits_equal_the_full_forward_pass_at_every_position(gpt, prompt_length):
    model, params = gpt
    tokens = jax.random.randint(jax.random.PRNGKey(7), (2, BLOCK), 0, VOCAB)
    full = model.apply({"params": params}, tokens)
    cached = cached_logits(model, params, tokens, prompt_length)
    assert cached.shape == full.shape == (2, BLOCK, VOCAB)
    np.testing.assert_allclose(np.asarray(cached), np.asarray(full), rtol=0, atol=1e-5)
    assert float(jnp.std(full)) > 0.5  # the comparison is on logits of real spread, not near-zero ones


def test_greedy_cached_equals_greedy_uncached_and_batches_equal_one_by_one(gpt):
    model, params = gpt
    greedy = Sampler(temperature=0.0)
    cached = generate_tokens(model, params, PROMPTS, 10, greedy)
    uncached = generate_tokens(model, params, PROMPTS, 10, greedy, cache=False)
    np.testing.assert_array_equal(cached.tokens, uncached.tokens)
    assert cached.counts.tolist() == [10, 10, 10] and not cached.stopped.any()
    for b, prompt in enumerate(PROMPTS):
        alone = generate_tokens(model, params, [prompt], 10, greedy)
        assert alone.row(0) == cached.row(b), b
    assert len({tuple(cached.row(b)) for b in range(3)}) == 3  # the rows differ: each saw its own prompt


def test_the_first_row_samples_alike_alone_and_batched(gpt):
    model, params = gpt
    sampler = Sampler(temperature=1.0, top_k=20)
    batched = generate_tokens(model, params, PROMPTS, 8, sampler, seed=11)
    alone = generate_tokens(model, params, PROMPTS[:1], 8, sampler, seed=11)
    assert alone.row(0) == batched.row(0)


def test_seeds_repeat_and_differ(gpt):
    model, params = gpt
    sampler = Sampler(temperature=2.0)
    a = generate_tokens(model, params, PROMPTS, 12, sampler, seed=5)
    b = generate_tokens(model, params, PROMPTS, 12, sampler, seed=5)
    c = generate_tokens(model, params, PROMPTS, 12, sampler, seed=6)
    np.testing.assert_array_equal(a.tokens, b.tokens)
    assert not np.array_equal(a.tokens, c.tokens)
    uncached = generate_tokens(model, params, PROMPTS, 12, sampler, seed=5, cache=False)
    np.testing.assert_array_equal(a.tokens, uncached.tokens)  # the draws do not depend on the path


def test_a_row_stops_at_the_end_of_text_token_and_the_others_go_on(gpt):
    model, params = gpt
    greedy = Sampler(temperature=0.0)
    free = generate_tokens(model, params, PROMPTS, 8, greedy)
    # a row b and a token it draws first at step `at` > 0: with that token as eot, row b stops there
    b, at = next((b, i) for b in range(3) for i in range(1, 8) if free.row(b)[i] not in free.row(b)[:i])
    eot = free.row(b)[at]
    out = generate_tokens(model, params, PROMPTS, 8, greedy, vocab=Vocabulary(eot=eot))
    assert out.row(b) == free.row(b)[:at + 1] and out.stopped[b] and out.counts[b] == at + 1
    assert (out.tokens[b, at + 1:] == eot).all()
    for other in range(3):  # a row that never draws eot runs to max_new_tokens
        if eot not in free.row(other):
            assert out.row(other) == free.row(other) and not out.stopped[other]


def test_vocab_limit_is_never_drawn(gpt):
    model, params = gpt
    out = generate_tokens(model, params, PROMPTS, 10, Sampler(temperature=5.0), seed=1, vocab=Vocabulary(limit=8))
    assert out.tokens.max() < 8


def test_bad_requests_are_clear_errors(gpt):
    model, params = gpt
    with pytest.raises(ValueError, match=r"longest prompt \(6 tokens\) plus max_new_tokens \(19\) is 25, more than "
                                         r"the model's block_size \(24\)"):
        generate_tokens(model, params, PROMPTS, 19)
    with pytest.raises(ValueError, match="prompt 1 is empty"):
        generate_tokens(model, params, [[1], []], 2)
    with pytest.raises(ValueError, match="token id 64, outside the model's vocabulary of 64"):
        generate_tokens(model, params, [[64]], 2)
    with pytest.raises(ValueError, match="max_new_tokens must be a positive integer"):
        generate_tokens(model, params, [[1]], 0)
    with pytest.raises(ValueError, match="temperature must be a number >= 0"):
        Sampler(temperature=-1.0)
    with pytest.raises(ValueError, match="top_k must be an integer >= 0"):
        Sampler(top_k=-2)


def test_top_k_and_top_p_restrict_the_support_of_the_draws():
    probs = np.array([0.40, 0.25, 0.15, 0.10, 0.06, 0.04])
    logits = jnp.log(jnp.asarray(probs, jnp.float32))
    assert np.isfinite(np.asarray(filter_logits(logits, top_k=3))).tolist() == [True] * 3 + [False] * 3
    # top-p 0.6: 0.40 alone is short of it, 0.40 + 0.25 reaches it
    assert np.isfinite(np.asarray(filter_logits(logits, top_p=0.6))).tolist() == [True] * 2 + [False] * 4
    assert np.isfinite(np.asarray(filter_logits(logits, top_p=0.3))).tolist() == [True] + [False] * 5
    assert np.isfinite(np.asarray(filter_logits(logits, top_k=4, top_p=0.9))).sum() == 4

    rows = jnp.broadcast_to(logits, (4000, 6))
    keys = jax.random.split(jax.random.PRNGKey(0), 4000)

    def support(sampler):
        return np.bincount(np.asarray(sample_logits(rows, keys, sampler)), minlength=6)

    assert (support(Sampler()) > 0).all()  # untruncated, every token turns up
    counts = support(Sampler(top_k=2))
    assert (counts[2:] == 0).all() and (counts[:2] > 0).all()
    np.testing.assert_allclose(counts[0] / counts[:2].sum(), 0.40 / 0.65, atol=0.03)  # renormalised
    counts = support(Sampler(top_p=0.75))  # 0.40 + 0.25 is short of it, + 0.15 reaches it
    assert (counts[3:] == 0).all() and (counts[:3] > 0).all()
    assert (support(Sampler(temperature=0.0)) == [4000, 0, 0, 0, 0, 0]).all()
