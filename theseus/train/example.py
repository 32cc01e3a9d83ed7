"""A tiny root and config that train in seconds: the examples of the docs and tests.

>>> root, config = tiny_example()
>>> config["architecture"]["n_embd"], config["training"]["batch_size"]
(32, 4)
"""

from __future__ import annotations

import string
import tempfile
from collections.abc import Sequence
from typing import Any

import numpy as np

from theseus.data.store import DatasetWriter
from theseus.errors import BadInput

__all__ = ["CHARACTERS", "CharacterTokenizer", "tiny_example", "tiny_text_model"]

#: the characters of `CharacterTokenizer`, ids 1.. in this order (0 is its end-of-text token)
CHARACTERS = string.digits + string.ascii_letters + string.punctuation + " \n"


def tiny_example(root: str | None = None, dataset: str = "fineweb", tokens: int = 20_000,
                 vocab: int = 128) -> tuple[str, dict]:
    """A root holding a small synthetic contiguous dataset, and a tiny config that trains on it in seconds.

    The tokens follow a simple learnable pattern (so the loss falls); the config is
    a 1-layer, 32-wide GPT, batch 4 x 16 tokens, 3 steps, validation on.

    >>> import os
    >>> root, config = tiny_example(dataset="toy")
    >>> os.listdir(os.path.join(root, "data")), config["data"]
    (['toy'], {'dataset': 'toy'})
    """
    root = root or tempfile.mkdtemp(prefix="theseus-")
    rng = np.random.default_rng(0)
    pattern = (np.arange(tokens) * 7 + rng.integers(0, 3, tokens)) % vocab
    with DatasetWriter(root, dataset, "contiguous", overwrite=True) as writer:
        writer.append("train", pattern[: tokens * 9 // 10])
        writer.append("val", pattern[tokens * 9 // 10:])
    config = {
        "architecture": {"n_embd": 32, "n_layers": 1, "n_head": 2, "block_size": 16, "vocab_size": vocab},
        "data": {"dataset": dataset},
        "training": {"batch_size": 4, "per_device_batch_size": 4, "tokens": 4 * 16 * 3, "validation_steps": 1},
        "logging": {"report_interval": 1, "checkpoint_interval": 1, "validation_interval": 3},
    }
    return root, config


class CharacterTokenizer:
    """One token per character of `CHARACTERS` (ids from 1; 0 is the end-of-text token), with the interface of
    theseus's tokenizers (``encode``, ``decode``, ``eot``, ``vocab_size``, ``name``): text for tiny models.

    >>> tokenizer = CharacterTokenizer()
    >>> tokenizer.encode("1+2="), tokenizer.decode([2, 73, 3]), tokenizer.vocab_size
    ([2, 73, 3, 81], '1+2', 97)
    >>> tokenizer.encode("é")
    Traceback (most recent call last):
    ...
    theseus.errors.BadInput: 'é' is not one of the CharacterTokenizer's characters (digits, ASCII letters, punctuation, space, newline)
    """  # noqa: E501 - the doctest shows the message whole

    name = "characters"

    def __init__(self) -> None:
        self._ids = {c: i + 1 for i, c in enumerate(CHARACTERS)}
        self.eot, self.vocab_size = 0, len(CHARACTERS) + 1

    def encode(self, text: str) -> list[int]:
        """The id of each character of ``text``.

        >>> CharacterTokenizer().encode("ab")
        [11, 12]
        """
        try:
            return [self._ids[c] for c in text]
        except KeyError as e:
            raise BadInput(f"{e.args[0]!r} is not one of the CharacterTokenizer's characters (digits, ASCII "
                             "letters, punctuation, space, newline)") from None

    def decode(self, ids: Sequence[int]) -> str:
        """The text of ``ids`` (the end-of-text token and ids past the characters decode to nothing).

        >>> CharacterTokenizer().decode([11, 0, 12, 120])
        'ab'
        """
        return "".join(CHARACTERS[i - 1] for i in map(int, ids) if 0 < i <= len(CHARACTERS))


def tiny_text_model(block_size: int = 32, seed: int = 0) -> tuple[Any, Any, CharacterTokenizer]:
    """``(model, params, tokenizer)``: an untrained one-layer GPT (initialised with ``seed``) over a
    `CharacterTokenizer`, vocabulary 128: what the text examples of the evaluations run on.

    >>> model, params, tokenizer = tiny_text_model(block_size=16)
    >>> logits = model.apply({"params": params}, np.array([tokenizer.encode("1+2=")]))
    >>> logits.shape
    (1, 4, 128)
    """
    import jax
    import jax.numpy as jnp

    from theseus.model.config import GPTConfig
    from theseus.model.gpt import GPT

    model = GPT(GPTConfig(n_embd=32, n_head=4, n_layers=1, vocab_size=128, block_size=block_size))
    params = model.init(jax.random.PRNGKey(seed), jnp.zeros((1, block_size), jnp.int32))["params"]
    return model, params, CharacterTokenizer()
