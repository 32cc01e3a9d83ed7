"""Text from a training job's model: prompts in, one `Sample` per prompt out, through the run's tokenizer.

`generate` encodes the prompts with the tokenizer, decodes new tokens with
`theseus.model.decode.generate_tokens` (a key/value cache, one jitted loop), stops a
sample at the tokenizer's end-of-text token, cuts it at the first stop string, and
decodes the text. ``Trainer.generate`` and ``job.generate`` call it with the trainer's
model, parameters and tokenizer (`tokenizer_of` its config's ``tokenizer`` section).

>>> import jax, jax.numpy as jnp
>>> from theseus.data.tokenizer import get_tokenizer
>>> from theseus.model.config import GPTConfig
>>> from theseus.model.gpt import GPT
>>> model = GPT(GPTConfig(n_embd=32, n_head=4, n_layers=1, vocab_size=128, block_size=16))
>>> params = model.init(jax.random.PRNGKey(0), jnp.zeros((1, 16), jnp.int32))["params"]
>>> [sample] = generate(model, params, get_tokenizer(), "1+2=", max_new_tokens=4, temperature=0.0)
>>> sample.prompt, len(sample.tokens), sample.stop
('1+2=', 4, 'length')
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from theseus.data.tokenizer import get_tokenizer
from theseus.errors import BadInput
from theseus.model.decode import Sampler, Vocabulary, generate_tokens

__all__ = ["Decoding", "Sample", "generate", "tokenizer_of"]

#: why a sample ended: its end-of-text token, a stop string, or max_new_tokens
STOPS = ("eot", "stop", "length")
#: the largest seed: JAX's keys hold 32 bits of it
MAX_SEED = 2**32 - 1


@dataclasses.dataclass(frozen=True)
class Sample:
    """One generated sample: its ``prompt``, the new ``text`` (cut before a stop string), the new ``tokens``
    (the end-of-text token left out; for a stop string, up to the token that completed it) and ``stop``,
    why it ended: ``"eot"``, ``"stop"`` (a stop string) or ``"length"`` (``max_new_tokens``).

    >>> s = Sample("1+2=", "3", (18,), "eot")
    >>> s.prompt + s.text
    '1+2=3'
    """

    prompt: str
    text: str
    tokens: tuple[int, ...]
    stop: str


@dataclasses.dataclass(frozen=True)
class Decoding:
    """How `generate` draws: ``max_new_tokens`` per sample, ``temperature`` (0: greedy), ``top_k`` (0: every
    token), ``top_p`` (1.0: every token), ``seed``, the ``stop`` strings and ``cache`` (False: a full forward pass
    per token instead of the key/value cache); the keywords `generate` takes, kept together.

    >>> Decoding(temperature=0.0).max_new_tokens
    64
    """

    max_new_tokens: int = 64
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int = 0
    stop: str | Sequence[str] | None = None
    cache: bool | None = None


def tokenizer_of(config: Any, recorded: Iterable[Mapping | None] = (), root: str | None = None) -> Any:
    """The tokenizer of a training job's config (its ``tokenizer`` section); ``recorded``: the tokenizers
    its datasets' ``meta.json`` name (None: not recorded), which must be the same one; ``root``: the job's root,
    where a huggingface tokenizer named by a relative folder of it is read (an imported model's).

    >>> from theseus.jobs import get_job
    >>> config = get_job("gpt/train/pretrain").defaults()
    >>> tokenizer_of(config).name
    'cl100k_base'
    >>> tokenizer_of(config, [{"backend": "huggingface", "name": "/data/tok"}])
    Traceback (most recent call last):
    ...
    theseus.errors.BadInput: the job's tokenizer section names tiktoken 'cl100k_base' but its data was tokenized with huggingface '/data/tok': set tokenizer.backend and tokenizer.name to the dataset's
    """  # noqa: E501 - the doctest shows the message whole
    section = config.tokenizer
    for described in recorded:
        if not described:
            continue
        theirs = (described.get("backend"), described.get("name"))
        if theirs != (section.backend, section.name):
            raise BadInput(f"the job's tokenizer section names {section.backend} {section.name!r} but its data was "
                             f"tokenized with {theirs[0]} {theirs[1]!r}: set tokenizer.backend and tokenizer.name to "
                             "the dataset's")
    return get_tokenizer(section.backend, section.name, use_fast=bool(section.huggingface.use_fast),
                         use_remote_code=bool(section.huggingface.use_remote_code), root=root)


def _prompts(prompts: str | Sequence[str]) -> list[str]:
    if isinstance(prompts, str):
        prompts = [prompts]
    if not isinstance(prompts, Sequence) or not prompts:
        raise BadInput("prompts must be a string or a non-empty list of strings")
    for i, prompt in enumerate(prompts):
        if not isinstance(prompt, str):
            raise TypeError(f"prompt {i} must be a string, got {type(prompt).__name__}")
        if not prompt:
            raise BadInput(f"prompt {i} is empty: generation needs some text to continue")
    return list(prompts)


def _stops(stop: str | Sequence[str] | None) -> list[str]:
    stops = [] if stop is None else [stop] if isinstance(stop, str) else list(stop)
    for s in stops:
        if not isinstance(s, str) or not s:
            raise BadInput(f"a stop string must be a non-empty string, got {s!r}")
    return stops


def _check_draws(temperature: Any, seed: Any) -> None:
    """Bad sampling settings the `Sampler` lets through: an infinite temperature (its draws are NaN) and a seed
    outside JAX's 32-bit keys (larger ones wrap around to a smaller seed's text, or overflow)."""
    if isinstance(temperature, (int, float)) and not isinstance(temperature, bool) and math.isinf(temperature):
        raise BadInput(f"temperature must be a finite number >= 0 (0: greedy), got {temperature!r}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= seed <= MAX_SEED:
        raise BadInput(f"seed must be an integer in 0..{MAX_SEED} (a JAX key holds 32 bits), got {seed!r}")


def _finish(prompt: str, ids: list[int], stopped: bool, tokenizer: Any, stops: list[str]) -> Sample:
    """The sample of one row: drop its end-of-text token, cut at the first stop string."""
    if stopped:
        ids = ids[:-1]
    text = tokenizer.decode(ids)
    cuts = [text.find(s) for s in stops if s in text]
    if not cuts:
        return Sample(prompt, text, tuple(ids), "eot" if stopped else "length")
    cut = min(cuts)
    end = next(n for n in range(1, len(ids) + 1) if any(s in tokenizer.decode(ids[:n]) for s in stops))
    return Sample(prompt, text[:cut], tuple(ids[:end]), "stop")


def generate(model: Any, params: Any, tokenizer: Any, prompts: str | Sequence[str], **options: Any) -> list[Sample]:
    """A `Sample` per prompt (a string or a list of them), continued by ``model`` with ``params``; ``options``:
    the fields of `Decoding` (an unknown one is a TypeError, as for any keyword).

    ``temperature`` 0 is greedy; ``top_k`` 0 and ``top_p`` 1.0 keep every token; the same
    ``seed`` gives the same text (sample i of a call draws with the keys of (seed, i)). A
    sample ends at the tokenizer's end-of-text token, after ``max_new_tokens``, or at the
    first of the ``stop`` strings (the text is cut before it). Tokens the tokenizer cannot
    decode (a vocabulary padded past it) are never drawn. ``cache=False`` recomputes the
    full forward pass per token instead of using the key/value cache. ``seed`` is in
    0..`MAX_SEED`; ``temperature`` is finite.

    >>> import jax, jax.numpy as jnp
    >>> from theseus.data.tokenizer import get_tokenizer
    >>> from theseus.model.config import GPTConfig
    >>> from theseus.model.gpt import GPT
    >>> model = GPT(GPTConfig(n_embd=32, n_head=4, n_layers=1, vocab_size=128, block_size=16))
    >>> params = model.init(jax.random.PRNGKey(0), jnp.zeros((1, 16), jnp.int32))["params"]
    >>> a = generate(model, params, get_tokenizer(), ["1+2=", "7"], max_new_tokens=3, seed=4)
    >>> a == generate(model, params, get_tokenizer(), ["1+2=", "7"], max_new_tokens=3, seed=4)
    True
    >>> generate(model, params, get_tokenizer(), [""])
    Traceback (most recent call last):
    ...
    theseus.errors.BadInput: prompt 0 is empty: generation needs some text to continue
    >>> generate(model, params, get_tokenizer(), "7", seed=2**32)
    Traceback (most recent call last):
    ...
    theseus.errors.BadInput: seed must be an integer in 0..4294967295 (a JAX key holds 32 bits), got 4294967296
    """
    decoding = Decoding(**options)
    texts = _prompts(prompts)
    stops = _stops(decoding.stop)
    _check_draws(decoding.temperature, decoding.seed)
    sampler = Sampler(temperature=decoding.temperature, top_k=decoding.top_k, top_p=decoding.top_p)
    vocab_size = int(model.config.vocab_size) if hasattr(model, "config") else None
    eot = int(tokenizer.eot)
    if vocab_size is not None and eot >= vocab_size:
        eot = None  # a model too small for the tokenizer's end-of-text token cannot draw it: samples run to length
    limit = int(tokenizer.vocab_size)
    limit = limit if vocab_size is not None and limit < vocab_size else None
    ids = [list(tokenizer.encode(text)) for text in texts]
    out = generate_tokens(model, params, ids, decoding.max_new_tokens, sampler, seed=decoding.seed,
                          vocab=Vocabulary(eot=eot, limit=limit), cache=decoding.cache)
    return [_finish(text, out.row(b), bool(out.stopped[b]), tokenizer, stops) for b, text in enumerate(texts)]
