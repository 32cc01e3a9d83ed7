"""Preference pairs: ``{"prompt", "chosen", "rejected"}`` records as padded row pairs, and their loader.

``data/tokenize/preference`` writes a padded dataset whose rows come in pairs: row ``2i`` is
``prompt + chosen + eot`` and row ``2i + 1`` is ``prompt + rejected + eot`` of record ``i``,
each right-padded with eot, their masks True on the response tokens (and the final eot)
only. Both rows of a pair go to the same split (a hash of the seed and the record index).
Its ``meta.json`` says ``"pairs": true``.

`PairLoader` keeps the rows of a pair together in every batch: the ``B`` rows of step k hold
``B / 2`` pairs, their chosen rows first (rows ``[0, B/2)``) and their rejected rows in
the same order after (rows ``[B/2, B)``). Row ``j`` and row ``j + B/2`` are one pair, so the
strided micro-batches of the train step (`theseus.train.step.split_micro_batches`) keep
whole pairs whenever ``accumulation`` divides ``B / 2``. Step k's pairs are positions
``k B/2 .. (k + 1) B/2`` of a hash-ordered permutation of the pairs per epoch: the batch of
step k is a pure function of the data, the seed, the batch size and k.

>>> import json, tempfile, pathlib
>>> from theseus.data.store import open_dataset
>>> from theseus.data.tokenizer import get_tokenizer
>>> folder = pathlib.Path(tempfile.mkdtemp())
>>> _ = (folder / "p.jsonl").write_text(json.dumps({"prompt": "2+2=", "chosen": "4", "rejected": "5"}) + "\\n")
>>> out = DatasetWriter(str(folder), "prefs", "padded")
>>> from theseus.data.tokenize import Reading
>>> pairs = read_pairs([str(folder / "p.jsonl")])
>>> tokenize_pairs(pairs, get_tokenizer(), out, block_size=8, reading=Reading(val_pct=0))["pairs"]
1
>>> batch = PairLoader(open_dataset(str(folder), "prefs"), batch_size=2, block_size=8).batch(0)
>>> batch["x"][:, :4].tolist(), batch["padding_mask"].sum(axis=1).tolist()
([[17, 10, 17, 28], [17, 10, 17, 28]], [2, 2])
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Callable, NamedTuple

import fsspec
import numpy as np

from theseus.data import sources
from theseus.data.chat import ChatTemplate, assistant_spans, check_messages, load_template
from theseus.data.jobs import PaddedData, TokenizeJob, TokenizerConfig
from theseus.data.loader import EpochOrders, Loader, check_step
from theseus.data.store import Dataset, DatasetWriter
from theseus.data.tokenize import OVERLONG, PROGRESS_EVERY, Reading, check_block_size
from theseus.errors import BadInput
from theseus.jobs import job

__all__ = ["PairLoader", "PairText", "PreferenceConfig", "TokenizePreference", "chat_pair", "is_pairs", "pair_rows",
           "read_pairs", "tokenize_pairs"]

_FIELDS = ("prompt", "chosen", "rejected")


class PairText(NamedTuple):
    """One preference record as text: the ``prompt``, the ``chosen`` and the ``rejected`` response, and whether
    an eot closes each response (``close``; a chat turn ends with its template's own end-of-turn marker).

    >>> PairText("Q", "yes", "no").close
    True
    """

    prompt: str
    chosen: str
    rejected: str
    close: bool = True


def read_pairs(files: Iterable[str], template: Callable[[], ChatTemplate] | None = None) -> Iterator[PairText]:
    """The `PairText` of every record of ``.jsonl`` files (one JSON object a line) or ``.json`` files (a list of
    objects), in order. A record is ``{"prompt", "chosen", "rejected"}`` strings, or a chat pair
    ``{"chosen": [messages], "rejected": [messages]}`` rendered by ``template()`` (`chat_pair`); anything else
    is an error naming the record.

    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "a.jsonl"
    >>> _ = p.write_text('{"prompt": "Q", "chosen": "yes", "rejected": "no"}\\n{"prompt": "Q"}\\n')
    >>> pairs = read_pairs([str(p)]); next(pairs)
    PairText(prompt='Q', chosen='yes', rejected='no', close=True)
    >>> next(pairs)
    Traceback (most recent call last):
    ...
    theseus.errors.BadInput: .../a.jsonl record 2: needs string fields prompt, chosen, rejected, or chosen and rejected conversations (missing chosen, rejected)
    """  # noqa: E501 - a doctest's expected output, printed on one line
    for path in files:
        for number, record in _records(path):
            where = f"{path} record {number}"
            if not isinstance(record, dict):
                raise BadInput(f"{where}: expected a JSON object with prompt, chosen and rejected")
            if isinstance(record.get("chosen"), list) or isinstance(record.get("rejected"), list):
                if template is None:
                    raise BadInput(f"{where}: a chat pair needs a chat template")
                yield chat_pair(template(), record.get("chosen"), record.get("rejected"), where)
                continue
            wrong = [k for k in _FIELDS if not isinstance(record.get(k), str)]
            if wrong:
                raise BadInput(f"{where}: needs string fields {', '.join(_FIELDS)}, or chosen and rejected "
                               f"conversations (missing {', '.join(wrong)})")
            yield PairText(record["prompt"], record["chosen"], record["rejected"])


def chat_pair(template: ChatTemplate, chosen, rejected, where: str) -> PairText:
    """The `PairText` of two conversations that differ only in their last message, an assistant turn: the prompt
    is the shared conversation rendered up to that turn, each response the turn as the template renders it (its
    end-of-turn marker included, so no eot is added: ``close=False``). Conversations that differ earlier, or
    that do not end with an assistant turn, are an error naming ``where``.

    >>> from theseus.data.chat import CHATML
    >>> question = [{"role": "user", "content": "1+1?"}]
    >>> chat_pair(ChatTemplate(CHATML), question + [{"role": "assistant", "content": "2"}],
    ...           question + [{"role": "assistant", "content": "3"}], "row 1")
    PairText(prompt='<|im_start|>user\\n1+1?<|im_end|>\\n<|im_start|>assistant\\n', chosen='2<|im_end|>', rejected='3<|im_end|>', close=False)
    """  # noqa: E501 - a doctest's expected output, printed on one line
    turns = []
    for side, messages in (("chosen", chosen), ("rejected", rejected)):
        messages = check_messages(messages, f"{where} {side}")
        if messages[-1]["role"] != "assistant":
            raise BadInput(f"{where}: the {side} conversation must end with an assistant turn, not "
                           f"{messages[-1]['role']!r}")
        text, spans = assistant_spans(template, messages, f"{where} {side}")
        start, end = spans[-1] if spans else (len(text), len(text))
        turns.append((messages[:-1], text[:start], text[start:end]))
    (history, prompt, good), (other, other_prompt, bad) = turns
    if history != other or prompt != other_prompt:
        raise BadInput(f"{where}: the chosen and rejected conversations must be the same before their last "
                       "assistant turn")
    return PairText(prompt, good, bad, close=False)


def _records(path: str) -> Iterator[tuple[int, object]]:
    """``(record number from 1, record)`` of a .jsonl or .json file; bad JSON is an error naming the record."""
    if not path.endswith((".jsonl", ".json")):
        raise BadInput(f"unsupported preference file {path!r}: expected .jsonl or .json")
    with fsspec.open(path, "rt", encoding="utf-8") as f:
        if path.endswith(".json"):
            try:
                records = json.load(f)
            except json.JSONDecodeError as e:
                raise BadInput(f"{path}: not valid JSON ({e})") from None
            if not isinstance(records, list):
                raise BadInput(f"{path}: expected a JSON list of records")
            yield from enumerate(records, 1)
            return
        for number, line in enumerate(f, 1):
            if line.strip():
                try:
                    yield number, json.loads(line)
                except json.JSONDecodeError as e:
                    raise BadInput(f"{path} record {number}: not valid JSON ({e})") from None


def pair_rows(prompt: list[int], chosen: list[int], rejected: list[int], eot: int, block_size: int,
              overlong: str = "truncate", close: bool = True) -> tuple[np.ndarray, np.ndarray, bool] | None:
    """The two rows of one pair: ``(tokens [2, block_size], mask [2, block_size], truncated)``, or None when the
    pair is left out: a row over ``block_size`` with ``overlong="drop"``, or a row whose response keeps no token
    after truncation (nothing to compare). Each row is the prompt, the response and (``close``) an eot, cut on
    the right like `tokenize_padded`'s and padded with eot; its mask covers the response (and that eot).

    >>> tokens, mask, cut = pair_rows([1, 2], [3], [4, 5], eot=0, block_size=5)
    >>> tokens.tolist(), mask.astype(int).tolist(), cut
    ([[1, 2, 3, 0, 0], [1, 2, 4, 5, 0]], [[0, 0, 1, 1, 0], [0, 0, 1, 1, 1]], False)
    >>> pair_rows([1, 2], [3], [4, 5, 6, 7], eot=0, block_size=5, overlong="drop") is None
    True
    """
    if overlong not in OVERLONG:
        raise BadInput(f"overlong must be one of {', '.join(OVERLONG)}, got {overlong!r}")
    tokens = np.full((2, block_size), eot, dtype=np.uint32)
    mask = np.zeros((2, block_size), dtype=bool)
    truncated = False
    for i, response in enumerate((chosen, rejected)):
        row = [*prompt, *response, *([eot] if close else [])]
        if len(row) > block_size:
            if overlong == "drop":
                return None
            truncated, row = True, row[:block_size]
        if len(row) <= len(prompt):  # the prompt fills the block: no response token to score
            return None
        tokens[i, :len(row)] = row
        mask[i, len(prompt):len(row)] = True
    return tokens, mask, truncated


@dataclass
class _Counts:
    """What `tokenize_pairs` has written so far."""

    pairs: int = 0
    rows: dict = field(default_factory=lambda: {"train": 0, "val": 0})
    tokens: dict = field(default_factory=lambda: {"train": 0, "val": 0})
    truncated: int = 0
    dropped: int = 0

    def progress(self, reading: Reading) -> None:
        reading.progress(self.pairs, self.tokens["train"], self.tokens["val"])


def tokenize_pairs(pairs: Iterable[tuple[str, str, str]], tokenizer, out: DatasetWriter, block_size: int,
                   overlong: str = "truncate", reading: Reading = Reading()) -> dict:
    """Encode `PairText` records (or ``(prompt, chosen, rejected)`` tuples) into ``out`` (a padded
    ``DatasetWriter``) as row pairs (`pair_rows`), and publish it with ``"pairs": true`` in its meta.json; returns
    the summary (``pairs`` written, ``truncated`` and ``dropped`` pairs, rows and tokens per split).
    ``reading`` says which records go to val, how many are read (``max_samples``) and who hears progress
    (``on_progress(records, train_tokens, val_tokens)`` every 1,000 records and at the end).

    >>> import tempfile
    >>> from theseus.data.tokenizer import get_tokenizer
    >>> out = DatasetWriter(tempfile.mkdtemp(), "p", "padded")
    >>> s = tokenize_pairs([("1+1=", "2", "3")] * 3 + [("1+1=" * 9, "2", "3")], get_tokenizer(), out, 8,
    ...                    reading=Reading(val_pct=0))
    >>> s["pairs"], s["dropped"], s["train_rows"]
    (3, 1, 6)
    """
    t0, counts, read = time.perf_counter(), _Counts(), 0
    with out:  # an error, bad input included, drops the writer's staging folder
        if out.kind != "padded":
            raise BadInput(f"preference pairs need a 'padded' DatasetWriter, got kind {out.kind!r}")
        check_block_size(block_size)
        if overlong not in OVERLONG:
            raise BadInput(f"data.overlong must be one of {', '.join(OVERLONG)}, got {overlong!r}")
        writing = _PairWriting(tokenizer, out, block_size, overlong, reading)
        out.set_tokenizer(tokenizer)
        for batch in reading.batches(pairs, PROGRESS_EVERY):
            _write_batch(batch, read, writing, counts)
            read += len(batch)
            counts.progress(reading)
        if counts.pairs == 0:
            raise BadInput(f"no preference pair to write: {read} records read, {counts.dropped} left out (a row "
                           f"over block_size {block_size} with data.overlong=drop, or a prompt filling the block)")
        summary = {"records": read, "pairs": counts.pairs, "train_rows": counts.rows["train"],
                   "val_rows": counts.rows["val"], "train_tokens": counts.tokens["train"],
                   "val_tokens": counts.tokens["val"], "truncated": counts.truncated, "dropped": counts.dropped,
                   "overlong": overlong, "block_size": block_size, **reading.summary(),
                   "seconds": round(time.perf_counter() - t0, 3)}
        out.update(summary=summary, pairs=True)
        meta = out.commit()
    return {**summary, "samples": read, "content_hash": meta["content_hash"], "dataset": out.dataset}


@dataclass(frozen=True)
class _PairWriting:
    """What every batch of `tokenize_pairs` is encoded and written with: its arguments of the same names."""

    tokenizer: object
    out: DatasetWriter
    block_size: int
    overlong: str
    reading: Reading


def _write_batch(batch: list, first: int, writing: _PairWriting, counts: _Counts) -> None:
    """Encode and append the pairs of ``batch`` (records ``first``, ``first + 1``...) to their splits."""
    tokenizer, out, block_size, overlong = writing.tokenizer, writing.out, writing.block_size, writing.overlong
    n = len(batch)
    encoded = tokenizer.encode_batch([r[i] for i in range(3) for r in batch], num_threads=writing.reading.num_threads)
    closes = [PairText(*r).close for r in batch]
    is_val = writing.reading.is_val(first, n)
    rows: dict[str, list] = {"train": [], "val": []}
    for i in range(n):
        pair = pair_rows(encoded[i], encoded[n + i], encoded[2 * n + i], tokenizer.eot, block_size, overlong,
                         closes[i])
        if pair is None:
            counts.dropped += 1
            continue
        tokens, mask, truncated = pair
        split = "val" if is_val[i] else "train"
        rows[split].append((tokens, mask))
        counts.truncated += truncated
        counts.pairs += 1
        counts.tokens[split] += 2 * len(encoded[i]) + int(mask.sum())  # both rows, padding left out
    for split, pairs in rows.items():
        if pairs:
            out.append(split, np.concatenate([t for t, _ in pairs]), np.concatenate([m for _, m in pairs]))
            counts.rows[split] += 2 * len(pairs)


def is_pairs(dataset: Dataset) -> bool:
    """Whether ``dataset`` holds preference row pairs (written by `tokenize_pairs`).

    >>> import tempfile
    >>> from theseus.data.store import open_dataset
    >>> root = tempfile.mkdtemp()
    >>> with DatasetWriter(root, "toy", "contiguous") as w:
    ...     w.append("train", np.arange(10)); w.append("val", np.arange(3))
    >>> is_pairs(open_dataset(root, "toy"))
    False
    """
    return dataset.kind == "padded" and bool(dataset.meta.get("pairs"))


class PairLoader(Loader):
    """A `Loader` of a preference dataset whose batches hold whole pairs: chosen rows first, then the rejected
    rows of the same pairs in the same order (see the module doc). ``batch_size`` counts rows: twice the pairs.

    >>> import tempfile
    >>> from theseus.data.store import open_dataset
    >>> from theseus.data.tokenizer import get_tokenizer
    >>> root = tempfile.mkdtemp()
    >>> _ = tokenize_pairs([(f"{i}+0=", f"{i}", "x") for i in range(5)], get_tokenizer(),
    ...                    DatasetWriter(root, "p", "padded"), 8, reading=Reading(val_pct=0))
    >>> loader = PairLoader(open_dataset(root, "p"), batch_size=4, block_size=8)
    >>> rows = loader.row_indices(3); rows.tolist() == [2 * (r // 2) + i // 2 for i, r in enumerate(rows)]
    True
    >>> bool((loader.batch(3, rows=[1, 3])["x"] == loader.batch(3)["x"][[1, 3]]).all())
    True
    """

    READS_PAIRS = True

    def __init__(self, dataset: Dataset, split: str = "train", seed: int = 0, batch_size: int = 8,
                 block_size: int = 512):
        if not is_pairs(dataset):
            raise BadInput(f"dataset {dataset.name!r} holds no preference pairs: make it with "
                           "data/tokenize/preference")
        if batch_size < 2 or batch_size % 2:
            raise BadInput(f"a preference batch holds whole pairs: batch_size must be even, got {batch_size}")
        super().__init__(dataset, split, seed=seed, batch_size=batch_size, block_size=block_size)
        if self.n_rows % 2:
            raise BadInput(f"dataset {dataset.name!r} {split} has {self.n_rows} rows, not whole pairs")
        self.n_pairs = self.n_rows // 2
        self._pair_orders = EpochOrders(self.seed)  # pairs, not rows, are what an epoch shuffles

    def row_indices(self, k: int, rows=None) -> np.ndarray:
        """Dataset rows of the rows of step ``k``: row ``j`` of the batch is the chosen row of pair ``j % (B/2)``
        of the step, or its rejected row when ``j >= B/2``.

        >>> loader.row_indices(0).shape                       # doctest: +SKIP
        (4,)
        """
        half = self.batch_size // 2
        g = self._global_rows(rows)
        position = check_step(k) * half + g % half  # the pair's place in the run's stream of pairs
        epochs, pos = position // self.n_pairs, position % self.n_pairs
        pairs = np.empty_like(position)
        for e in np.unique(epochs).tolist():
            sel = epochs == e
            pairs[sel] = self._pair_orders(e, self.n_pairs)[pos[sel]]
        return 2 * pairs + g // half

    def __repr__(self) -> str:
        return "Pair" + super().__repr__()


# -- the tokenize job ---------------------------------------------------------------------


@dataclass
class PreferenceSource:
    """``data.preference``: local .jsonl / .json files of ``{"prompt", "chosen", "rejected"}`` records or of chat
    pairs ``{"chosen": [messages], "rejected": [messages]}`` (globs allowed), the dataset name, and the chat
    template of the chat pairs ("": the tokenizer's own, ChatML for tiktoken; "chatml"; or a .jinja file's path).

    >>> PreferenceSource().dataset
    'preference'
    """

    paths: list[str] = field(default_factory=list)
    dataset: str = "preference"
    template: str = ""


@dataclass
class PreferenceData(PaddedData):
    """``data`` of ``data/tokenize/preference``: the padded keys, the source, and what an overlong pair becomes.

    >>> PreferenceData().overlong
    'truncate'
    """

    block_size: int = 512
    overlong: str = "truncate"
    preference: PreferenceSource = field(default_factory=PreferenceSource)
    overwrite: bool = False


@dataclass
class PreferenceConfig:
    """The config of ``data/tokenize/preference``.

    >>> PreferenceConfig().data.block_size
    512
    """

    data: PreferenceData = field(default_factory=PreferenceData)
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)


@job("data/tokenize/preference", "Tokenize prompt/chosen/rejected records as padded row pairs for DPO.")
class TokenizePreference(TokenizeJob):
    """``{"prompt", "chosen", "rejected"}`` records into the padded pair dataset ``data.preference.dataset``
    (`tokenize_pairs`); ``data.overlong``: ``truncate`` (cut on the right) or ``drop`` a pair over
    ``block_size``; the counts of both land in the summary and the log.

    >>> TokenizePreference.defaults().data.preference.dataset
    'preference'
    """

    Config = PreferenceConfig
    kind = "padded"

    @property
    def dataset(self) -> str:  # type: ignore[override]
        return self.config.data.preference.dataset

    def check_source(self) -> None:
        """The paths must be given and exist; ``data.overlong`` must be known.

        >>> import tempfile
        >>> TokenizePreference.create(tempfile.mkdtemp(), "t")
        Traceback (most recent call last):
        ...
        theseus.errors.BadInput: data.preference.paths is empty: set it to your .jsonl files of prompt, chosen and rejected
        """  # noqa: E501 - a doctest's expected output, printed on one line
        if self.config.data.overlong not in OVERLONG:
            raise BadInput(f"data.overlong must be one of {', '.join(OVERLONG)}, got {self.config.data.overlong!r}")
        paths = list(self.config.data.preference.paths)
        if not paths:
            raise BadInput("data.preference.paths is empty: set it to your .jsonl files of prompt, chosen and "
                           "rejected")
        self.files = sources.expand_paths(paths)

    def source(self) -> Iterator[PairText]:
        """The records' `PairText`; the chat template is loaded at the first chat pair (text pairs need none)."""
        choice = self.config.data.preference.template
        return read_pairs(self.files, functools.cache(lambda: load_template(self.tokenizer, choice)))

    def tokenize(self, out: DatasetWriter, reading: Reading) -> dict:
        """Write the pairs into ``out`` (`tokenize_pairs`) and log what was truncated and left out."""
        data = self.config.data
        summary = tokenize_pairs(self.source(), self.tokenizer, out, data.block_size, data.overlong, reading)
        self.log.info(f"DATA | {summary['pairs']} pairs of {summary['records']} records | {summary['truncated']} "
                      f"truncated | {summary['dropped']} left out (data.overlong={data.overlong})")
        return summary
