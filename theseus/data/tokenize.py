"""Tokenize a text source into a dataset: the work of the ``data/tokenize/*`` jobs.

``tokenize_contiguous`` joins documents (each followed by eot) into train and
val token streams; ``tokenize_padded`` turns (prompt, response) pairs into
fixed-length rows with a loss mask on the response; ``tokenize_chat`` renders
conversations with a chat template, masked on the assistant turns, one or
(packed) several per row. Both write through a
``DatasetWriter`` and publish it when done (or drop it on error).

Which document goes to validation is a hash of (seed, document index), so the
split does not depend on batching or thread count.
"""

from __future__ import annotations

import itertools
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
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


def _check_common(out: DatasetWriter, kind: str, val_pct: float, **limits: int) -> None:
    for name, value in limits.items():
        if value == 0 or value < -1:
            raise BadInput(f"{name} must be -1 (no limit) or positive, got {value}")
    if out.kind != kind:
        raise BadInput(f"tokenize_{kind} needs a {kind!r} DatasetWriter, got kind {out.kind!r}")
    if not 0 <= val_pct < 1:
        raise BadInput(f"val_pct must be in [0, 1), got {val_pct}")


def tokenize_contiguous(docs: Iterable[str], tokenizer, out: DatasetWriter, val_pct: float = 0.05,
                        seed: int = 2357, max_samples: int = -1, max_tokens: int = -1,
                        on_progress: Progress | None = None, batch_docs: int = 256,
                        num_threads: int = 2) -> dict:
    """Encode ``docs`` into ``out`` (a contiguous ``DatasetWriter``) and publish it.

    Each document is followed by ``tokenizer.eot`` and goes to val with
    probability ``val_pct`` (hash of ``seed`` and its index). Stops after
    ``max_samples`` documents or exactly ``max_tokens`` train tokens (-1: no
    limit). ``on_progress(samples, train_tokens, val_tokens)`` is called every
    1,000 documents and once at the end. Returns a summary dict.

    >>> import tempfile
    >>> from theseus.data.tokenizer import get_tokenizer
    >>> out = DatasetWriter(tempfile.mkdtemp(), "hello", "contiguous")
    >>> s = tokenize_contiguous(["hello world"] * 10, get_tokenizer(), out, val_pct=0.2)
    >>> s["samples"], s["train_tokens"] + s["val_tokens"]
    (10, 30)
    """
    _check_common(out, "contiguous", val_pct, max_samples=max_samples, max_tokens=max_tokens)
    if batch_docs < 1:
        raise BadInput(f"batch_docs must be >= 1, got {batch_docs}")
    eot, t0 = tokenizer.eot, time.perf_counter()
    samples = train_tokens = val_tokens = chars = last_report = 0
    try:
        out.set_tokenizer(tokenizer)
        eot_array = np.array([eot], dtype=np.uint32)
        batches = _batches(docs, batch_docs, max_samples)
        for texts, encoded in _pipelined(batches, lambda b: encode_arrays(tokenizer, b, num_threads)):
            n = len(encoded)
            is_val = uniform(seed, np.arange(samples, samples + n, dtype=np.uint64)) < val_pct
            lengths = np.fromiter((len(ids) + 1 if len(ids) else 0 for ids in encoded), dtype=np.int64, count=n)
            train_cum = np.cumsum(np.where(is_val, 0, lengths))
            val_cum = np.cumsum(np.where(is_val, lengths, 0))
            stop = max_tokens >= 0 and train_tokens + int(train_cum[-1]) >= max_tokens
            if stop:  # keep documents up to the one that reaches max_tokens, cut that one
                n = int(np.searchsorted(train_cum, max_tokens - train_tokens)) + 1
                encoded, is_val = encoded[:n], is_val[:n]
                train_cum = np.minimum(train_cum[:n], max_tokens - train_tokens)
                val_cum = val_cum[:n]
            parts: dict[bool, list] = {False: [], True: []}
            for ids, v in zip(encoded, is_val.tolist()):
                if len(ids):
                    parts[v] += (ids, eot_array)
            train = np.concatenate(parts[False]) if parts[False] else eot_array[:0]
            val = np.concatenate(parts[True]) if parts[True] else eot_array[:0]
            if stop:
                train = train[:max_tokens - train_tokens]
            if len(train):
                out.append("train", train)
            if len(val):
                out.append("val", val)
            _report(on_progress, samples, train_cum, val_cum, train_tokens, val_tokens)
            chars += sum(map(len, texts[:n]))
            samples += n
            train_tokens += len(train)
            val_tokens += len(val)
            if samples // PROGRESS_EVERY != (samples - n) // PROGRESS_EVERY:
                last_report = samples - samples % PROGRESS_EVERY
            if stop:
                break
        if train_tokens + val_tokens == 0:
            raise BadInput(f"the corpus is empty: {samples} documents gave no tokens; nothing to write")
        if on_progress is not None and last_report != samples:
            on_progress(samples, train_tokens, val_tokens)
        seconds = time.perf_counter() - t0
        summary = {
            "samples": samples, "train_tokens": train_tokens, "val_tokens": val_tokens, "chars": chars,
            "val_pct": val_pct, "seed": seed, "max_samples": max_samples, "max_tokens": max_tokens,
            "seconds": round(seconds, 3), "tokens_per_s": round((train_tokens + val_tokens) / max(seconds, 1e-9)),
        }
        out.update(summary=summary)
        meta = out.commit()
    except BaseException:
        out.abort()
        raise
    return {**summary, "content_hash": meta["content_hash"], "dataset": out.dataset}


def tokenize_padded(pairs: Iterable[tuple[str, str]], tokenizer, out: DatasetWriter, block_size: int,
                    val_pct: float = 0.05, seed: int = 2357, max_samples: int = -1,
                    on_progress: Progress | None = None, batch_pairs: int = 256,
                    num_threads: int = 2) -> dict:
    """Encode (prompt, response) ``pairs`` into ``out`` (a padded ``DatasetWriter``) and publish it.

    Each row is ``prompt + response + eot``, truncated to ``block_size`` (counted
    in the summary as ``truncated``) and right-padded with eot; its mask is True
    on the response tokens and the final eot only. Pairs go to val with
    probability ``val_pct`` (hash of ``seed`` and the index). Token counts in
    progress and summary exclude padding.

    >>> import tempfile
    >>> from theseus.data.tokenizer import get_tokenizer
    >>> out = DatasetWriter(tempfile.mkdtemp(), "sums", "padded")
    >>> tokenize_padded([("1+1=", "2")] * 4, get_tokenizer(), out, block_size=8, val_pct=0)["samples"]
    4
    """
    _check_common(out, "padded", val_pct, max_samples=max_samples)
    if block_size < 2:
        raise BadInput(f"block_size must be >= 2, got {block_size}")
    eot, t0 = tokenizer.eot, time.perf_counter()
    samples = train_tokens = val_tokens = truncated = 0
    counts = {"train": 0, "val": 0}
    try:
        out.set_tokenizer(tokenizer)

        def encode(batch):
            return tokenizer.encode_batch([p for p, _ in batch] + [r for _, r in batch], num_threads=num_threads)

        for batch, encoded in _pipelined(_batches(pairs, batch_pairs, max_samples), encode):
            n = len(batch)
            is_val = uniform(seed, np.arange(samples, samples + n, dtype=np.uint64)) < val_pct
            tokens = np.full((n, block_size), eot, dtype=np.uint32)
            mask = np.zeros((n, block_size), dtype=bool)
            lengths = np.zeros(n, dtype=np.int64)
            for i in range(n):
                prompt, response = encoded[i], encoded[n + i]
                row = (prompt + response + [eot])[:block_size]
                truncated += len(prompt) + len(response) + 1 > block_size
                tokens[i, :len(row)] = row
                mask[i, len(prompt):len(row)] = True
                lengths[i] = len(row)
            for split, sel in (("train", ~is_val), ("val", is_val)):
                if sel.any():
                    out.append(split, tokens[sel], mask[sel])
                    counts[split] += int(sel.sum())
            _report(on_progress, samples, np.cumsum(np.where(is_val, 0, lengths)),
                    np.cumsum(np.where(is_val, lengths, 0)), train_tokens, val_tokens)
            samples += n
            train_tokens += int(lengths[~is_val].sum())
            val_tokens += int(lengths[is_val].sum())
        if samples == 0:
            raise BadInput("the corpus is empty: no (prompt, response) pairs; nothing to write")
        if on_progress is not None and samples % PROGRESS_EVERY:
            on_progress(samples, train_tokens, val_tokens)
        seconds = time.perf_counter() - t0
        summary = {
            "samples": samples, "train_rows": counts["train"], "val_rows": counts["val"],
            "train_tokens": train_tokens, "val_tokens": val_tokens, "truncated": truncated,
            "block_size": block_size, "val_pct": val_pct, "seed": seed, "max_samples": max_samples,
            "seconds": round(seconds, 3),
        }
        out.update(summary=summary)
        meta = out.commit()
    except BaseException:
        out.abort()
        raise
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
                  block_size: int, overlong: str = "truncate", pack: bool = False, val_pct: float = 0.05,
                  seed: int = 2357, max_samples: int = -1, on_progress: Progress | None = None) -> dict:
    """Encode ``(where, messages)`` conversations with ``template`` into ``out`` (a padded ``DatasetWriter``).

    Each conversation's mask covers its assistant turns (``theseus.data.chat``); one longer than
    ``block_size`` is cut to it (``overlong="truncate"``: dropped where no assistant token is left)
    or dropped (``"drop"``), both counted. ``pack`` puts several conversations in a row with segment
    ids (``theseus.data.packing``). The summary's ``real_token_share`` is the share of the rows'
    tokens that are conversation, not padding.

    >>> import tempfile
    >>> from theseus.data.chat import CHATML, ChatTemplate
    >>> from theseus.data.tokenizer import get_tokenizer
    >>> chat = [{"role": "user", "content": "1+1?"}, {"role": "assistant", "content": "2"}]
    >>> out = DatasetWriter(tempfile.mkdtemp(), "chat", "padded")
    >>> s = tokenize_chat([(f"row {i}", chat) for i in range(8)], get_tokenizer(), ChatTemplate(CHATML), out,
    ...                   block_size=128, pack=True, val_pct=0)
    >>> s["samples"], s["train_rows"], s["real_token_share"]  # 32 tokens a conversation: 4 fill a row
    (8, 2, 1.0)
    """
    with out:  # an error drops everything written
        _check_common(out, "padded", val_pct, max_samples=max_samples)
        if block_size < 2 or overlong not in OVERLONG:
            raise BadInput(f"block_size must be >= 2 and data.overlong one of {', '.join(OVERLONG)}, got "
                           f"{block_size} and {overlong!r}")
        t0, samples, truncated, dropped = time.perf_counter(), 0, 0, 0
        out.set_tokenizer(tokenizer)
        rows = {s: _Rows(out, s, block_size, tokenizer.eot, Packer(block_size, tokenizer.eot) if pack else None)
                for s in SPLITS}
        for where, messages in (records if max_samples < 0 else itertools.islice(records, max_samples)):
            tokens, mask = encode_chat(template, tokenizer, messages, where)
            split = "val" if float(uniform(seed, samples)) < val_pct else "train"
            samples += 1
            if len(tokens) <= block_size:
                rows[split].add(tokens, mask)
            elif overlong == "drop" or not mask[:block_size].any():
                dropped += 1
            else:
                rows[split].add(tokens[:block_size], mask[:block_size])
                truncated += 1
            if on_progress is not None and samples % PROGRESS_EVERY == 0:
                on_progress(samples, rows["train"].tokens, rows["val"].tokens)
        for r in rows.values():
            r.flush(last=True)
        if rows["train"].rows + rows["val"].rows == 0:
            raise BadInput(f"no conversation to write: {samples} read, {dropped} dropped as longer than "
                           f"block_size {block_size} (data.overlong={overlong})")
        if on_progress is not None and samples % PROGRESS_EVERY:
            on_progress(samples, rows["train"].tokens, rows["val"].tokens)
        summary = {**_rows_summary(rows, block_size), "samples": samples, "truncated": truncated, "dropped": dropped,
                   "overlong": overlong, "packed": pack, "template": template.name, "block_size": block_size,
                   "val_pct": val_pct, "seed": seed, "max_samples": max_samples,
                   "seconds": round(time.perf_counter() - t0, 3)}
        out.update(summary=summary)
        meta = out.commit()
    return {**summary, "content_hash": meta["content_hash"], "dataset": out.dataset}
