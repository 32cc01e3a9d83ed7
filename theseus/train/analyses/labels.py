"""Token ids as text for the pictures: decoded with the job's tokenizer when it loads offline, else the ids.

A tokenizer is loaded only when it needs no network: ``tiktoken``'s bundled encodings
(``cl100k_base``) or a ``huggingface`` folder on local disk. Anything else (a tiktoken encoding that
would download, a tokenizer of a test, none recorded) gives the ids as text.

>>> token_labels(None, [3, 17])
['3', '17']
>>> token_labels({"backend": "tiktoken", "name": "cl100k_base"}, [15339, 1917])
['hello', '·world']
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from theseus.data.tokenizer import OFFLINE_TIKTOKEN, get_tokenizer

__all__ = ["load_tokenizer", "token_labels"]

WIDTH = 12  # characters of a label; longer tokens are cut


def load_tokenizer(description: Mapping[str, Any] | None) -> Any | None:
    """The tokenizer a dataset's ``tokenizer`` record names, when it loads without the network; else None.

    >>> load_tokenizer({"backend": "tiktoken", "name": "gpt2"}) is None   # would download
    True
    """
    if not isinstance(description, Mapping):
        return None
    backend, name = description.get("backend"), description.get("name")
    offline = (backend == "tiktoken" and name in OFFLINE_TIKTOKEN) or (
        backend == "huggingface" and isinstance(name, str) and os.path.isdir(name))
    if not offline:
        return None
    try:
        return get_tokenizer(backend, name)
    except (ValueError, OSError, ImportError):
        return None


def _label(text: str) -> str:
    text = text.replace(" ", "·").replace("\n", "\\n").replace("\t", "\\t")
    return text if len(text) <= WIDTH else text[:WIDTH - 1] + "…"


def token_labels(tokenizer: Any, ids: Sequence[int]) -> list[str]:
    """Each id as a short label: its text (spaces as ``·``, newlines as ``\\n``) or the id itself.

    ``tokenizer`` is a tokenizer, a dataset's ``tokenizer`` record (loaded with `load_tokenizer`) or None.

    >>> token_labels({"backend": "tiktoken", "name": "toy"}, [5])
    ['5']
    """
    if tokenizer is None or isinstance(tokenizer, Mapping):
        tokenizer = load_tokenizer(tokenizer)
    out = []
    for i in ids:
        text = None
        if tokenizer is not None and 0 <= int(i) < int(getattr(tokenizer, "vocab_size", 0) or 0):
            try:
                text = tokenizer.decode([int(i)])
            except (ValueError, KeyError, TypeError):
                text = None
        out.append(_label(text) if text else str(int(i)))
    return out
