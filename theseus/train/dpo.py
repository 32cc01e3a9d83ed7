"""DPO (Rafailov et al., 2023): the preference objective against a frozen reference.

A batch of a preference dataset (`theseus.data.preference.PairLoader`) holds whole pairs: its
first half the chosen rows, its second half the rejected rows of the same pairs in the same
order. For each pair the policy's log-probability of a response is the sum of its masked token
log-probabilities (`sequence_logprobs`: ``padding_mask`` covers the response tokens only), the
reference's likewise, and

    loss = -log sigmoid(beta * ((pc - rc) - (pr - rr)))

(`dpo_terms`): ``pc``, ``pr`` the policy's log-probabilities of the chosen and the rejected
response, ``rc``, ``rr`` the reference's. `DPOObjective` is that loss as a step objective
(`theseus.train.objective`): it averages over pairs and reports ``dpo/loss``,
``dpo/reward_margin`` (the mean of ``beta * (pc - rc) - beta * (pr - rr)``) and ``dpo/accuracy``
(the share of pairs whose margin is positive).

The reference is the ``frozen`` tree the trainer holds (`theseus.train.trainer.Trainer.freeze`): the
parameters ``training.init_from`` starts the policy from. Over LoRA (`theseus.train.lora_dpo_jobs`) that tree is
the base the adapters apply to: the policy is the base with its adapters, the reference the base alone (the
objective's ``reference`` forward), so the reference costs no second copy of the weights. Its log-probabilities
are computed in the same step, on the same micro-batch, rather than cached as an artifact of the data: a forward
pass without backward costs about a third of a step, and in exchange nothing can go stale (a cache would be tied
to one reference, one tokenization and one block size), the batch of step k stays a pure function of the data
and k, and a resumed run recomputes exactly what the uninterrupted one did. At step 0 policy and reference are
the same model (the same parameters, or fresh adapters, which add zero), so every margin is 0 and the loss is
log 2.

>>> import jax.numpy as jnp
>>> loss, margin, correct = dpo_terms(jnp.array([-3.0]), jnp.array([-5.0]), jnp.array([-3.0]), jnp.array([-5.0]),
...                                   beta=0.1)
>>> round(float(loss[0]), 6), float(margin[0]), float(correct[0])
(0.693147, 0.0, 0.0)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp

from theseus.errors import BadInput
from theseus.model.gpt import cross_entropy

__all__ = ["DPOConfig", "DPOObjective", "METRICS", "dpo_terms", "sequence_logprobs", "split_pairs"]

#: the metrics a DPO step reports beside ``train/loss`` (which is ``dpo/loss`` too)
METRICS = ("dpo/loss", "dpo/reward_margin", "dpo/accuracy")
#: ``forward(params, frozen, batch, *, deterministic, rng) -> logits``: the model on a batch (`theseus.train.objective`)
Forward = Callable[..., jax.Array]


@dataclasses.dataclass
class DPOConfig:
    """``dpo``: ``beta``, the strength of the pull towards the reference (the KL penalty's inverse temperature).

    >>> DPOConfig().beta
    0.1
    """

    beta: float = 0.1


def sequence_logprobs(logits: jax.Array, y: jax.Array, mask: jax.Array) -> jax.Array:
    """The log-probability of each row's masked targets: ``sum_t mask[t] * log softmax(logits[t])[y[t]]``,
    ``[rows]`` float32.

    >>> import jax.numpy as jnp
    >>> logits = jnp.zeros((1, 3, 4))  # uniform over 4 tokens
    >>> round(float(sequence_logprobs(logits, jnp.zeros((1, 3), jnp.int32), jnp.array([[False, True, True]]))[0]), 4)
    -2.7726
    """
    return -jnp.sum(cross_entropy(logits, y) * jnp.asarray(mask).astype(jnp.float32), axis=-1)


def split_pairs(values: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(chosen, rejected)`` of per-row values of a pair batch: its first half and its second half.

    >>> import jax.numpy as jnp
    >>> [a.tolist() for a in split_pairs(jnp.array([1, 2, 3, 4]))]
    [[1, 2], [3, 4]]
    """
    rows = values.shape[0]
    if rows % 2:
        raise BadInput(f"a preference batch holds whole pairs (chosen rows, then rejected rows): got {rows} rows")
    return values[: rows // 2], values[rows // 2:]


def dpo_terms(policy_chosen: jax.Array, policy_rejected: jax.Array, reference_chosen: jax.Array,
              reference_rejected: jax.Array, beta: float) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Per pair: the loss ``-log sigmoid(margin)``, the ``margin`` ``beta * ((pc - rc) - (pr - rr))`` (the chosen
    response's implicit reward minus the rejected one's) and whether it is positive (1.0 / 0.0).

    >>> import jax.numpy as jnp
    >>> loss, margin, correct = dpo_terms(jnp.array([-1.0]), jnp.array([-4.0]), jnp.array([-2.0]),
    ...                                   jnp.array([-2.0]), beta=0.5)
    >>> float(margin[0]), float(correct[0]), round(float(loss[0]), 4)
    (1.5, 1.0, 0.2014)
    """
    margin = beta * ((policy_chosen - reference_chosen) - (policy_rejected - reference_rejected))
    return -jax.nn.log_sigmoid(margin), margin, (margin > 0).astype(jnp.float32)


@dataclasses.dataclass(frozen=True)
class DPOObjective:
    """The DPO loss as a step objective (`theseus.train.objective.Objective`): ``count`` is the pairs of a
    batch, ``__call__`` returns the sum of the pair losses and the sums of `METRICS`; ``frozen`` is the
    reference's parameters, run without dropout and without gradient. ``reference`` None: they run through the
    policy's ``forward`` (a copy of the policy's starting parameters). ``reference`` a forward: the policy is
    ``forward(params, frozen)`` (adapters over a frozen base) and the reference ``reference(frozen)`` (the base
    alone, `theseus.train.objective.model_forward` of the base model).

    >>> import jax, jax.numpy as jnp
    >>> from theseus.model import GPT, GPTConfig
    >>> model = GPT(GPTConfig(n_embd=32, n_head=4, n_layers=1, vocab_size=64, block_size=8))
    >>> params = model.init(jax.random.PRNGKey(0), jnp.zeros((1, 8), jnp.int32))["params"]
    >>> forward = lambda p, frozen, batch, **_: model.apply({"params": p}, batch["x"])
    >>> batch = {"x": jnp.ones((4, 8), jnp.int32), "y": jnp.arange(32).reshape(4, 8) % 64,
    ...          "padding_mask": jnp.ones((4, 8), bool)}
    >>> objective = DPOObjective(beta=0.1)
    >>> loss_sum, sums = objective(forward, params, params, batch, None)
    >>> float(objective.count(batch)), round(float(loss_sum / 2), 6), float(sums["dpo/accuracy"])
    (2.0, 0.693147, 0.0)
    >>> adapted = DPOObjective(beta=0.1, reference=forward)  # the policy reads the frozen tree too
    >>> round(float(adapted(lambda p, frozen, batch, **_: forward(frozen, None, batch), params, params, batch,
    ...                     None)[0] / 2), 6)
    0.693147
    """

    beta: float = 0.1
    metrics: tuple[str, ...] = METRICS
    reference: Forward | None = None

    def __post_init__(self) -> None:
        if isinstance(self.beta, bool) or not isinstance(self.beta, (int, float)) or not self.beta > 0:
            raise BadInput(f"dpo.beta must be a positive number, got {self.beta!r}")

    def count(self, batch: Mapping[str, Any]) -> jax.Array:
        """The pairs of ``batch`` (float32): half its rows."""
        return jnp.asarray(jnp.shape(batch["x"])[0] // 2, jnp.float32)

    def __call__(self, forward: Forward, params: Any, frozen: Any, batch: Mapping[str, Any],
                 rng: jax.Array | None) -> tuple[jax.Array, dict[str, jax.Array]]:
        """The sum over the pairs of ``batch`` of the DPO loss of ``params`` against the reference ``frozen``."""
        if frozen is None:
            raise BadInput("DPO needs the reference's parameters as the frozen tree (training.init_from)")
        y, mask, frozen = batch["y"], batch["padding_mask"], jax.lax.stop_gradient(frozen)
        over = None if self.reference is None else frozen  # adapters read the base; a full policy its own params
        policy = sequence_logprobs(forward(params, over, batch, deterministic=rng is None, rng=rng), y, mask)
        reference_logits = (self.reference or forward)(frozen, None, batch, deterministic=True, rng=None)
        reference = jax.lax.stop_gradient(sequence_logprobs(reference_logits, y, mask))
        loss, margin, correct = dpo_terms(*split_pairs(policy), *split_pairs(reference), beta=float(self.beta))
        total = jnp.sum(loss)
        return total, {"dpo/loss": total, "dpo/reward_margin": jnp.sum(margin), "dpo/accuracy": jnp.sum(correct)}
