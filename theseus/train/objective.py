"""What a step minimises: a model ``forward`` and an ``objective`` over it, two parts a recipe builds.

- ``forward(params, frozen, batch, *, deterministic, rng) -> logits [rows, T, V]``: the model on a
  batch. The default (`model_forward`) is ``model.apply({"params": params}, batch["x"], ...)``,
  with the batch's optional keys (`OPTIONAL_KEYS`: a packed batch's ``segment_ids`` and
  ``positions``) passed as keyword arguments when the batch holds them. ``frozen`` is the tree the
  trainer holds beside the trained params (None for pretraining): a transform that trains adapters
  over a frozen base (LoRA) replaces ``forward`` with one that combines the two.
- ``objective``: an `Objective`. The step asks ``objective.count(batch)`` once for the whole batch
  (the units the loss averages over: masked-in tokens by default), then per micro-batch
  ``objective(forward, params, frozen, micro, rng) -> (loss_sum, metric_sums)``, ``metric_sums`` a dict of
  float scalars keyed by the names in ``objective.metrics``; it differentiates
  ``loss_sum / count`` with respect to ``params`` only (never ``frozen``) and reports the mean loss as
  ``train/loss`` and each metric sum divided by the count under its own name (a sequence-level
  objective such as DPO reports ``dpo/loss``, ``dpo/reward_margin``, ``dpo/accuracy`` this way).
  `TokenObjective` is the default: the recipe's per-token loss, masked by ``padding_mask``.

>>> import jax, jax.numpy as jnp
>>> from theseus.model import GPT, GPTConfig
>>> from theseus.model.gpt import cross_entropy
>>> model = GPT(GPTConfig(n_embd=32, n_head=4, n_layers=1, vocab_size=64, block_size=8))
>>> params = model.init(jax.random.PRNGKey(0), jnp.zeros((1, 8), jnp.int32))["params"]
>>> batch = {"x": jnp.zeros((2, 8), jnp.int32), "y": jnp.zeros((2, 8), jnp.int32),
...          "padding_mask": jnp.ones((2, 8), bool)}
>>> objective = TokenObjective(cross_entropy)
>>> loss_sum, metrics = objective(model_forward(model), params, None, batch, None)
>>> float(objective.count(batch)), loss_sum.shape, metrics
(16.0, (), {})
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Protocol

import jax
import jax.numpy as jnp

__all__ = ["BATCH_KEYS", "OPTIONAL_KEYS", "Forward", "Objective", "TokenObjective", "model_forward", "plain_model"]

#: the keys every batch holds ([rows, T] each): inputs, targets, and which targets count
BATCH_KEYS = ("x", "y", "padding_mask")
#: keys a batch may hold besides (int32 [rows, T]): a packed batch's document of each token and its position
OPTIONAL_KEYS = ("segment_ids", "positions")


class Forward(Protocol):
    """The model on a batch: ``forward(params, frozen, batch, *, deterministic, rng) -> logits``.

    >>> callable(model_forward(None))  # the default: ``model.apply`` on the batch
    True
    """

    def __call__(self, params: Any, frozen: Any, batch: Mapping[str, Any], *, deterministic: bool = True,
                 rng: jax.Array | None = None) -> jax.Array: ...


class Objective(Protocol):
    """What a step minimises: ``metrics`` (the names of the metric sums it returns), ``count(batch)`` and
    ``__call__(forward, params, frozen, batch, rng)`` (module doc).

    >>> from theseus.model.gpt import cross_entropy
    >>> TokenObjective(cross_entropy).metrics  # the default objective reports no metric beside the loss
    ()
    """

    metrics: tuple[str, ...]

    def count(self, batch: Mapping[str, Any]) -> jax.Array: ...

    def __call__(self, forward: Forward, params: Any, frozen: Any, batch: Mapping[str, Any],
                 rng: jax.Array | None) -> tuple[jax.Array, dict[str, jax.Array]]: ...


def model_forward(model: Any) -> Forward:
    """The default forward: ``model.apply`` on ``batch["x"]`` (and its `OPTIONAL_KEYS` when present), dropout
    drawn from ``rng`` when one is given; ``frozen`` is not read.

    >>> import jax, jax.numpy as jnp
    >>> from theseus.model import GPT, GPTConfig
    >>> model = GPT(GPTConfig(n_embd=32, n_head=4, n_layers=1, vocab_size=64, block_size=8))
    >>> params = model.init(jax.random.PRNGKey(0), jnp.zeros((1, 8), jnp.int32))["params"]
    >>> model_forward(model)(params, None, {"x": jnp.zeros((2, 8), jnp.int32)}).shape
    (2, 8, 64)
    """

    def forward(params: Any, frozen: Any, batch: Mapping[str, Any], *, deterministic: bool = True,
                rng: jax.Array | None = None) -> jax.Array:
        extras = {key: batch[key] for key in OPTIONAL_KEYS if key in batch}  # only a packed batch has them
        rngs = {"dropout": rng} if rng is not None else None
        return model.apply({"params": params}, batch["x"], deterministic=deterministic, rngs=rngs, **extras)

    return forward


def plain_model(model: Any, params: Any, frozen: Any) -> tuple[Any, Any]:
    """The module and parameters a reader of ``model.apply({"params": ...})`` alone gets (sampling, the
    evaluations): ``(model, params)``, or, for a model trained over a ``frozen`` tree that folds the two into one
    plain model (``model.merged(params, frozen)``: LoRA's), that model.

    >>> class Adapted:
    ...     def merged(self, params, frozen):
    ...         return "base", {**frozen, **params}
    >>> plain_model("gpt", {"w": 1}, None), plain_model(Adapted(), {"a": 1}, {"w": 2})
    (('gpt', {'w': 1}), ('base', {'w': 2, 'a': 1}))
    """
    merged = getattr(model, "merged", None)
    if merged is None or frozen is None:
        return model, params
    return merged(params, frozen)


@dataclasses.dataclass(frozen=True)
class TokenObjective:
    """The mean of a per-token loss ``token_loss(logits, y) -> [rows, T]`` over the tokens ``padding_mask``
    counts: the objective of pretraining (the recipe's ``LOSS`` part), no metrics beside the loss.

    >>> import jax.numpy as jnp
    >>> TokenObjective(lambda logits, y: logits[..., 0]).count({"padding_mask": jnp.array([[True, False]])})
    Array(1., dtype=float32)
    """

    token_loss: Callable[[Any, Any], Any]
    metrics: ClassVar[tuple[str, ...]] = ()

    def count(self, batch: Mapping[str, Any]) -> jax.Array:
        """The masked-in tokens of ``batch`` (float32)."""
        return jnp.sum(jnp.asarray(batch["padding_mask"]).astype(jnp.float32))

    def __call__(self, forward: Forward, params: Any, frozen: Any, batch: Mapping[str, Any],
                 rng: jax.Array | None) -> tuple[jax.Array, dict[str, jax.Array]]:
        """The sum of the masked token losses of ``batch`` under ``forward``; dropout when ``rng`` is given."""
        logits = forward(params, frozen, batch, deterministic=rng is None, rng=rng)
        mask = jnp.asarray(batch["padding_mask"]).astype(jnp.float32)
        return jnp.sum(self.token_loss(logits, batch["y"]) * mask), {}
