"""Decoding: a prefill of the prompts, then one token per step inside one jitted loop, with a key/value cache.

Prompts of different lengths are right-padded into one batch: row b's prompt holds
positions 0..len_b-1 and its new tokens follow at len_b, len_b+1, ..., so every row
sees the positions (learned or RoPE) it would see alone, and no attention mask beyond
"positions up to mine" is needed. The prefill runs the padded prompts through the model
once, writing the cache (`GPT.init_cache`); each step samples a token per row, writes it
into the row's buffer and runs only that token through the model
(``module.apply(..., positions=, cache=)``). ``cache=False`` recomputes the full forward
pass over the buffer at every step instead: the reference the cache must equal, and the
path for a module without ``init_cache``.

Sampling (`Sampler`): greedy (``temperature=0``), temperature, top-k, top-p. The draw of
row b at step t uses the key ``fold_in(fold_in(PRNGKey(seed), b), t)``, so a seed gives
the same tokens on any device count and whether or not the loop stopped early for other rows.

>>> import jax, jax.numpy as jnp
>>> from theseus.model.config import GPTConfig
>>> from theseus.model.gpt import GPT
>>> model = GPT(GPTConfig(n_embd=32, n_head=4, n_layers=1, vocab_size=64, block_size=16))
>>> params = model.init(jax.random.PRNGKey(0), jnp.zeros((1, 16), jnp.int32))["params"]
>>> out = generate_tokens(model, params, [[1, 2, 3], [4]], 5, Sampler(temperature=0.0))
>>> out.tokens.shape, out.counts.tolist()
((2, 5), [5, 5])
>>> bool((out.tokens == generate_tokens(model, params, [[1, 2, 3], [4]], 5, Sampler(0.0), cache=False).tokens).all())
True
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

__all__ = ["Generated", "Sampler", "cached_logits", "filter_logits", "generate_tokens", "sample_logits"]


@dataclasses.dataclass(frozen=True)
class Sampler:
    """How a token is picked from logits: ``temperature`` (0: greedy, the argmax), then only the
    ``top_k`` most likely tokens (0: all), then only the smallest set whose probability reaches
    ``top_p`` (1.0: all).

    >>> Sampler(temperature=0.0).greedy, Sampler(top_k=5).top_k
    (True, 5)
    >>> Sampler(top_p=0.0)
    Traceback (most recent call last):
    ...
    theseus.errors.BadInput: top_p must be in (0, 1], got 0.0
    """

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0

    def __post_init__(self):
        if isinstance(self.temperature, bool) or not isinstance(self.temperature, (int, float)) \
                or not self.temperature >= 0:
            raise BadInput(f"temperature must be a number >= 0 (0: greedy), got {self.temperature!r}")
        if isinstance(self.top_k, bool) or not isinstance(self.top_k, (int, np.integer)) or self.top_k < 0:
            raise BadInput(f"top_k must be an integer >= 0 (0: no top-k), got {self.top_k!r}")
        if isinstance(self.top_p, bool) or not isinstance(self.top_p, (int, float)) or not 0 < self.top_p <= 1:
            raise BadInput(f"top_p must be in (0, 1], got {self.top_p!r}")
        object.__setattr__(self, "temperature", float(self.temperature))
        object.__setattr__(self, "top_k", int(self.top_k))
        object.__setattr__(self, "top_p", float(self.top_p))

    @property
    def greedy(self) -> bool:
        """Whether tokens are the argmax (temperature 0)."""
        return self.temperature == 0.0


@dataclasses.dataclass(frozen=True)
class Generated:
    """What `generate_tokens` returns, as NumPy: ``tokens`` [B, max_new_tokens] (after a row's end-of-text
    token, more of it), ``counts`` [B] (new tokens per row, its end-of-text token included) and
    ``stopped`` [B] (whether the row ended with the end-of-text token).

    >>> g = Generated(np.array([[5, 0, 0]]), np.array([2]), np.array([True]))
    >>> g.row(0)
    [5, 0]
    """

    tokens: np.ndarray
    counts: np.ndarray
    stopped: np.ndarray

    def row(self, b: int) -> list[int]:
        """Row b's new tokens (its end-of-text token included when it stopped on one)."""
        return [int(t) for t in self.tokens[b, : int(self.counts[b])]]


def filter_logits(logits: jax.Array, top_k: int = 0, top_p: float = 1.0) -> jax.Array:
    """``logits`` [..., V] with every token outside the top-k / top-p support set to -inf.

    Top-k keeps the k largest (ties with the k-th kept); top-p then keeps the most likely
    tokens until their probability reaches ``top_p`` (the most likely token always).

    >>> import jax.numpy as jnp
    >>> logits = jnp.log(jnp.array([0.5, 0.3, 0.15, 0.05]))
    >>> jnp.isfinite(filter_logits(logits, top_k=2)).tolist()
    [True, True, False, False]
    >>> jnp.isfinite(filter_logits(logits, top_p=0.7)).tolist()
    [True, True, False, False]
    """
    logits = jnp.asarray(logits, jnp.float32)
    if top_k > 0 and top_k < logits.shape[-1]:
        kth = jax.lax.top_k(logits, top_k)[0][..., -1:]
        logits = jnp.where(logits < kth, -jnp.inf, logits)
    if top_p < 1.0:
        ordered = jnp.sort(logits, axis=-1)[..., ::-1]
        probs = jax.nn.softmax(ordered, axis=-1)
        before = jnp.cumsum(probs, axis=-1) - probs  # probability of the tokens ranked above each one
        kept = before < top_p
        threshold = jnp.min(jnp.where(kept, ordered, jnp.inf), axis=-1, keepdims=True)
        logits = jnp.where(logits < threshold, -jnp.inf, logits)
    return logits


def sample_logits(logits: jax.Array, keys: jax.Array, sampler: Sampler) -> jax.Array:
    """One token per row of ``logits`` [B, V], row b drawn with ``keys[b]`` (unused when greedy).

    >>> import jax, jax.numpy as jnp
    >>> logits = jnp.array([[0.0, 5.0, 1.0]])
    >>> keys = jax.random.split(jax.random.PRNGKey(0), 1)
    >>> sample_logits(logits, keys, Sampler(temperature=0.0)).tolist()
    [1]
    >>> sample_logits(logits, keys, Sampler(top_k=1)).tolist()
    [1]
    """
    logits = jnp.asarray(logits, jnp.float32)
    if sampler.greedy:
        return jnp.argmax(logits, axis=-1).astype(jnp.int32)
    logits = filter_logits(logits / sampler.temperature, sampler.top_k, sampler.top_p)
    return jax.vmap(jax.random.categorical)(keys, logits).astype(jnp.int32)


def _config_value(module: Any, name: str) -> int:
    value = getattr(getattr(module, "config", None), name, None)
    if not isinstance(value, int):
        raise TypeError(f"{type(module).__name__} has no config.{name}: decoding needs a model with one")
    return value


def _padded(prompts: Sequence[Sequence[int]], width: int, vocab_size: int, fill: int) -> tuple[np.ndarray, np.ndarray]:
    """Prompts right-padded with ``fill`` into [B, width], and their lengths; bad prompts raise."""
    if isinstance(prompts, (str, bytes)) or not isinstance(prompts, Sequence) or not prompts:
        raise BadInput("prompts must be a non-empty list of token-id lists")
    rows = np.full((len(prompts), width), fill, np.int32)
    lengths = np.zeros(len(prompts), np.int32)
    for b, prompt in enumerate(prompts):
        ids = np.asarray(list(prompt), dtype=np.int64)
        if ids.ndim != 1 or ids.size == 0:
            raise BadInput(f"prompt {b} is empty: decoding needs at least one token to start from")
        bad = ids[(ids < 0) | (ids >= vocab_size)]
        if bad.size:
            raise BadInput(f"prompt {b} holds token id {int(bad[0])}, outside the model's vocabulary of "
                             f"{vocab_size} (was it encoded with the run's tokenizer?)")
        rows[b, : ids.size] = ids
        lengths[b] = ids.size
    return rows, lengths


@dataclasses.dataclass(frozen=True)
class Vocabulary:
    """What of the model's vocabulary decoding uses: ``eot``, the end-of-text token a row stops at (None:
    never), and ``limit``, the first id never drawn (None: all; a model whose vocabulary is padded past its
    tokenizer's).

    >>> Vocabulary(eot=0, limit=50).limit
    50
    """

    eot: int | None = None
    limit: int | None = None


def generate_tokens(module: Any, params: Any, prompts: Sequence[Sequence[int]], max_new_tokens: int,
                    sampler: Sampler | None = None, *, seed: int = 0, vocab: Vocabulary = Vocabulary(),
                    cache: bool | None = None) -> Generated:
    """Up to ``max_new_tokens`` new tokens after each prompt (lists of token ids), in one jitted loop,
    picked by ``sampler`` (default `Sampler()`: temperature 1) with the keys of ``seed``.

    A row stops at ``vocab.eot`` (None: never; the loop ends early once every row has stopped).
    ``vocab.limit``: tokens at or above it are never drawn (a model whose vocabulary is
    padded past its tokenizer's). ``cache``: decode with the key/value cache (None: when
    the module has ``init_cache``), or recompute the full forward pass per token. The
    longest prompt plus ``max_new_tokens`` must fit the model's ``block_size``.

    >>> import jax, jax.numpy as jnp
    >>> from theseus.model.config import GPTConfig
    >>> from theseus.model.gpt import GPT
    >>> model = GPT(GPTConfig(n_embd=32, n_head=4, n_layers=1, vocab_size=64, block_size=8))
    >>> params = model.init(jax.random.PRNGKey(0), jnp.zeros((1, 8), jnp.int32))["params"]
    >>> a = generate_tokens(model, params, [[1, 2]], 4, Sampler(top_p=0.9), seed=3)
    >>> b = generate_tokens(model, params, [[1, 2]], 4, Sampler(top_p=0.9), seed=3)
    >>> a.row(0) == b.row(0)
    True
    >>> generate_tokens(model, params, [[1, 2, 3, 4, 5]], 4)
    Traceback (most recent call last):
    ...
    theseus.errors.BadInput: the longest prompt (5 tokens) plus max_new_tokens (4) is 9, more than the model's ...
    """
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, (int, np.integer)) or max_new_tokens < 1:
        raise BadInput(f"max_new_tokens must be a positive integer, got {max_new_tokens!r}")
    sampler = Sampler() if sampler is None else sampler
    if not isinstance(sampler, Sampler):
        raise TypeError(f"sampler must be a theseus.model.decode.Sampler, got {sampler!r}")
    block_size, vocab_size = _config_value(module, "block_size"), _config_value(module, "vocab_size")
    eot, vocab_limit = vocab.eot, vocab.limit
    if vocab_limit is not None and not 0 < vocab_limit <= vocab_size:
        raise BadInput(f"vocab_limit must be in 1..{vocab_size} (the model's vocabulary), got {vocab_limit}")
    if eot is not None and not 0 <= eot < vocab_size:
        raise BadInput(f"the end-of-text token {eot} is outside the model's vocabulary of {vocab_size}")
    longest = max((len(p) for p in prompts), default=0) if isinstance(prompts, Sequence) else 0
    if longest + max_new_tokens > block_size:
        raise BadInput(f"the longest prompt ({longest} tokens) plus max_new_tokens ({max_new_tokens}) is "
                         f"{longest + max_new_tokens}, more than the model's block_size ({block_size})")
    rows, lengths = _padded(prompts, longest + int(max_new_tokens), vocab_size, 0 if eot is None else eot)
    use_cache = hasattr(module, "init_cache") if cache is None else bool(cache)
    if use_cache and not hasattr(module, "init_cache"):
        raise TypeError(f"{type(module).__name__} has no init_cache(): decode it with cache=False")
    loop = _Loop(sampler=sampler, prompt_width=longest, new=int(max_new_tokens), eot=eot, vocab_limit=vocab_limit,
                 cached=use_cache)
    tokens, counts, stopped = _decode(module, params, jnp.asarray(rows), jnp.asarray(lengths),
                                      jax.random.PRNGKey(int(seed)), loop=loop)
    return Generated(*(np.asarray(a) for a in jax.device_get((tokens, counts, stopped))))


@dataclasses.dataclass(frozen=True)
class _Loop:
    """What `_decode` compiles for (hashable, so one static argument): the ``sampler``, the ``prompt_width``
    prefilled, the ``new`` steps, the ``eot`` a row stops at, the ``vocab_limit`` drawn under and whether the
    loop is ``cached``."""

    sampler: Sampler
    prompt_width: int
    new: int
    eot: int | None
    vocab_limit: int | None
    cached: bool


@functools.partial(jax.jit, static_argnames=("module", "loop"))
def _decode(module: Any, params: Any, rows: jax.Array, lengths: jax.Array, key: jax.Array, *,
            loop: _Loop) -> tuple[jax.Array, jax.Array, jax.Array]:
    """The decoding loop: prefill (or a full pass), then ``new`` steps of sample, write, forward."""
    sampler, prompt_width, new, eot = loop.sampler, loop.prompt_width, loop.new, loop.eot
    vocab_limit, cached = loop.vocab_limit, loop.cached
    B, width = rows.shape
    variables = {"params": params}
    batch = jnp.arange(B)

    def pick(logits: jax.Array, t: jax.Array) -> jax.Array:
        if vocab_limit is not None:
            logits = jnp.where(jnp.arange(logits.shape[-1]) < vocab_limit, logits, -jnp.inf)
        keys = jax.vmap(lambda b: jax.random.fold_in(jax.random.fold_in(key, b), t))(batch)
        return sample_logits(logits, keys, sampler)

    if cached:
        prompt_positions = jnp.broadcast_to(jnp.arange(prompt_width)[None, :], (B, prompt_width))
        logits, kv = module.apply(variables, rows[:, :prompt_width], positions=prompt_positions,
                                  cache=module.init_cache(B, width))
    else:
        logits, kv = module.apply(variables, rows), ()
    last = logits[batch, lengths - 1]

    def cond(state: tuple) -> jax.Array:
        t, _, _, _, done, _ = state
        return (t < new) & ~jnp.all(done)

    def body(state: tuple) -> tuple:
        t, buffer, kv, last, done, counts = state
        token = pick(last, t)
        if eot is not None:
            token = jnp.where(done, eot, token)
        position = lengths + t
        buffer = buffer.at[batch, position].set(token)
        counts = counts + (~done).astype(jnp.int32)
        if eot is not None:
            done = done | (token == eot)
        if cached:
            logits, kv = module.apply(variables, token[:, None], positions=position[:, None], cache=kv)
            last = logits[:, 0]
        else:
            last = module.apply(variables, buffer)[batch, position]
        return t + 1, buffer, kv, last, done, counts

    state = (jnp.zeros((), jnp.int32), rows, kv, last, jnp.zeros(B, bool), jnp.zeros(B, jnp.int32))
    _, buffer, _, _, done, counts = jax.lax.while_loop(cond, body, state)
    tokens = buffer[batch[:, None], lengths[:, None] + jnp.arange(new)[None, :]]
    return tokens, counts, done


def cached_logits(module: Any, params: Any, tokens: jax.Array, prompt_length: int) -> jax.Array:
    """Logits [B, T, V] of ``tokens`` [B, T] as decoding computes them: a prefill of the first
    ``prompt_length`` tokens, then one token at a time through the cache. They equal the full
    forward pass ``module.apply({"params": params}, tokens)`` up to float rounding.

    >>> import jax, jax.numpy as jnp
    >>> from theseus.model.config import GPTConfig
    >>> from theseus.model.gpt import GPT
    >>> model = GPT(GPTConfig(n_embd=32, n_head=4, n_layers=1, vocab_size=64, block_size=8,
    ...                       activation_dtype="float32"))
    >>> tokens = jnp.array([[5, 9, 2, 7, 1]])
    >>> params = model.init(jax.random.PRNGKey(0), tokens)["params"]
    >>> full = model.apply({"params": params}, tokens)
    >>> float(jnp.abs(cached_logits(model, params, tokens, 2) - full).max()) < 1e-5
    True
    """
    tokens = jnp.asarray(tokens, jnp.int32)
    B, T = tokens.shape
    if not 0 < prompt_length <= T:
        raise BadInput(f"prompt_length must be in 1..{T}, got {prompt_length}")
    variables = {"params": params}
    positions = jnp.broadcast_to(jnp.arange(T)[None, :], (B, T))
    logits, kv = module.apply(variables, tokens[:, :prompt_length], positions=positions[:, :prompt_length],
                              cache=module.init_cache(B, T))

    def step(kv: Any, t: jax.Array) -> tuple[Any, jax.Array]:
        token = jax.lax.dynamic_slice_in_dim(tokens, t, 1, axis=1)
        out, kv = module.apply(variables, token, positions=jnp.full((B, 1), t), cache=kv)
        return kv, out[:, 0]

    _, rest = jax.lax.scan(step, kv, jnp.arange(prompt_length, T))
    return jnp.concatenate([logits, jnp.moveaxis(rest, 0, 1)], axis=1)
