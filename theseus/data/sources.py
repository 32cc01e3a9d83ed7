"""Raw text sources: iterators of documents (str) or of (prompt, response) pairs.

Streaming corpora (``fineweb``, ``text_files``, ``pydoc_corpus``) yield str
documents for ``tokenize_contiguous``; instruction sets (``addition``,
``alpaca``) yield ``(prompt, response)`` pairs for ``tokenize_padded``.
Hub loaders are imported lazily so that local sources need no ``datasets``.
"""

from __future__ import annotations

import glob as globlib
import json
import os
import random
from typing import Iterator, Sequence

import fsspec
import pyarrow.parquet as pq

from theseus.errors import BadInput, MissingFile

TEXT_EXTENSIONS = (".txt", ".jsonl", ".parquet")
FINEWEB_COLUMNS = ("text", "id", "dump", "url", "date", "file_path", "language", "language_score", "token_count")
ALPACA_PROMPT = (
    "Below is an instruction that describes a task, paired with an input that provides further context. "
    "Write a response that appropriately completes the request.\n\n"
    "### Instruction:\n{instruction}\n\n### Input:\n{input}\n\n### Response:\n"
)
ALPACA_PROMPT_NO_INPUT = (
    "Below is an instruction that describes a task. "
    "Write a response that appropriately completes the request.\n\n"
    "### Instruction:\n{instruction}\n\n### Response:\n"
)


def expand_paths(paths: str | Sequence[str]) -> list[str]:
    """Local paths or fsspec URLs, globs expanded, in the given order (each glob sorted).

    A path or glob that matches nothing is a ``FileNotFoundError`` naming it.

    >>> expand_paths([__file__]) == [__file__]
    True
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    out = []
    for p in paths:
        p = os.fspath(p)
        fs, path = fsspec.core.url_to_fs(p)
        if globlib.has_magic(path):
            matches = sorted(fs.glob(path))
            if not matches:
                raise MissingFile(f"no file matches {p!r}")
            protocol = fsspec.core.split_protocol(p)[0]
            out += [m if protocol in (None, "file") else f"{protocol}://{m}" for m in matches]
        elif fs.isfile(path):
            out.append(p)
        else:
            raise MissingFile(f"corpus file not found: {p!r}")
    if not out:
        raise BadInput("no corpus paths given")
    return out


def _parquet_texts(path: str, column: str = "text") -> Iterator[str]:

    with fsspec.open(path, "rb") as f:
        pf = pq.ParquetFile(f)
        if column not in pf.schema_arrow.names:
            raise BadInput(f"{path!r} has no {column!r} column (columns: {', '.join(pf.schema_arrow.names)})")
        for batch in pf.iter_batches(batch_size=1024, columns=[column]):
            yield from (t for t in batch.column(0).to_pylist() if t is not None)


def _jsonl_texts(path: str, field: str = "text") -> Iterator[str]:
    with fsspec.open(path, "rt", encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            record = json.loads(line)
            if field not in record:
                raise BadInput(f"{path}:{lineno}: record has no {field!r} field")
            yield record[field]


def text_files(paths: str | Sequence[str]) -> Iterator[str]:
    """Documents from local files (or fsspec URLs): a ``.txt`` file is one document,
    a ``.jsonl`` file one document per line (field ``text``), a ``.parquet`` file
    one per row (column ``text``). Globs are expanded.

    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "a.txt"; _ = p.write_text("hello")
    >>> list(text_files([str(p)]))
    ['hello']
    """
    files = expand_paths(paths)  # checked now, not at the first next()
    for p in files:
        if not p.endswith(TEXT_EXTENSIONS):
            raise BadInput(f"unsupported corpus file {p!r}; expected one of {', '.join(TEXT_EXTENSIONS)}")
    return _text_files(files)


def _text_files(files: list[str]) -> Iterator[str]:
    for p in files:
        if p.endswith(".txt"):
            with fsspec.open(p, "rt", encoding="utf-8") as f:
                yield f.read()
        elif p.endswith(".jsonl"):
            yield from _jsonl_texts(p)
        else:
            yield from _parquet_texts(p)


def fineweb(snapshot: str = "CC-MAIN-2022-21", data_files: str | Sequence[str] | None = None) -> Iterator[str]:
    """FineWeb documents: streamed from the hub (``HuggingFaceFW/fineweb``, config
    ``snapshot``), or from local/fsspec parquet files in FineWeb's format when
    ``data_files`` is given.

    >>> docs = fineweb()            # doctest: +SKIP
    >>> next(docs)[:20]             # doctest: +SKIP
    '...'
    """
    # lazily: Hugging Face datasets is heavy and only these sources need it
    import datasets

    if data_files is None:
        ds = datasets.load_dataset("HuggingFaceFW/fineweb", name=snapshot, split="train", streaming=True)
    else:
        files = expand_paths(data_files)
        ds = datasets.load_dataset("parquet", data_files=files, split="train", streaming=True)
        if ds.column_names is not None and "text" not in ds.column_names:
            raise BadInput(f"{files[0]!r} is not in FineWeb format: no 'text' column (columns: {ds.column_names})")
    return (row["text"] for row in ds)


def pydoc_corpus() -> Iterator[str]:
    """The Python documentation topics shipped with the standard library
    (``pydoc_data.topics``), one document per topic: ~0.47 MB of English and
    technical text that needs no network, for quickstarts and tests.

    >>> sum(1 for _ in pydoc_corpus()) > 50
    True
    """
    # lazily: a large module, read only by this source
    from pydoc_data.topics import topics

    for key in sorted(topics):
        yield topics[key]


def addition(n: int = 10000, seed: int = 0, max_digits: int = 3) -> Iterator[tuple[str, str]]:
    """``n`` synthetic sums ``("a+b=", "c")`` with operands of 1..``max_digits`` digits,
    the same sequence for the same seed.

    >>> list(addition(2, seed=0, max_digits=2))
    [('63+4=', '67'), ('61+71=', '132')]
    """
    if n < 0 or max_digits < 1:
        raise BadInput(f"addition needs n >= 0 and max_digits >= 1, got n={n}, max_digits={max_digits}")
    return _addition(n, random.Random(seed), max_digits)


def _addition(n: int, rng: random.Random, max_digits: int) -> Iterator[tuple[str, str]]:
    def number() -> int:
        digits = rng.randint(1, max_digits)
        return rng.randint(0 if digits == 1 else 10 ** (digits - 1), 10**digits - 1)

    for _ in range(n):
        a, b = number(), number()
        yield f"{a}+{b}=", str(a + b)


def alpaca_prompt(instruction: str, input: str = "") -> str:
    """The Alpaca prompt for one record (the variant without input when ``input`` is empty).

    >>> alpaca_prompt("Say hi.").endswith("### Response:\\n")
    True
    """
    if input:
        return ALPACA_PROMPT.format(instruction=instruction, input=input)
    return ALPACA_PROMPT_NO_INPUT.format(instruction=instruction)


def _json_records(path: str) -> Iterator[dict]:
    with fsspec.open(path, "rt", encoding="utf-8") as f:
        if path.endswith(".jsonl"):
            for line in f:
                if line.strip():
                    yield json.loads(line)
        else:
            records = json.load(f)
            if not isinstance(records, list):
                raise BadInput(f"{path!r}: expected a JSON list of records")
            yield from records


def alpaca(data_files: str | Sequence[str] | None = None) -> Iterator[tuple[str, str]]:
    """Alpaca instruction records as ``(prompt, response)`` pairs: from the hub
    (``tatsu-lab/alpaca``) or from local ``.json`` (a list) / ``.jsonl`` files with
    fields ``instruction``, ``input``, ``output``.

    >>> import tempfile, json, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "a.json"
    >>> _ = p.write_text(json.dumps([{"instruction": "Add 1+1.", "input": "", "output": "2"}]))
    >>> [r for _, r in alpaca(str(p))]
    ['2']
    """
    if data_files is None:
        # lazily: Hugging Face datasets is heavy and only these sources need it
        import datasets

        records = datasets.load_dataset("tatsu-lab/alpaca", split="train")
    else:
        files = expand_paths(data_files)
        records = (r for p in files for r in _json_records(p))
    return _alpaca_pairs(records)


def _alpaca_pairs(records) -> Iterator[tuple[str, str]]:
    for i, r in enumerate(records):
        missing = [k for k in ("instruction", "output") if k not in r]
        if missing:
            raise BadInput(f"alpaca record {i} lacks {', '.join(missing)} (fields: instruction, input, output)")
        yield alpaca_prompt(r["instruction"], r.get("input") or ""), r["output"]


def chat_messages(record, where: str) -> list:
    """The messages of one chat record: its ``messages``, or a ``prompt`` / ``response`` pair as a user and an
    assistant turn. Anything else is a ``BadInput`` naming ``where``.

    >>> chat_messages({"prompt": "1+1?", "response": "2"}, "a.jsonl:1")[1]
    {'role': 'assistant', 'content': '2'}
    """
    if isinstance(record, dict) and "messages" in record:
        return record["messages"]
    if isinstance(record, dict) and isinstance(record.get("prompt"), str) and isinstance(record.get("response"), str):
        return [{"role": "user", "content": record["prompt"]}, {"role": "assistant", "content": record["response"]}]
    keys = ", ".join(map(repr, record)) if isinstance(record, dict) else type(record).__name__
    raise BadInput(f"{where}: a chat record has 'messages' (a list of {{'role', 'content'}}) or 'prompt' and "
                   f"'response' strings, got {keys}")


def _is_saved_dataset(path: str) -> bool:
    return os.path.isdir(path) and any(os.path.isfile(os.path.join(path, n))
                                       for n in ("dataset_info.json", "state.json", "dataset_dict.json"))


def check_chat_paths(paths: Sequence[str]) -> list[str]:
    """The chat corpus: ``.jsonl`` files (globs expanded) and folders of a Hugging Face dataset saved with
    ``save_to_disk``, each checked to exist.

    >>> check_chat_paths([])
    Traceback (most recent call last):
    ...
    theseus.errors.BadInput: data.chat.paths is empty: ...
    """
    if not paths:
        raise BadInput('data.chat.paths is empty: set it to .jsonl files of {"messages": [...]} records or saved '
                       'dataset folders')
    out = []
    for p in map(os.fspath, paths):
        if _is_saved_dataset(p):
            out.append(p)
            continue
        files = expand_paths([p])
        wrong = [f for f in files if not f.endswith(".jsonl")]
        if wrong:
            raise BadInput(f"chat corpus {wrong[0]!r} is neither a .jsonl file nor a saved dataset folder")
        out += files
    return out


def chat_records(paths: Sequence[str]) -> Iterator[tuple[str, list]]:
    """``(where, messages)`` of each conversation of ``check_chat_paths(paths)``, ``where`` naming the row
    (``file:line``, or ``folder[index]`` of a saved dataset).

    >>> import tempfile, json, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "c.jsonl"
    >>> _ = p.write_text(json.dumps({"messages": [{"role": "user", "content": "hi"}]}) + "\\n")
    >>> [(where.endswith("c.jsonl:1"), m[0]["content"]) for where, m in chat_records([str(p)])]
    [(True, 'hi')]
    """
    for path in check_chat_paths(paths):
        if _is_saved_dataset(path):
            yield from _saved_chat_records(path)
            continue
        with fsspec.open(path, "rt", encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                if line.strip():
                    where = f"{path}:{lineno}"
                    try:
                        record = json.loads(line)
                    except json.JSONDecodeError as e:
                        raise BadInput(f"{where}: not a JSON line ({e.msg})") from None
                    yield where, chat_messages(record, where)


def _saved_chat_records(path: str) -> Iterator[tuple[str, list]]:
    # lazily: Hugging Face datasets is heavy and only saved datasets need it
    import datasets

    saved = datasets.load_from_disk(path)
    if isinstance(saved, datasets.DatasetDict):
        if "train" not in saved:
            raise BadInput(f"{path}: a saved DatasetDict without a 'train' split (splits: {', '.join(saved)})")
        saved = saved["train"]
    for i, record in enumerate(saved):
        yield f"{path}[{i}]", chat_messages(record, f"{path}[{i}]")
