"""Log-likelihood of continuations given contexts, batched and jitted: what scoring evaluations are built on.

`loglikelihood` scores ``(context_tokens, continuation_tokens)`` pairs: per pair, the
summed log-probability of the continuation's tokens given everything before them, whether
each of them is the model's argmax (greedy) at its position, and their count. A pair
longer than the model's block (plus the one token the last position predicts) keeps its
*last* tokens: the context is cut from the left, never the continuation (a continuation
longer than the block is an error). `rolling_loglikelihood` scores whole token sequences
(documents) in windows of the block size, each token predicted once from as much of what
precedes it as its window holds, starting from a ``prefix`` token (the end-of-text
token): perplexity, bits per byte, and lm-eval's ``loglikelihood_rolling``.

Shapes are fixed: pairs are sorted by length and scored ``batch_size`` rows at a time,
each batch right-padded to a bucket length (a power of two, at most the block size) and
to ``batch_size`` rows, so the scoring function compiles once per bucket, not once per
example. Right padding changes nothing before it (the model is causal).

>>> import jax, jax.numpy as jnp
>>> from theseus.model.config import GPTConfig
>>> from theseus.model.gpt import GPT
>>> model = GPT(GPTConfig(n_embd=32, n_head=4, n_layers=1, vocab_size=64, block_size=16))
>>> params = model.init(jax.random.PRNGKey(0), jnp.zeros((1, 16), jnp.int32))["params"]
>>> [a, b] = loglikelihood(model, params, [([1, 2, 3], [4, 5]), ([7], [8])])
>>> a.tokens, b.tokens, a.logprob < 0
(2, 1, True)
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from theseus.errors import BadInput

__all__ = ["Scored", "bucket_length", "loglikelihood", "model_sizes", "rolling_loglikelihood", "rolling_pairs"]

#: the shortest bucket: shorter rows are padded to it
MIN_BUCKET = 8


@dataclasses.dataclass(frozen=True)
class Scored:
    """The score of one continuation: ``logprob`` (summed natural log-probability of its tokens),
    ``greedy`` (every token was the argmax at its position) and ``tokens`` (how many were scored).

    >>> s = Scored(-2.5, False, 2)
    >>> s.logprob / s.tokens
    -1.25
    """

    logprob: float
    greedy: bool
    tokens: int


def bucket_length(n: int, block_size: int) -> int:
    """The padded length of a row of ``n`` tokens: the next power of two (at least `MIN_BUCKET`), at most
    ``block_size``.

    >>> [bucket_length(n, 48) for n in (1, 9, 17, 33, 48)]
    [8, 16, 32, 48, 48]
    """
    if not 0 < n <= block_size:
        raise BadInput(f"a row holds 1..block_size ({block_size}) tokens, got {n}")
    return min(max(MIN_BUCKET, 1 << (n - 1).bit_length()), block_size)


def model_sizes(model: Any, block_size: int | None = None, vocab_size: int | None = None) -> tuple[int, int]:
    """``(block_size, vocab_size)``: the ones given, else the model's ``config``'s; neither is a TypeError.

    >>> from theseus.model.config import GPTConfig
    >>> from theseus.model.gpt import GPT
    >>> model_sizes(GPT(GPTConfig(block_size=32, vocab_size=64))), model_sizes(object(), 8, 16)
    ((32, 64), (8, 16))
    """
    config = getattr(model, "config", None)
    block = getattr(config, "block_size", None) if block_size is None else int(block_size)
    vocab = getattr(config, "vocab_size", None) if vocab_size is None else int(vocab_size)
    if not isinstance(block, int) or not isinstance(vocab, int):
        raise TypeError(f"{type(model).__name__} has no config.block_size / config.vocab_size: give them to score")
    return block, vocab


def _ids(tokens: Any, what: str, vocab: int) -> list[int]:
    if isinstance(tokens, (str, bytes)):
        raise TypeError(f"{what} must be a list of token ids, got a {type(tokens).__name__} (encode it first)")
    ids = [int(t) for t in tokens]
    bad = [t for t in ids if not 0 <= t < vocab]
    if bad:
        raise BadInput(f"{what} holds token id {bad[0]}, outside the model's vocabulary of {vocab} "
                         "(was it encoded with the run's tokenizer?)")
    return ids


def _rows(pairs: Sequence[tuple[Sequence[int], Sequence[int]]], block: int, vocab: int) -> list[tuple[list[int], int]]:
    """Per pair: the model input (context + continuation without its last token, left-truncated to the block)
    and how many of its last positions predict the continuation."""
    rows = []
    for i, pair in enumerate(pairs):
        if not isinstance(pair, Sequence) or len(pair) != 2:
            raise BadInput(f"pair {i} must be (context_tokens, continuation_tokens), got {pair!r}")
        context, continuation = _ids(pair[0], f"the context of pair {i}", vocab), \
            _ids(pair[1], f"the continuation of pair {i}", vocab)
        if not context:
            raise BadInput(f"the context of pair {i} is empty: the first continuation token needs a token before "
                             "it (give the end-of-text token as the context)")
        if not continuation:
            raise BadInput(f"the continuation of pair {i} is empty: there is nothing to score")
        if len(continuation) > block:
            raise BadInput(f"the continuation of pair {i} has {len(continuation)} tokens, more than the model's "
                             f"block_size ({block}): score it with rolling_loglikelihood")
        full = (context + continuation)[-(block + 1):]
        rows.append((full, len(continuation)))
    return rows


@functools.partial(jax.jit, static_argnames=("module",))
def _score(module: Any, params: Any, x: jax.Array, y: jax.Array, mask: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Per row: the summed log-probability of the targets ``y`` where ``mask``, and whether all were the argmax."""
    logits = module.apply({"params": params}, x).astype(jnp.float32)
    # the target's logit less the log-sum-exp: no second [B, T, V] array of log-probabilities
    target = jnp.take_along_axis(logits, y[..., None], axis=-1)[..., 0] - jax.nn.logsumexp(logits, axis=-1)
    hits = jnp.argmax(logits, axis=-1) == y
    return jnp.sum(jnp.where(mask, target, 0.0), axis=-1), jnp.all(hits | ~mask, axis=-1)


def loglikelihood(model: Any, params: Any, pairs: Sequence[tuple[Sequence[int], Sequence[int]]], *,
                  batch_size: int = 16, sizes: tuple[int, int] | None = None) -> list[Scored]:
    """A `Scored` per ``(context_tokens, continuation_tokens)`` pair, in order: the continuation's summed
    log-probability given the context, whether it is the greedy continuation, its token count.

    A context longer than the block leaves out its first tokens; ``batch_size`` rows are scored per
    call of the jitted scorer. ``sizes``: ``(block_size, vocab_size)`` of a model without a ``config``.

    >>> import jax, jax.numpy as jnp
    >>> from theseus.model.config import GPTConfig
    >>> from theseus.model.gpt import GPT
    >>> model = GPT(GPTConfig(n_embd=32, n_head=4, n_layers=1, vocab_size=64, block_size=8))
    >>> params = model.init(jax.random.PRNGKey(0), jnp.zeros((1, 8), jnp.int32))["params"]
    >>> logits = model.apply({"params": params}, jnp.array([[3, 4]]))
    >>> by_hand = float(jax.nn.log_softmax(logits[0, 1])[9])
    >>> [s] = loglikelihood(model, params, [([3, 4], [9])])
    >>> abs(s.logprob - by_hand) < 1e-5, s.tokens
    (True, 1)
    >>> loglikelihood(model, params, [([], [9])])
    Traceback (most recent call last):
    ...
    theseus.errors.BadInput: the context of pair 0 is empty: the first continuation token needs a token before it (give the end-of-text token as the context)
    """  # noqa: E501 - the doctest shows the message whole
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise BadInput(f"batch_size must be a positive integer, got {batch_size!r}")
    block, vocab = model_sizes(model, *(sizes or (None, None)))
    rows = _rows(list(pairs), block, vocab)
    order = sorted(range(len(rows)), key=lambda i: -len(rows[i][0]))  # similar lengths share a bucket
    out: list[Scored | None] = [None] * len(rows)
    for start in range(0, len(order), batch_size):
        chunk = order[start:start + batch_size]
        width = bucket_length(max(len(rows[i][0]) - 1 for i in chunk), block)
        x = np.zeros((batch_size, width), np.int32)
        y = np.zeros((batch_size, width), np.int32)
        mask = np.zeros((batch_size, width), bool)
        for r, i in enumerate(chunk):
            full, n = rows[i]
            length = len(full) - 1
            x[r, :length], y[r, :length] = full[:-1], full[1:]
            mask[r, length - n:length] = True
        logprob, greedy = jax.device_get(_score(model, params, x, y, mask))
        for r, i in enumerate(chunk):
            out[i] = Scored(float(logprob[r]), bool(greedy[r]), rows[i][1])
    return out  # type: ignore[return-value]


def rolling_pairs(tokens: Sequence[int], block_size: int, prefix: int | None) -> list[tuple[list[int], list[int]]]:
    """The ``(context, continuation)`` windows that score every token of ``tokens`` once: continuations of
    ``block_size`` tokens (the last one shorter), each after the ``block_size`` tokens before it, ``prefix``
    first (None: the first token is only context, the others are scored).

    >>> rolling_pairs([5, 6, 7, 8, 9], 2, prefix=0)
    [([0], [5, 6]), ([5, 6], [7, 8]), ([7, 8], [9])]
    >>> rolling_pairs([5, 6, 7], 2, prefix=None)
    [([5], [6, 7])]
    """
    sequence = [int(t) for t in tokens] if prefix is None else [int(prefix), *(int(t) for t in tokens)]
    if len(sequence) < 2:
        raise BadInput("a rolling log-likelihood needs at least one token to score"
                         + (" after the first (there is no prefix token)" if prefix is None else ""))
    return [(sequence[max(0, s + 1 - block_size):s + 1], sequence[s + 1:s + 1 + block_size])
            for s in range(0, len(sequence) - 1, block_size)]


def rolling_loglikelihood(model: Any, params: Any, documents: Sequence[Sequence[int]], *, prefix: int | None,
                          batch_size: int = 16, sizes: tuple[int, int] | None = None) -> list[Scored]:
    """A `Scored` per document (a list of token ids): every token's log-probability summed, each predicted from
    the tokens before it in windows of the model's block size, the first from ``prefix`` (the end-of-text token;
    None: the first token is not scored, only read). ``greedy``: every token was the argmax.

    >>> import math, jax, jax.numpy as jnp
    >>> from theseus.model.config import GPTConfig
    >>> from theseus.model.gpt import GPT
    >>> model = GPT(GPTConfig(n_embd=32, n_head=4, n_layers=1, vocab_size=64, block_size=4))
    >>> params = model.init(jax.random.PRNGKey(0), jnp.zeros((1, 4), jnp.int32))["params"]
    >>> [doc] = rolling_loglikelihood(model, params, [[5, 6, 7, 8, 9, 10]], prefix=0)
    >>> doc.tokens, math.exp(-doc.logprob / doc.tokens) > 1   # the document's perplexity
    (6, True)
    """
    block, _ = model_sizes(model, *(sizes or (None, None)))
    windows: list[tuple[list[int], list[int]]] = []
    owners: list[int] = []
    for d, tokens in enumerate(documents):
        pairs = rolling_pairs(tokens, block, prefix)
        windows += pairs
        owners += [d] * len(pairs)
    scored = loglikelihood(model, params, windows, batch_size=batch_size, sizes=sizes)
    totals = [[0.0, True, 0] for _ in documents]
    for d, s in zip(owners, scored):
        totals[d][0] += s.logprob
        totals[d][1] = totals[d][1] and s.greedy
        totals[d][2] += s.tokens
    return [Scored(float(lp), bool(g), int(n)) for lp, g, n in totals]
