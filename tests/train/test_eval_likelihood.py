"""Log-likelihood scoring (theseus.train.evals.likelihood) against the model's full forward pass computed by hand:
pairs, left truncation, greedy flags, rolling windows, and the few shapes it compiles."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from theseus.model.config import GPTConfig
from theseus.model.gpt import GPT
from theseus.train.evals import likelihood
from theseus.train.evals.likelihood import loglikelihood, rolling_loglikelihood

BLOCK, VOCAB = 16, 48


@pytest.fixture(scope="module")
def toy():
    model = GPT(GPTConfig(n_embd=32, n_head=4, n_layers=2, vocab_size=VOCAB, block_size=BLOCK,
                          activation_dtype="float32"))
    params = model.init(jax.random.PRNGKey(1), jnp.zeros((1, BLOCK), jnp.int32))["params"]
    return model, params


def by_hand(model, params, context, continuation):
    """The continuation's log-probability and greedy flag from one unpadded forward pass over the last block."""
    full = (list(context) + list(continuation))[-(BLOCK + 1):]
    logits = model.apply({"params": params}, jnp.array([full[:-1]]))[0]
    logprobs = np.asarray(jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1))
    n = len(continuation)
    positions = range(len(full) - 1 - n, len(full) - 1)
    total = sum(float(logprobs[p, full[p + 1]]) for p in positions)
    greedy = all(int(np.argmax(logprobs[p])) == full[p + 1] for p in positions)
    return total, greedy


def test_pairs_equal_the_full_forward_pass_including_left_truncation(toy):
    model, params = toy
    rng = np.random.default_rng(0)
    pairs = []
    for _ in range(23):
        n_ctx, n_cont = int(rng.integers(1, 30)), int(rng.integers(1, 8))  # some contexts exceed the block
        pairs.append((rng.integers(0, VOCAB, n_ctx).tolist(), rng.integers(0, VOCAB, n_cont).tolist()))
    scored = loglikelihood(model, params, pairs, batch_size=4)
    assert [s.tokens for s in scored] == [len(c) for _, c in pairs]
    for (context, continuation), s in zip(pairs, scored):
        total, greedy = by_hand(model, params, context, continuation)
        assert s.logprob == pytest.approx(total, abs=1e-4)
        assert s.greedy == greedy


def test_the_greedy_continuation_is_flagged_greedy(toy):
    model, params = toy
    context = [3, 1, 4, 1, 5]
    greedy = []
    for _ in range(4):  # extend by the argmax, one token at a time
        logits = model.apply({"params": params}, jnp.array([context + greedy]))[0, -1]
        greedy.append(int(jnp.argmax(logits)))
    other = [(greedy[0] + 1) % VOCAB, *greedy[1:]]
    a, b = loglikelihood(model, params, [(context, greedy), (context, other)])
    assert a.greedy and not b.greedy and a.logprob > b.logprob


def test_rolling_scores_every_token_once_in_block_windows(toy):
    model, params = toy
    rng = np.random.default_rng(1)
    documents = [rng.integers(0, VOCAB, n).tolist() for n in (5, 16, 17, 40)]
    scored = rolling_loglikelihood(model, params, documents, prefix=0, batch_size=3)
    for tokens, s in zip(documents, scored):
        sequence = [0, *tokens]
        expected = 0.0
        for start in range(0, len(tokens), BLOCK):  # window: predict tokens[start:start+BLOCK]
            expected += by_hand(model, params, sequence[:start + 1], tokens[start:start + BLOCK])[0]
        assert s.tokens == len(tokens)
        assert s.logprob == pytest.approx(expected, abs=1e-4)


def test_compiles_once_per_bucket_not_per_example(toy):
    model, params = toy
    likelihood._score.clear_cache()
    rng = np.random.default_rng(2)
    pairs = [(rng.integers(0, VOCAB, int(n)).tolist(), [1]) for n in rng.integers(1, 40, 50)]
    loglikelihood(model, params, pairs, batch_size=8)
    buckets = {likelihood.bucket_length(min(len(c), BLOCK), BLOCK) for c, _ in pairs}
    assert likelihood._score._cache_size() <= len(buckets) <= 2


@pytest.mark.parametrize("pairs, message", [
    ([([1], [])], "the continuation of pair 0 is empty"),
    ([([1], [2] * (BLOCK + 1))], "more than the model's block_size"),
    ([([1], [VOCAB])], "outside the model's vocabulary"),
    ([("abc", [1])], "must be a list of token ids"),
    ([([1], [2], [3])], "must be \\(context_tokens, continuation_tokens\\)"),
])
def test_bad_pairs_are_refused_with_a_clear_message(toy, pairs, message):
    model, params = toy
    with pytest.raises((ValueError, TypeError), match=message):
        loglikelihood(model, params, pairs)
