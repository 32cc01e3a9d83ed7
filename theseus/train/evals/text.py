"""Perplexity and bits per byte of a text dataset: a tokenized dataset's validation split, or raw texts.

Each document is scored whole by `rolling_loglikelihood` (its first token predicted from the
end-of-text token, every later one from what precedes it within a block-size window), so
an example is one window of at most ``block_size`` predicted tokens and ``eval.length``
caps the windows (-1: all of them; the last document may be scored in part).

- ``perplexity`` = exp(-log-likelihood / tokens scored), per token;
- ``bpb`` (bits per byte) = -log-likelihood / ln 2 / the UTF-8 bytes of the decoded text of the
  tokens scored: comparable across tokenizers.

Parts: ``bits-per-byte`` (the validation split of each dataset of the job:
``eval/<dataset>-val/{bpb,perplexity}``; `gpt/train/pretrain` lists it), ``pydoc`` (the
Python documentation's topics, raw texts that ship with Python: ``eval/pydoc/...``) and
``text-files`` (``.txt``/``.jsonl``/``.parquet`` files named by ``eval.text_files.path``).

>>> text_metrics(logprob=-math.log(2) * 8, tokens=4, nbytes=8)
{'bpb': 1.0, 'perplexity': 4.0}
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from theseus.data import sources
from theseus.data.store import open_dataset
from theseus.errors import BadInput
from theseus.train.evals.likelihood import model_sizes, rolling_loglikelihood
from theseus.train.evaluations import EvalContext, Evaluation, architecture_sizes, example_limit
from theseus.train.generate import tokenizer_of
from theseus.train.parts import part

__all__ = ["BitsPerByte", "PydocText", "TextFiles", "TextFilesSettings", "TextScore", "split_documents",
           "text_metrics", "text_score"]


def text_metrics(logprob: float, tokens: int, nbytes: int) -> dict[str, float]:
    """``bpb`` and ``perplexity`` of a summed natural log-likelihood over ``tokens`` tokens and ``nbytes`` bytes.

    >>> text_metrics(-math.log(2) * 10, tokens=5, nbytes=10)
    {'bpb': 1.0, 'perplexity': 4.0}
    """
    if tokens < 1 or nbytes < 1:
        raise BadInput(f"no text scored ({tokens} tokens, {nbytes} bytes): the dataset is empty")
    return {"bpb": -logprob / math.log(2) / nbytes, "perplexity": math.exp(-logprob / tokens)}


@dataclasses.dataclass(frozen=True)
class TextScore:
    """What `text_score` returns: the summed ``logprob``, the ``tokens`` and UTF-8 ``bytes`` scored, the
    ``windows`` (examples) and ``metrics`` (`text_metrics`).

    >>> TextScore(-2.0, 2, 4, 1).metrics["perplexity"] == math.e
    True
    """

    logprob: float
    tokens: int
    bytes: int
    windows: int

    @property
    def metrics(self) -> dict[str, float]:
        """``{"bpb": ..., "perplexity": ...}``."""
        return text_metrics(self.logprob, self.tokens, self.bytes)


def split_documents(tokens: np.ndarray, eot: int) -> list[np.ndarray]:
    """The documents of a tokenized split: a contiguous stream cut at (and without) its end-of-text tokens, or
    the rows of a padded split without their trailing end-of-text padding; empty ones left out.

    >>> [d.tolist() for d in split_documents(np.array([5, 6, 0, 7, 0, 0]), eot=0)]
    [[5, 6], [7]]
    >>> [d.tolist() for d in split_documents(np.array([[5, 0, 0], [6, 7, 0]]), eot=0)]
    [[5], [6, 7]]
    """
    tokens = np.asarray(tokens)
    if tokens.ndim == 2:
        rows = []
        for row in tokens:
            kept = np.nonzero(row != eot)[0]
            rows.append(row[: kept[-1] + 1] if kept.size else row[:0])
        return [r for r in rows if r.size]
    cuts = np.nonzero(tokens == eot)[0]
    pieces = [piece[1:] if piece.size and piece[0] == eot else piece for piece in np.split(tokens, cuts)]
    return [piece for piece in pieces if piece.size]


def text_score(model: Any, params: Any, tokenizer: Any, documents: Iterable[Sequence[int] | str], *,
               limit: int = -1, batch_size: int = 8, sizes: tuple[int, int] | None = None) -> TextScore:
    """Score ``documents`` (token-id lists, or texts encoded with ``tokenizer``) in block-size windows, the first
    ``limit`` windows (-1: all); bytes are those of the tokens scored, decoded. Each document starts after the
    tokenizer's end-of-text token, or, for a model whose vocabulary does not hold it, after its own first token.
    ``sizes``: ``(block_size, vocab_size)`` of a model without a ``config``.

    >>> import jax, jax.numpy as jnp
    >>> from theseus.data.tokenizer import get_tokenizer
    >>> from theseus.model.config import GPTConfig
    >>> from theseus.model.gpt import GPT
    >>> model = GPT(GPTConfig(n_embd=32, n_head=4, n_layers=1, vocab_size=100288, block_size=8))
    >>> params = model.init(jax.random.PRNGKey(0), jnp.zeros((1, 8), jnp.int32))["params"]
    >>> s = text_score(model, params, get_tokenizer(), ["héllo wörld, said the model", "bye"], limit=2)
    >>> s.windows, s.bytes, s.metrics["perplexity"] > 1
    (2, 29, True)
    """
    block, vocab = model_sizes(model, *(sizes or (None, None)))
    prefix = int(tokenizer.eot) if int(tokenizer.eot) < vocab else None
    skip = 1 if prefix is None else 0  # tokens read but not scored at a document's start
    docs: list[list[int]] = []
    windows = 0
    for document in documents:
        if limit != -1 and windows >= limit:
            break
        ids = list(tokenizer.encode(document)) if isinstance(document, str) else [int(t) for t in document]
        if len(ids) <= skip:
            continue
        n = -(-(len(ids) - skip) // block)  # the windows of the whole document
        n = n if limit == -1 else min(n, limit - windows)
        docs.append(ids[: skip + n * block])
        windows += n
    scored = rolling_loglikelihood(model, params, docs, prefix=prefix, batch_size=batch_size, sizes=(block, vocab))
    nbytes = sum(len(tokenizer.decode(d[skip:]).encode("utf-8")) for d in docs)
    return TextScore(sum(s.logprob for s in scored), sum(s.tokens for s in scored), nbytes, windows)


class TextEvaluation(Evaluation):
    """Base of the text evaluations: ``documents(context)`` (token lists or texts) scored by `text_score` under
    ``eval/<name>/``; ``eval.length`` caps the windows.

    >>> TextEvaluation.documents(None)
    Traceback (most recent call last):
    ...
    NotImplementedError: TextEvaluation must implement documents()
    """

    @classmethod
    def documents(cls, context: EvalContext) -> Iterable[Sequence[int] | str]:
        """The documents to score (override)."""
        raise NotImplementedError(f"{cls.__name__} must implement documents()")

    @classmethod
    def score(cls, context: EvalContext, documents: Iterable[Sequence[int] | str], name: str) -> dict[str, float]:
        """``eval/<name>/bpb`` and ``eval/<name>/perplexity`` of ``documents``."""
        result = text_score(context.model, context.params, tokenizer_of(context.config, root=context.root), documents,
                            limit=example_limit(context.config), sizes=architecture_sizes(context.config))
        return {f"eval/{name}/{metric}": value for metric, value in result.metrics.items()}

    @classmethod
    def run(cls, context: EvalContext) -> dict[str, float]:
        """Score ``documents(context)`` under ``eval/<part name>/``."""
        return cls.score(context, cls.documents(context), cls.name)


@part("evaluation", "bits-per-byte", "Bits per byte and perplexity of each dataset's validation split: "
                                     "eval/<dataset>-val/{bpb,perplexity}.")
class BitsPerByte(TextEvaluation):
    """``eval/<dataset>-val/bpb`` and ``.../perplexity`` of the validation split of each dataset of the job, its
    documents scored from their start (``eval.length`` windows, -1: all).

    >>> BitsPerByte.name, BitsPerByte.Config is None
    ('bits-per-byte', True)
    """

    @classmethod
    def run(cls, context: EvalContext) -> dict[str, float]:
        """Score the val split of each of ``context.sources`` in ``context.root``."""
        if context.root is None:
            raise BadInput("bits-per-byte reads the job's datasets: this context has no root")
        eot = int(tokenizer_of(context.config, root=context.root).eot)
        suffix = context.config.data.suffix
        out: dict[str, float] = {}
        for name in context.sources:
            dataset = open_dataset(context.root, f"{name}{suffix}", hint=f"data/tokenize/{name}")
            out.update(cls.score(context, split_documents(dataset.tokens("val"), eot), f"{name}-val"))
        return out


@part("evaluation", "pydoc", "Bits per byte and perplexity of the Python documentation's topics (no network): "
                             "eval/pydoc/{bpb,perplexity}.")
class PydocText(TextEvaluation):
    """The topics of ``pydoc_data`` (shipped with Python) as raw texts, in order.

    >>> next(iter(PydocText.documents(None)))[:19]
    'The "assert" statem'
    """

    @classmethod
    def documents(cls, context: EvalContext) -> Iterable[str]:
        """The pydoc topics (the corpus of ``data/tokenize/pydoc``)."""
        return sources.pydoc_corpus()


@dataclasses.dataclass
class TextFilesSettings:
    """``eval.text_files``: the ``path`` (files or globs: ``.txt``, ``.jsonl``/``.parquet`` with a ``text`` field).

    >>> TextFilesSettings().path
    ''
    """

    path: str = ""


@dataclasses.dataclass
class TextFilesSection:
    """What the ``text-files`` part adds to ``eval``.

    >>> TextFilesSection().text_files.path
    ''
    """

    text_files: TextFilesSettings = dataclasses.field(default_factory=TextFilesSettings)


@part("evaluation", "text-files", "Bits per byte and perplexity of raw texts in files (eval.text_files.path): "
                                  "eval/text-files/{bpb,perplexity}.")
class TextFiles(TextEvaluation):
    """Raw texts of ``eval.text_files.path``, read with `theseus.data.sources.text_files`.

    >>> from omegaconf import OmegaConf
    >>> TextFiles.check(OmegaConf.create({"eval": {"text_files": {"path": ""}}}))
    Traceback (most recent call last):
    ...
    theseus.errors.BadInput: eval.text_files.path is empty: name the .txt / .jsonl / .parquet files to score
    """

    section = "eval"
    Config = TextFilesSection

    @classmethod
    def check(cls, config: Any) -> None:
        """A path is given."""
        if not config.eval.text_files.path:
            raise BadInput("eval.text_files.path is empty: name the .txt / .jsonl / .parquet files to score")

    @classmethod
    def documents(cls, context: EvalContext) -> Iterable[str]:
        """The texts of the files."""
        return sources.text_files(context.config.eval.text_files.path)
