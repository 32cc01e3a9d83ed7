"""DPO's objective as pure functions: the loss is log 2 at policy = reference and falls as the margin grows, sequence
log-probabilities are the masked sums of token log-probabilities, and what the objective cannot score is refused."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.docstrings import examples_fail, names_without_examples
from theseus.errors import BadInput
from theseus.model import GPT, GPTConfig
from theseus.train.dpo import DPOObjective, dpo_terms, sequence_logprobs


def test_the_loss_is_log_2_at_policy_equal_reference_and_falls_with_the_margin():
    rng = np.random.default_rng(0)
    pc, pr = jnp.asarray(rng.normal(size=16) * 5), jnp.asarray(rng.normal(size=16) * 5)
    loss, margin, correct = dpo_terms(pc, pr, pc, pr, beta=0.1)
    assert np.allclose(np.asarray(loss), math.log(2), atol=1e-6) and not np.asarray(correct).any()
    loss, margin, correct = dpo_terms(pc + 1.0, pr - 1.0, pc, pr, beta=0.1)
    assert np.allclose(np.asarray(margin), 0.2, atol=1e-6) and np.asarray(correct).all()
    assert np.allclose(np.asarray(loss), -np.log(1 / (1 + np.exp(-0.2))), atol=1e-6)
    logits = jnp.asarray(rng.normal(size=(2, 4, 8)), jnp.float32)
    y = jnp.asarray([[1, 2, 3, 4], [5, 6, 7, 0]], jnp.int32)
    mask = jnp.asarray([[0, 1, 1, 0], [1, 1, 1, 1]], bool)
    logp = jax.nn.log_softmax(logits)
    expected = [sum(float(logp[r, t, y[r, t]]) for t in range(4) if mask[r, t]) for r in range(2)]
    assert np.allclose(np.asarray(sequence_logprobs(logits, y, mask)), expected, atol=1e-5)


def test_the_objective_is_log_2_per_pair_when_the_reference_is_the_policy():
    model = GPT(GPTConfig(n_embd=32, n_head=4, n_layers=1, vocab_size=32, block_size=8))
    params = model.init(jax.random.PRNGKey(0), jnp.zeros((1, 8), jnp.int32))["params"]
    rows = jnp.asarray(np.random.default_rng(0).integers(0, 32, (6, 8)), jnp.int32)
    batch = {"x": rows, "y": jnp.roll(rows, -1, axis=1), "padding_mask": jnp.ones((6, 8), bool).at[:, :3].set(False)}
    forward = lambda p, frozen, b, **_: model.apply({"params": p}, b["x"])  # noqa: E731
    objective = DPOObjective(beta=0.3)
    loss_sum, sums = objective(forward, params, params, batch, None)
    assert float(objective.count(batch)) == 3 and objective.metrics == tuple(sums)
    assert abs(float(loss_sum) / 3 - math.log(2)) < 1e-6 and float(sums["dpo/reward_margin"]) == 0.0


def test_the_objective_refuses_what_it_cannot_score():
    with pytest.raises(BadInput, match="dpo.beta must be a positive number"):
        DPOObjective(beta=0.0)
    model = GPT(GPTConfig(n_embd=32, n_head=4, n_layers=1, vocab_size=32, block_size=8))
    params = model.init(jax.random.PRNGKey(0), jnp.zeros((1, 8), jnp.int32))["params"]
    rows = jnp.ones((4, 8), jnp.int32)
    pairs = {"x": rows, "y": rows, "padding_mask": jnp.ones((4, 8), bool)}
    forward = lambda p, f, b, **k: model.apply({"params": p}, b["x"])  # noqa: E731
    with pytest.raises(BadInput, match="frozen tree"):
        DPOObjective()(forward, params, None, pairs, None)
    odd = {k: v[:3] for k, v in pairs.items()}
    with pytest.raises(BadInput, match="whole pairs"):
        DPOObjective()(forward, params, params, odd, None)


def test_docstring_examples():
    assert examples_fail("theseus.train.dpo")[0] == 0
    assert names_without_examples("theseus.train.dpo") == []
