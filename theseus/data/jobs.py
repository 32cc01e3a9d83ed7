"""The registered ``data/tokenize/*`` jobs: tokenize a corpus into ``<root>/data/<dataset>/``.

Contiguous (pretraining) datasets: ``data/tokenize/fineweb``,
``data/tokenize/text`` (your own files) and ``data/tokenize/pydoc`` (the
Python documentation that ships with Python: no network, no download).
Padded (instruction) datasets: ``data/tokenize/addition``,
``data/tokenize/alpaca`` and ``data/tokenize/chat`` (conversations rendered
with the tokenizer's chat template, optionally packed).

Each job checks its inputs in ``setup()`` (tokenizer, corpus paths, an existing
dataset without ``data.overwrite``), so bad input writes nothing. While it runs
it writes node records ``data/samples``, ``data/train_tokens`` and
``data/val_tokens`` every 1,000 samples (one node per report), logs a
``DATA | ...`` line, and shows a progress bar on a terminal.

>>> import tempfile
>>> from theseus.quick import quick
>>> with quick(tempfile.mkdtemp()) as q:
...     _ = q.build("data/tokenize/pydoc", "tokenize-pydoc")
...     q.config.data.max_samples = 20
...     summary = q.create()()
>>> summary["dataset"], summary["samples"]
('pydoc', 20)
"""

from __future__ import annotations

import functools
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from theseus.config import to_dict
from theseus.data import sources
from theseus.data.chat import load_template
from theseus.data.store import META, DatasetWriter, check_name, data_dir
from theseus.data.tokenize import OVERLONG, Reading, tokenize_chat, tokenize_contiguous, tokenize_padded
from theseus.data.tokenizer import TokenizerConfig, get_tokenizer
from theseus.errors import AlreadyExists, BadInput
from theseus.jobs import Job, job
from theseus.store.layout import DATA

__all__ = [
    "TokenizeAddition", "TokenizeAlpaca", "TokenizeChat", "TokenizeFineweb", "TokenizeJob", "TokenizePydoc",
    "TokenizeText", "TokenizerConfig",
]

# -- configs ------------------------------------------------------------------


@dataclass
class FinewebSource:
    """``data.fineweb``: the hub snapshot, or local parquet files in FineWeb's format."""

    snapshot: str = "CC-MAIN-2022-21"
    data_files: list[str] | None = None


@dataclass
class TextSource:
    """``data.text``: local .txt / .jsonl / .parquet files (globs allowed) and the dataset name."""

    paths: list[str] = field(default_factory=list)
    dataset: str = "text"


@dataclass
class AdditionSource:
    """``data.addition``: how many sums and how many digits per operand."""

    n: int = 10000
    max_digits: int = 3


@dataclass
class AlpacaSource:
    """``data.alpaca``: local .json / .jsonl files in Alpaca's format (None: the hub's tatsu-lab/alpaca)."""

    data_files: list[str] | None = None


@dataclass
class ChatSource:
    """``data.chat``: local .jsonl files of ``{"messages": [...]}`` (or ``prompt`` / ``response``) records, or
    folders of a Hugging Face dataset saved with ``save_to_disk``; the dataset name; the chat template
    ("": the tokenizer's own, ChatML for tiktoken; "chatml"; or the path of a .jinja file).

    >>> ChatSource().dataset, ChatSource().template
    ('chat', '')
    """

    paths: list[str] = field(default_factory=list)
    dataset: str = "chat"
    template: str = ""


@dataclass
class ContiguousData:
    """The ``data`` keys every contiguous tokenize job shares, in the order config.yaml lists them."""

    val_pct: float = 0.05
    seed: int = 2357
    max_samples: int = -1
    max_tokens: int = -1
    suffix: str = ""


@dataclass
class FinewebData(ContiguousData):
    fineweb: FinewebSource = field(default_factory=FinewebSource)
    overwrite: bool = False


@dataclass
class TextData(ContiguousData):
    text: TextSource = field(default_factory=TextSource)
    overwrite: bool = False


@dataclass
class PydocData(ContiguousData):
    overwrite: bool = False


@dataclass
class PaddedData:
    """The ``data`` keys every padded tokenize job shares (no token budget: rows are fixed-size)."""

    val_pct: float = 0.05
    seed: int = 2357
    max_samples: int = -1
    suffix: str = ""


@dataclass
class AdditionData(PaddedData):
    block_size: int = 32
    addition: AdditionSource = field(default_factory=AdditionSource)
    overwrite: bool = False


@dataclass
class AlpacaData(PaddedData):
    block_size: int = 512
    alpaca: AlpacaSource = field(default_factory=AlpacaSource)
    overwrite: bool = False


@dataclass
class ChatData(PaddedData):
    """``data.overlong``: a conversation longer than ``block_size`` is cut to it (truncate) or left out (drop);
    ``data.pack``: several conversations per row, with segment ids.

    >>> ChatData().overlong, ChatData().pack, ChatData().block_size
    ('truncate', False, 1024)
    """

    block_size: int = 1024
    overlong: str = "truncate"
    pack: bool = False
    chat: ChatSource = field(default_factory=ChatSource)
    overwrite: bool = False


@dataclass
class FinewebConfig:
    data: FinewebData = field(default_factory=FinewebData)
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)


@dataclass
class TextConfig:
    data: TextData = field(default_factory=TextData)
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)


@dataclass
class PydocConfig:
    data: PydocData = field(default_factory=PydocData)
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)


@dataclass
class AdditionConfig:
    data: AdditionData = field(default_factory=AdditionData)
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)


@dataclass
class AlpacaConfig:
    data: AlpacaData = field(default_factory=AlpacaData)
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)


@dataclass
class ChatConfig:
    """The config of ``data/tokenize/chat``: its ``data`` keys and the ``tokenizer``.

    >>> ChatConfig().tokenizer.backend
    'tiktoken'
    """

    data: ChatData = field(default_factory=ChatData)
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)


# -- the shared job -------------------------------------------------------------


def tokenizer(backend: str, name: str, use_fast: bool = True, use_remote_code: bool = False, root: str | None = None):
    """``get_tokenizer(...)``, with tiktoken encodings cached (they are immutable and slow to build).

    >>> tokenizer("tiktoken", "cl100k_base") is tokenizer("tiktoken", "cl100k_base")
    True
    """
    if backend == "tiktoken":
        return _tiktoken(name)
    return get_tokenizer(backend, name, use_fast=use_fast, use_remote_code=use_remote_code, root=root)


@functools.lru_cache(maxsize=4)
def _tiktoken(name: str):
    return get_tokenizer("tiktoken", name)


def num_threads() -> int:
    """Encoder threads: every core this process may use (at most 16).

    >>> num_threads() >= 1
    True
    """
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return max(1, min(cores, 16))


class TokenizeJob(Job):
    """Tokenize one corpus into ``<root>/data/<dataset><suffix>/`` (the base of the data/tokenize jobs).

    A subclass sets ``Config``, ``dataset`` (the folder name before ``data.suffix``)
    and ``kind`` (``contiguous`` or ``padded``), and implements ``check_source()``
    (raise on bad input, in setup) and ``source()`` (the documents, or
    (prompt, response) pairs, in run).

    >>> TokenizeJob.kind
    'contiguous'
    """

    dataset: str = ""
    kind: str = "contiguous"

    @property
    def dataset_name(self) -> str:
        """The dataset folder this job writes: ``dataset`` + ``data.suffix``.

        >>> import tempfile
        >>> TokenizeFineweb.create(tempfile.mkdtemp(), "t", {"data": {"suffix": "-small"}}).dataset_name
        'fineweb-small'
        """
        return self.dataset + self.config.data.suffix

    def setup(self) -> None:
        """Check the config, tokenizer, corpus and destination; nothing is written.

        >>> import tempfile
        >>> TokenizePydoc.create(tempfile.mkdtemp(), "t").tokenizer.name
        'cl100k_base'
        """
        super().setup()
        data = self.config.data
        if not 0 <= data.val_pct < 1:
            raise BadInput(f"data.val_pct must be in [0, 1), got {data.val_pct}")
        limits = {"data.max_samples": data.max_samples}
        if "max_tokens" in data:
            limits["data.max_tokens"] = data.max_tokens
        for key, value in limits.items():
            if value == 0 or value < -1:
                raise BadInput(f"{key} must be -1 (no limit) or positive, got {value}")
        if "block_size" in data and data.block_size < 2:
            raise BadInput(f"data.block_size must be >= 2, got {data.block_size}")
        try:
            check_name(self.dataset_name)
        except ValueError as e:
            raise BadInput(f"{e} (check data.suffix)") from None
        tok = self.config.tokenizer
        self.tokenizer = tokenizer(tok.backend, tok.name, tok.huggingface.use_fast, tok.huggingface.use_remote_code,
                                   root=self.store.root)
        self.check_source()
        if self.dataset_exists() and not data.overwrite:
            raise AlreadyExists(
                f"dataset {self.dataset_name!r} already exists at {data_dir(self.store.root)}/{self.dataset_name}; "
                "set data.overwrite=True to replace it, or data.suffix to write another one"
            )

    def dataset_exists(self) -> bool:
        """Whether ``<root>/data/<dataset_name>`` is a complete dataset.

        >>> import tempfile
        >>> TokenizePydoc.create(tempfile.mkdtemp(), "t").dataset_exists()
        False
        """
        return self.store.fs.exists(self.store.path(DATA, self.dataset_name, META))

    def check_source(self) -> None:
        """Raise if the corpus is unusable (a path that does not exist...). Override.

        >>> TokenizeJob.check_source(None)
        """

    def source(self) -> Iterator[Any]:
        """The documents (contiguous) or (prompt, response) pairs (padded). Override.

        >>> isinstance(next(TokenizePydoc.source(None)), str)
        True
        """
        raise NotImplementedError

    def tokenize(self, out: DatasetWriter, reading: Reading = Reading()) -> dict:
        """Tokenize ``source()`` into ``out`` and publish it, read as ``reading`` says; the summary. A job
        whose rows neither `tokenize_padded` nor `tokenize_contiguous` builds overrides it (preference
        pairs: `theseus.data.preference`).

        >>> import tempfile
        >>> job = TokenizePydoc.create(tempfile.mkdtemp(), "t")
        >>> out = DatasetWriter(job.store.root, "pydoc", job.kind)
        >>> job.tokenize(out, Reading(max_samples=2))["samples"]
        2
        """
        data = self.config.data
        if self.kind == "padded":
            return tokenize_padded(self.source(), self.tokenizer, out, data.block_size, reading)
        return tokenize_contiguous(self.source(), self.tokenizer, out, reading, max_tokens=data.max_tokens)

    def run(self) -> dict:
        """Tokenize, writing progress records; return the summary (with ``dataset`` and ``content_hash``).

        >>> import tempfile
        >>> TokenizePydoc.create(tempfile.mkdtemp(), "t", {"data": {"max_samples": 3}})()["samples"]
        3
        """
        data = self.config.data
        out = DatasetWriter(self.store.root, self.dataset_name, self.kind, overwrite=data.overwrite, source=self.key)
        out.update(job={"key": self.key, "name": self.name, "node": self.node.id, "config": to_dict(self.config)})
        t0 = time.perf_counter()
        total = data.max_samples if data.max_samples > 0 else None
        with _progress_bar(f"{self.key} -> {self.dataset_name}", total) as bar:

            def on_progress(samples: int, train_tokens: int, val_tokens: int) -> None:
                self.tick()
                self.writer.write(self.node, {"data/samples": samples, "data/train_tokens": train_tokens,
                                              "data/val_tokens": val_tokens})
                self.log.info(f"DATA | {samples} samples | {train_tokens} train tokens | {val_tokens} val tokens"
                              f" | {time.perf_counter() - t0:.1f}s")
                bar(samples)

            summary = self.tokenize(out, Reading(data.val_pct, data.seed, data.max_samples, on_progress,
                                                 num_threads()))
        self.writer.write(self.node, {"data/dataset": summary["dataset"], "data/content_hash": summary["content_hash"],
                                      "data/seconds": float(summary["seconds"])})
        self.log.info(f"DATA | wrote {self.kind} dataset {summary['dataset']!r} to "
                      f"{data_dir(self.store.root)}/{summary['dataset']} | {summary['samples']} samples | "
                      f"{summary['train_tokens']} train tokens | {summary['val_tokens']} val tokens")
        return summary


class _progress_bar:
    """A rich progress bar on a terminal; nothing otherwise. ``bar(samples)`` updates it."""

    def __init__(self, description: str, total: int | None):
        self.description, self.total = description, total
        self.progress = None

    def __enter__(self):
        if sys.stderr.isatty():

            self.progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                     TimeElapsedColumn(), console=Console(stderr=True), transient=True)
            self.progress.start()
            self.task = self.progress.add_task(self.description, total=self.total)
        return self

    def __call__(self, samples: int) -> None:
        if self.progress is not None:
            self.progress.update(self.task, completed=samples)

    def __exit__(self, *exc) -> None:
        if self.progress is not None:
            self.progress.stop()


# -- the jobs ---------------------------------------------------------------------


@job("data/tokenize/fineweb", "Tokenize FineWeb (streamed; or local parquet) as contiguous train/val tokens.")
class TokenizeFineweb(TokenizeJob):
    """Tokenize FineWeb into the contiguous dataset ``fineweb``.

    Streams ``HuggingFaceFW/fineweb`` (config ``data.fineweb.snapshot``), or reads
    ``data.fineweb.data_files``: local or fsspec parquet files in FineWeb's format.

    >>> TokenizeFineweb.defaults().data.fineweb.snapshot
    'CC-MAIN-2022-21'
    """

    Config = FinewebConfig
    dataset = "fineweb"

    def check_source(self) -> None:
        """Local data files must exist."""
        files = self.config.data.fineweb.data_files
        if files is not None:
            self.files = sources.expand_paths(list(files))

    def source(self) -> Iterator[str]:
        """FineWeb's documents."""
        fw = self.config.data.fineweb
        return sources.fineweb(fw.snapshot, data_files=None if fw.data_files is None else self.files)


@job("data/tokenize/text", "Tokenize your own .txt/.jsonl/.parquet files as contiguous train/val tokens.")
class TokenizeText(TokenizeJob):
    """Tokenize local text files into the contiguous dataset ``data.text.dataset``.

    A ``.txt`` file is one document, a ``.jsonl`` file one per line (field
    ``text``), a ``.parquet`` file one per row (column ``text``); globs expand.

    >>> TokenizeText.defaults().data.text.dataset
    'text'
    """

    Config = TextConfig

    @property
    def dataset(self) -> str:  # type: ignore[override]
        return self.config.data.text.dataset

    def check_source(self) -> None:
        """The paths must be given, exist and have a known extension."""
        paths = list(self.config.data.text.paths)
        if not paths:
            raise BadInput(
                "data.text.paths is empty: set it to your corpus files, e.g. data.text.paths=[corpus/*.txt]")
        self.files = sources.expand_paths(paths)
        sources.text_files(self.files)  # checks the extensions

    def source(self) -> Iterator[str]:
        """The files' documents."""
        return sources.text_files(self.files)


@job("data/tokenize/pydoc", "Tokenize the Python docs shipped with Python (offline, ~0.5 MB) as contiguous tokens.")
class TokenizePydoc(TokenizeJob):
    """Tokenize ``pydoc_data.topics`` into the contiguous dataset ``pydoc``: no network, no download.

    >>> TokenizePydoc.dataset
    'pydoc'
    """

    Config = PydocConfig
    dataset = "pydoc"

    def source(self) -> Iterator[str]:
        """One document per pydoc topic."""
        return sources.pydoc_corpus()


@job("data/tokenize/addition", "Generate synthetic sums as padded token rows with a loss mask on the answer.")
class TokenizeAddition(TokenizeJob):
    """Synthetic ``a+b=`` / ``c`` pairs into the padded dataset ``addition``.

    ``data.addition.n`` sums with operands of up to ``data.addition.max_digits``
    digits, generated from ``data.seed``.

    >>> TokenizeAddition.defaults().data.block_size
    32
    """

    Config = AdditionConfig
    dataset = "addition"
    kind = "padded"

    def check_source(self) -> None:
        """n >= 1 and max_digits >= 1."""
        a = self.config.data.addition
        if a.n < 1 or a.max_digits < 1:
            raise BadInput(
                f"data.addition.n and data.addition.max_digits must be >= 1, got {a.n} and {a.max_digits}")

    def source(self) -> Iterator[tuple[str, str]]:
        """The sums."""
        a = self.config.data.addition
        return sources.addition(a.n, seed=self.config.data.seed, max_digits=a.max_digits)


@job("data/tokenize/alpaca", "Tokenize Alpaca instruction/response pairs as padded rows, loss on the response.")
class TokenizeAlpaca(TokenizeJob):
    """Alpaca records into the padded dataset ``alpaca``, loss on the response.

    Reads ``data.alpaca.data_files`` (local .json / .jsonl in Alpaca's format),
    or the hub's ``tatsu-lab/alpaca`` when it is None.

    >>> TokenizeAlpaca.defaults().data.block_size
    512
    """

    Config = AlpacaConfig
    dataset = "alpaca"
    kind = "padded"

    def check_source(self) -> None:
        """Local data files must exist."""
        files = self.config.data.alpaca.data_files
        if files is not None:
            self.files = sources.expand_paths(list(files))

    def source(self) -> Iterator[tuple[str, str]]:
        """(prompt, response) pairs."""
        return sources.alpaca(None if self.config.data.alpaca.data_files is None else self.files)


@job("data/tokenize/chat", "Tokenize chat conversations with the tokenizer's chat template, loss on assistant turns.")
class TokenizeChat(TokenizeJob):
    """Conversations into the padded dataset ``data.chat.dataset``, the loss mask on the assistant turns.

    Each conversation is rendered with the chat template of ``tokenizer`` (an imported model's
    own; ChatML for tiktoken; or ``data.chat.template``), one per row or, with ``data.pack``,
    several per row with segment ids. The share of real (not padding) tokens and the
    conversations truncated or dropped as longer than ``data.block_size`` (``data.overlong``)
    are logged and recorded (``data/real_token_share``, ``data/truncated``, ``data/dropped``).

    >>> TokenizeChat.defaults().data.overlong, TokenizeChat.defaults().data.pack
    ('truncate', False)
    """

    Config = ChatConfig
    kind = "padded"

    @property
    def dataset(self) -> str:  # type: ignore[override]
        return self.config.data.chat.dataset

    def check_source(self) -> None:
        """The paths must exist, ``data.overlong`` be known and the tokenizer have a chat template."""
        data = self.config.data
        if data.overlong not in OVERLONG:
            raise BadInput(f"data.overlong must be one of {', '.join(OVERLONG)}, got {data.overlong!r}")
        self.files = sources.check_chat_paths(list(data.chat.paths))
        self.template = load_template(self.tokenizer, data.chat.template)

    def source(self) -> Iterator[tuple[str, list]]:
        """``(where, messages)`` of each conversation."""
        return sources.chat_records(self.files)

    def tokenize(self, out: DatasetWriter, reading: Reading = Reading()) -> dict:
        """``tokenize_chat`` of the conversations into ``out``; its counts logged and recorded."""
        data = self.config.data
        summary = tokenize_chat(self.source(), self.tokenizer, self.template, out, data.block_size,
                                data.overlong, data.pack, reading)
        self.writer.write(self.node, {"data/real_token_share": float(summary["real_token_share"]),
                                      "data/truncated": summary["truncated"], "data/dropped": summary["dropped"]})
        self.log.info(f"DATA | {summary['samples']} conversations | {summary['truncated']} truncated, "
                      f"{summary['dropped']} dropped as longer than {data.block_size} tokens "
                      f"(data.overlong={data.overlong}) | real tokens {100 * summary['real_token_share']:.1f}% of "
                      f"{summary['train_rows'] + summary['val_rows']} rows{' (packed)' if data.pack else ''}")
        return summary
