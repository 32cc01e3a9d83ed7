"""Tokenize a text source into a dataset: the work of the ``data/tokenize/*`` jobs.

``tokenize_contiguous`` joins documents (each followed by eot) into train and
val token streams; ``tokenize_padded`` turns (prompt, response) pairs into
fixed-length rows with a loss mask on the response; ``tokenize_chat`` renders
conversations with a chat template, masked on the assistant turns, one or
(packed) several per row. Each writes through a ``DatasetWriter`` and
publishes it when done (or drops it on error).

A ``Reading`` holds what they share: which records go to validation (a hash of
seed and record index, so the split does not depend on batching or thread
count), how many are read, who hears progress and how many threads encode.
"""

from __future__ import annotations

import itertools
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator

import numpy as np

from theseus.data.chat import ChatTemplate, encode_chat
from theseus.data.hashing import uniform
from theseus.data.packing import Packer
from theseus.data.store import SPLITS, DatasetWriter
from theseus.errors import BadInput

PROGRESS_EVERY = 1000
Progress = Callable[[int, int, int], None]


def _batches(items: Iterable, size: int, limit: int) -> Iterator[list]:
    it = iter(items) if limit < 0 else itertools.islice(items, limit)
    while batch := list(itertools.islice(it, size)):
        yield batch


def encode_arrays(tokenizer, texts: list[str], num_threads: int) -> list[np.ndarray]:
    """Token ids of each text as uint32 arrays: the tokenizer's ``encode_arrays`` when it
    has one (no Python ints), else its ``encode_batch`` converted.

    >>> from theseus.data.tokenizer import get_tokenizer
    >>> encode_arrays(get_tokenizer(), ["hello world"], 2)[0].tolist()
    [15339, 1917]
    """
    if hasattr(tokenizer, "encode_arrays"):
        return tokenizer.encode_arrays(texts, num_threads=num_threads)
    return [np.asarray(ids, dtype=np.uint32) for ids in tokenizer.encode_batch(texts, num_threads=num_threads)]


def _pipelined(batches: Iterator[list], encode: Callable[[list], list]) -> Iterator[tuple[list, list]]:
    """(batch, encoded batch) in order; encoding of the next batches overlaps the caller's work."""
    with ThreadPoolExecutor(1) as pool:
        pending: deque = deque()
        try:
            for batch in batches:
                pending.append((batch, pool.submit(encode, batch)))
                if len(pending) > 2:
                    b, fut = pending.popleft()
                    yield b, fut.result()
            while pending:
                b, fut = pending.popleft()
                yield b, fut.result()
        finally:
            for _, fut in pending:
                fut.cancel()


def _report(on_progress: Progress | None, start: int, train_cum: np.ndarray, val_cum: np.ndarray,
            train0: int, val0: int) -> None:
    """Call on_progress at every multiple of PROGRESS_EVERY samples inside this batch."""
    if on_progress is None:
        return
    n = len(train_cum)
    first = (start // PROGRESS_EVERY + 1) * PROGRESS_EVERY
    for samples in range(first, start + n + 1, PROGRESS_EVERY):
        i = samples - start - 1
        on_progress(samples, train0 + int(train_cum[i]), val0 + int(val_cum[i]))


def _check_limit(name: str, value: int) -> None:
    if value == 0 or value < -1:
        raise BadInput(f"{name} must be -1 (no limit) or positive, got {value}")


def check_block_size(block_size: int) -> None:
    """Refuse a row length that holds no next-token pair (a padded or paired row needs at least two tokens).

    >>> check_block_size(2)
    >>> check_block_size(1)
    Traceback (most recent call last):
    ...
    theseus.errors.BadInput: block_size must be >= 2, got 1
    """
    if block_size < 2:
        raise BadInput(f"block_size must be >= 2, got {block_size}")


def _check_writer(out: DatasetWriter, kind: str) -> None:
    if out.kind != kind:
        raise BadInput(f"tokenize_{kind} needs a {kind!r} DatasetWriter, got kind {out.kind!r}")


@dataclass(frozen=True)
class Reading:
    """How every ``tokenize_*`` reads its source: ``val_pct`` of the records go to validation (a hash of
    ``seed`` and the record's index, so the split depends on neither batching nor threads), at most
    ``max_samples`` records are read (-1: all), ``on_progress(samples, train_tokens, val_tokens)`` is
    called every 1,000 records and once at the end, and at most ``num_threads`` threads encode.

    >>> reading = Reading(val_pct=0.5, seed=1)
    >>> reading.is_val(0, 6).tolist() == Reading(val_pct=0.5, seed=1).is_val(0, 6).tolist()  # a hash, not a draw
    True
    >>> Reading(max_samples=0)
    Traceback (most recent call last):
    theseus.errors.BadInput: max_samples must be -1 (no limit) or positive, got 0
    """

    val_pct: float = 0.05
    seed: int = 2357
    max_samples: int = -1
    on_progress: Progress | None = None
    num_threads: int = 2

    def __post_init__(self) -> None:
        _check_limit("max_samples", self.max_samples)
        if not 0 <= self.val_pct < 1:
            raise BadInput(f"val_pct must be in [0, 1), got {self.val_pct}")
        if self.num_threads < 1:
            raise BadInput(f"num_threads must be >= 1, got {self.num_threads}")

    def is_val(self, first: int, n: int) -> np.ndarray:
        """Whether each of the records ``first``, ``first + 1``... ``first + n - 1`` goes to validation.

        >>> Reading(val_pct=0).is_val(0, 3).tolist()
        [False, False, False]
        """
        return uniform(self.seed, np.arange(first, first + n, dtype=np.uint64)) < self.val_pct

    def batches(self, items: Iterable, size: int) -> Iterator[list]:
        """``items`` in lists of ``size``, stopping after ``max_samples`` of them.

        >>> [len(b) for b in Reading(max_samples=5).batches(range(100), 2)]
        [2, 2, 1]
        """
        return _batches(items, size, self.max_samples)

    def progress(self, samples: int, train_tokens: int, val_tokens: int) -> None:
        """Tell ``on_progress``, where there is one.

        >>> seen = []
        >>> Reading(on_progress=lambda *counts: seen.append(counts)).progress(3, 20, 2)
        >>> seen
        [(3, 20, 2)]
        """
        if self.on_progress is not None:
            self.on_progress(samples, train_tokens, val_tokens)

    def summary(self) -> dict:
        """The settings a dataset's summary records (the callback and threads change no token).

        >>> Reading(val_pct=0.1).summary()
        {'val_pct': 0.1, 'seed': 2357, 'max_samples': -1}
        """
        return {"val_pct": self.val_pct, "seed": self.seed, "max_samples": self.max_samples}


class _Streams:
    """The train and val token streams of ``tokenize_contiguous``: each batch of documents, split and appended."""

    def __init__(self, out: DatasetWriter, eot: int, reading: Reading, max_tokens: int):
        self.out, self.reading, self.max_tokens = out, reading, max_tokens
        self.eot = np.array([eot], dtype=np.uint32)
        self.samples = self.train_tokens = self.val_tokens = self.chars = self.last_report = 0

    def add(self, texts: list[str], encoded: list[np.ndarray]) -> bool:
        """Append one batch; True once ``max_tokens`` train tokens are written (the last document cut there)."""
        n, left = len(encoded), self.max_tokens - self.train_tokens
        is_val = self.reading.is_val(self.samples, n)
        lengths = np.fromiter((len(ids) + 1 if len(ids) else 0 for ids in encoded), dtype=np.int64, count=n)
        train_cum = np.cumsum(np.where(is_val, 0, lengths))
        val_cum = np.cumsum(np.where(is_val, lengths, 0))
        stop = self.max_tokens >= 0 and int(train_cum[-1]) >= left
        if stop:  # keep documents up to the one that reaches max_tokens, cut that one
            n = int(np.searchsorted(train_cum, left)) + 1
            encoded, is_val = encoded[:n], is_val[:n]
            train_cum, val_cum = np.minimum(train_cum[:n], left), val_cum[:n]
        parts: dict[bool, list] = {False: [], True: []}
        for ids, v in zip(encoded, is_val.tolist()):
            if len(ids):
                parts[v] += (ids, self.eot)
        train = np.concatenate(parts[False]) if parts[False] else self.eot[:0]
        val = np.concatenate(parts[True]) if parts[True] else self.eot[:0]
        train = train[:left] if stop else train
        for split, tokens in (("train", train), ("val", val)):
            if len(tokens):
                self.out.append(split, tokens)
        _report(self.reading.on_progress, self.samples, train_cum, val_cum, self.train_tokens, self.val_tokens)
        self.chars += sum(map(len, texts[:n]))
        self.samples += n
        self.train_tokens += len(train)
        self.val_tokens += len(val)
        if self.samples // PROGRESS_EVERY != (self.samples - n) // PROGRESS_EVERY:
            self.last_report = self.samples - self.samples % PROGRESS_EVERY
        return stop


def tokenize_contiguous(docs: Iterable[str], tokenizer, out: DatasetWriter, reading: Reading = Reading(),
                        max_tokens: int = -1, batch_docs: int = 256) -> dict:
    """Encode ``docs`` into ``out`` (a contiguous ``DatasetWriter``) and publish it.

    Each document is followed by ``tokenizer.eot``; ``reading`` says which go to val, how many are
    read, who hears progress and how many threads encode. Stops after exactly ``max_tokens`` train
    tokens (-1: no limit). Returns a summary dict.

    >>> import tempfile
    >>> from theseus.data.tokenizer import get_tokenizer
    >>> out = DatasetWriter(tempfile.mkdtemp(), "hello", "contiguous")
    >>> s = tokenize_contiguous(["hello world"] * 10, get_tokenizer(), out, Reading(val_pct=0.2))
    >>> s["samples"], s["train_tokens"] + s["val_tokens"]
    (10, 30)
    """
    t0 = time.perf_counter()
    with out:  # an error, bad input included, drops the writer's staging folder
        _check_writer(out, "contiguous")
        _check_limit("max_tokens", max_tokens)
        if batch_docs < 1:
            raise BadInput(f"batch_docs must be >= 1, got {batch_docs}")
        out.set_tokenizer(tokenizer)
        streams = _Streams(out, tokenizer.eot, reading, max_tokens)
        batches = reading.batches(docs, batch_docs)
        for texts, encoded in _pipelined(batches, lambda b: encode_arrays(tokenizer, b, reading.num_threads)):
            if streams.add(texts, encoded):
                break
        samples, train_tokens, val_tokens = streams.samples, streams.train_tokens, streams.val_tokens
        if train_tokens + val_tokens == 0:
            raise BadInput(f"the corpus is empty: {samples} documents gave no tokens; nothing to write")
        if streams.last_report != samples:
            reading.progress(samples, train_tokens, val_tokens)
        seconds = time.perf_counter() - t0
        summary = {
            "samples": samples, "train_tokens": train_tokens, "val_tokens": val_tokens, "chars": streams.chars,
            **reading.summary(), "max_tokens": max_tokens,
            "seconds": round(seconds, 3), "tokens_per_s": round((train_tokens + val_tokens) / max(seconds, 1e-9)),
        }
        out.update(summary=summary)
        meta = out.commit()
    return {**summary, "content_hash": meta["content_hash"], "dataset": out.dataset}


def _padded_rows(encoded: list[list[int]], eot: int, block_size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows, masks and lengths of a batch encoded as its prompts then its responses (see `tokenize_padded`)."""
    n = len(encoded) // 2
    tokens = np.full((n, block_size), eot, dtype=np.uint32)
    mask = np.zeros((n, block_size), dtype=bool)
    lengths = np.zeros(n, dtype=np.int64)
    for i in range(n):
        prompt, response = encoded[i], encoded[n + i]
        row = (prompt + response + [eot])[:block_size]
        tokens[i, :len(row)] = row
        mask[i, len(prompt):len(row)] = True
        lengths[i] = len(row)
    return tokens, mask, lengths


def tokenize_padded(pairs: Iterable[tuple[str, str]], tokenizer, out: DatasetWriter, block_size: int,
                    reading: Reading = Reading(), batch_pairs: int = 256) -> dict:
    """Encode (prompt, response) ``pairs`` into ``out`` (a padded ``DatasetWriter``) and publish it.

    Each row is ``prompt + response + eot``, truncated to ``block_size`` (counted
    in the summary as ``truncated``) and right-padded with eot; its mask is True
    on the response tokens and the final eot only. ``reading`` says which pairs go
    to val and how many are read. Token counts in progress and summary exclude padding.

    >>> import tempfile
    >>> from theseus.data.tokenizer import get_tokenizer
    >>> out = DatasetWriter(tempfile.mkdtemp(), "sums", "padded")
    >>> tokenize_padded([("1+1=", "2")] * 4, get_tokenizer(), out, block_size=8, reading=Reading(val_pct=0))["samples"]
    4
    """
    t0, samples, truncated = time.perf_counter(), 0, 0
    counts, tokens_of = {"train": 0, "val": 0}, {"train": 0, "val": 0}

    def encode(batch):
        return tokenizer.encode_batch([p for p, _ in batch] + [r for _, r in batch], num_threads=reading.num_threads)

    with out:  # an error, bad input included, drops the writer's staging folder
        _check_writer(out, "padded")
        check_block_size(block_size)
        out.set_tokenizer(tokenizer)
        for batch, encoded in _pipelined(reading.batches(pairs, batch_pairs), encode):
            n = len(batch)
            is_val = reading.is_val(samples, n)
            tokens, mask, lengths = _padded_rows(encoded, tokenizer.eot, block_size)
            truncated += sum(len(encoded[i]) + len(encoded[n + i]) + 1 > block_size for i in range(n))
            _report(reading.on_progress, samples, np.cumsum(np.where(is_val, 0, lengths)),
                    np.cumsum(np.where(is_val, lengths, 0)), tokens_of["train"], tokens_of["val"])
            for split, sel in (("train", ~is_val), ("val", is_val)):
                if sel.any():
                    out.append(split, tokens[sel], mask[sel])
                    counts[split] += int(sel.sum())
                    tokens_of[split] += int(lengths[sel].sum())
            samples += n
        if samples == 0:
            raise BadInput("the corpus is empty: no (prompt, response) pairs; nothing to write")
        if samples % PROGRESS_EVERY:
            reading.progress(samples, tokens_of["train"], tokens_of["val"])
        summary = {
            "samples": samples, "train_rows": counts["train"], "val_rows": counts["val"],
            "train_tokens": tokens_of["train"], "val_tokens": tokens_of["val"], "truncated": truncated,
            "block_size": block_size, **reading.summary(), "seconds": round(time.perf_counter() - t0, 3),
        }
        out.update(summary=summary)
        meta = out.commit()
    return {**summary, "content_hash": meta["content_hash"], "dataset": out.dataset}


OVERLONG = ("truncate", "drop")


class _Rows:
    """The rows of one split, appended to the writer ``FLUSH_ROWS`` at a time; packed by a ``Packer`` when given."""

    FLUSH_ROWS = 256

    def __init__(self, out: DatasetWriter, split: str, width: int, eot: int, packer: Packer | None):
        self.out, self.split, self.width, self.eot, self.packer = out, split, width, eot, packer
        self.pending: list[tuple[np.ndarray, ...]] = []
        self.rows = self.tokens = 0

    def add(self, tokens: np.ndarray, mask: np.ndarray) -> None:
        self.tokens += len(tokens)
        if self.packer is not None:
            self.pending += self.packer.add(tokens, mask)
        else:
            row, row_mask = np.full(self.width, self.eot, np.uint32), np.zeros(self.width, bool)
            row[:len(tokens)], row_mask[:len(tokens)] = tokens, mask
            self.pending.append((row, row_mask))
        if len(self.pending) >= self.FLUSH_ROWS:
            self.flush()

    def flush(self, last: bool = False) -> None:
        if last and self.packer is not None:
            self.pending += self.packer.finish()
        if self.pending:
            self.out.append(self.split, *(np.stack(column) for column in zip(*self.pending)))
            self.rows += len(self.pending)
            self.pending = []


def _rows_summary(rows: dict[str, _Rows], width: int) -> dict:
    """Rows and real tokens of each split, and the share of the rows' tokens that are real (not padding)."""
    counts = {f"{split}_{what}": getattr(r, what) for split, r in rows.items() for what in ("rows", "tokens")}
    n_rows, n_tokens = sum(r.rows for r in rows.values()), sum(r.tokens for r in rows.values())
    return {**counts, "real_token_share": round(n_tokens / (n_rows * width), 6)}


def tokenize_chat(records: Iterable[tuple[str, list]], tokenizer, template: ChatTemplate, out: DatasetWriter,
                  block_size: int, overlong: str = "truncate", pack: bool = False,
                  reading: Reading = Reading()) -> dict:
    """Encode ``(where, messages)`` conversations with ``template`` into ``out`` (a padded ``DatasetWriter``).

    Each conversation's mask covers its assistant turns (``theseus.data.chat``); one longer than
    ``block_size`` is cut to it (``overlong="truncate"``: dropped where no assistant token is left)
    or dropped (``"drop"``), both counted. ``pack`` puts several conversations in a row with segment
    ids (``theseus.data.packing``). ``reading`` says which go to val and how many are read; rendering a
    template is Python work, done in one thread (``num_threads`` is an upper bound). The summary's
    ``real_token_share`` is the share of the rows' tokens that are conversation, not padding.

    >>> import tempfile
    >>> from theseus.data.chat import CHATML, ChatTemplate
    >>> from theseus.data.tokenizer import get_tokenizer
    >>> chat = [{"role": "user", "content": "1+1?"}, {"role": "assistant", "content": "2"}]
    >>> out = DatasetWriter(tempfile.mkdtemp(), "chat", "padded")
    >>> s = tokenize_chat([(f"row {i}", chat) for i in range(8)], get_tokenizer(), ChatTemplate(CHATML), out,
    ...                   block_size=128, pack=True, reading=Reading(val_pct=0))
    >>> s["samples"], s["train_rows"], s["real_token_share"]  # 32 tokens a conversation: 4 fill a row
    (8, 2, 1.0)
    """
    with out:  # an error, bad input included, drops the writer's staging folder
        _check_writer(out, "padded")
        if block_size < 2 or overlong not in OVERLONG:
            raise BadInput(f"block_size must be >= 2 and data.overlong one of {', '.join(OVERLONG)}, got "
                           f"{block_size} and {overlong!r}")
        t0, samples, truncated, dropped = time.perf_counter(), 0, 0, 0
        out.set_tokenizer(tokenizer)
        rows = {s: _Rows(out, s, block_size, tokenizer.eot, Packer(block_size, tokenizer.eot) if pack else None)
                for s in SPLITS}
        for where, messages in (records if reading.max_samples < 0 else itertools.islice(records, reading.max_samples)):
            tokens, mask = encode_chat(template, tokenizer, messages, where)
            split = "val" if reading.is_val(samples, 1)[0] else "train"
            samples += 1
            if len(tokens) <= block_size:
                rows[split].add(tokens, mask)
            elif overlong == "drop" or not mask[:block_size].any():
                dropped += 1
            else:
                rows[split].add(tokens[:block_size], mask[:block_size])
                truncated += 1
            if samples % PROGRESS_EVERY == 0:
                reading.progress(samples, rows["train"].tokens, rows["val"].tokens)
        for r in rows.values():
            r.flush(last=True)
        if rows["train"].rows + rows["val"].rows == 0:
            raise BadInput(f"no conversation to write: {samples} read, {dropped} dropped as longer than "
                           f"block_size {block_size} (data.overlong={overlong})")
        if samples % PROGRESS_EVERY:
            reading.progress(samples, rows["train"].tokens, rows["val"].tokens)
        summary = {**_rows_summary(rows, block_size), "samples": samples, "truncated": truncated, "dropped": dropped,
                   "overlong": overlong, "packed": pack, "template": template.name, "block_size": block_size,
                   **reading.summary(), "seconds": round(time.perf_counter() - t0, 3)}
        out.update(summary=summary)
        meta = out.commit()
    return {**summary, "content_hash": meta["content_hash"], "dataset": out.dataset}
