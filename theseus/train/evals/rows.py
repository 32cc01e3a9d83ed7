"""The rows of a public evaluation dataset, through Hugging Face ``datasets``: from a local folder or file of its
parquet / jsonl files (nothing downloads), or by its hub name.

A local folder is searched for ``.parquet``, ``.jsonl`` and ``.json`` files whose path
(relative to the folder) contains the ``subset`` (e.g. ``ARC-Easy``) and the ``split``
(e.g. ``validation``), as the hub's repositories lay them out
(``ARC-Easy/test-00000-of-00001.parquet``, ``hellaswag/validation.jsonl``); an empty
subset or split matches every file. Anything else is a hub name, loaded with
``datasets.load_dataset(name, subset, split=split)``.

>>> import json, os, tempfile
>>> folder = tempfile.mkdtemp()
>>> with open(os.path.join(folder, "validation.jsonl"), "w") as f:
...     _ = f.write(json.dumps({"text": "a b c"}) + "\\n")
>>> load_rows(folder, split="validation")
[{'text': 'a b c'}]
"""

from __future__ import annotations

import os
from typing import Any

from theseus.errors import BadInput, MissingFile

__all__ = ["FORMATS", "data_files", "load_rows"]

#: file extensions and the ``datasets`` builder that reads them
FORMATS = {".parquet": "parquet", ".jsonl": "json", ".json": "json"}


def data_files(folder: str, split: str = "", subset: str = "") -> list[str]:
    """The data files of ``folder`` for ``split`` and ``subset`` (see the module doc), sorted; none is an error
    naming what was looked for.

    >>> import tempfile
    >>> data_files(tempfile.mkdtemp(), "test", "ARC-Easy")
    Traceback (most recent call last):
    ...
    theseus.errors.MissingFile: no .parquet / .jsonl / .json file under ... with 'ARC-Easy' and 'test' in its path
    """
    found = []
    for base, _, files in os.walk(folder):
        for file in files:
            path = os.path.join(base, file)
            relative = os.path.relpath(path, folder)
            if os.path.splitext(file)[1] in FORMATS and not file.startswith(".") \
                    and subset in relative and split in relative:
                found.append(path)
    if not found:
        wanted = " and ".join(repr(w) for w in (subset, split) if w)
        raise MissingFile(f"no .parquet / .jsonl / .json file under {folder}"
                          + (f" with {wanted} in its path" if wanted else ""))
    return sorted(found)


def load_rows(path: str, split: str = "", subset: str = "") -> list[dict[str, Any]]:
    """Every row of ``path`` (a local folder or file, or a hub name) as a dict of its columns.

    >>> load_rows("/no/such/file.parquet")
    Traceback (most recent call last):
    ...
    theseus.errors.MissingFile: evaluation data /no/such/file.parquet not found
    """
    import datasets  # heavy: loaded only when an evaluation reads its data

    if not path:
        raise BadInput("no evaluation data named: give a local folder or file, or a hub name")
    local = os.path.exists(path) or path.startswith((".", "/", "~")) or os.path.splitext(path)[1] in FORMATS
    if not local:
        try:
            return list(datasets.load_dataset(path, subset or None, split=split or None))
        except Exception as e:  # offline, unknown name...: say where else the data can come from
            raise MissingFile(f"could not load {path!r} ({subset or 'default'}, {split}) from the hub: {e}; "
                              "give a local folder of its parquet / jsonl files instead") from None
    path = os.path.expanduser(path)
    if not os.path.exists(path):
        raise MissingFile(f"evaluation data {path} not found")
    files = [path] if os.path.isfile(path) else data_files(path, split, subset)
    builders = {FORMATS.get(os.path.splitext(f)[1]) for f in files}
    if len(builders) != 1 or None in builders:
        raise BadInput(f"{path}: the data files must all be parquet or all jsonl/json, got {files}")
    return list(datasets.load_dataset(builders.pop(), data_files=files, split="train"))
