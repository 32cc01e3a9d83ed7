"""``MANIFEST.json``, the seal of an artifact folder: its name, its format, and how it is encoded and parsed.

The one definition the trainer writes (``train/manifest.py``) and the audit reads
(``audit/checkpoints.py``): every file of the folder by relative path with its size
and sha256. A folder is complete exactly when its manifest is present. Only JSON is
read back, never pickles (DESIGN.md invariant 4).

>>> raw = encode([FileEntry.of_bytes("config.yaml", b"lr: 0.1\\n")])
>>> parse(raw)["config.yaml"].size
8
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Iterable

from theseus.errors import BadInput
from theseus.store.fs import check_relative
from theseus.store.layout import MANIFEST

FORMAT = "theseus.manifest/1"


@dataclasses.dataclass(frozen=True)
class FileEntry:
    """One file of a folder: path relative to the folder, size in bytes, sha256 hex digest.

    >>> FileEntry("a", 1, "0" * 64).path
    'a'
    """

    path: str
    size: int
    sha256: str

    @staticmethod
    def of_bytes(path: str, data: bytes | memoryview) -> FileEntry:
        """The entry for ``data`` stored at ``path``.

        >>> FileEntry.of_bytes("a.json", b"{}").size
        2
        """
        return FileEntry(path, memoryview(data).nbytes, hashlib.sha256(data).hexdigest())


def encode(entries: Iterable[FileEntry]) -> bytes:
    """The manifest listing ``entries``, sorted by path; ValueError for a bad, repeated or self-listing path.

    >>> json.loads(encode([FileEntry("b", 0, ""), FileEntry("a", 0, "")]))["files"][0]["path"]
    'a'
    """
    entries = sorted(entries, key=lambda e: e.path)
    _check_paths(e.path for e in entries)
    body = {"format": FORMAT, "files": [dataclasses.asdict(e) for e in entries]}
    return json.dumps(body, indent=1).encode()


def parse(raw: bytes) -> dict[str, FileEntry]:
    """The files a manifest lists, by relative path; ValueError naming what is wrong with it.

    A manifest that does not parse, has another format, or lists a path that could
    leave the folder, twice, or itself is refused whole (a reader then trusts none of it).

    >>> parse(b'{"format": "theseus.manifest/0", "files": []}')
    Traceback (most recent call last):
    ...
    theseus.errors.BadInput: unknown format 'theseus.manifest/0'
    """
    try:
        body = json.loads(raw)
        if not isinstance(body, dict) or body.get("format") != FORMAT:
            raise BadInput(f"unknown format {body.get('format') if isinstance(body, dict) else None!r}")
        entries = [FileEntry(str(f["path"]), int(f["size"]), str(f["sha256"])) for f in body["files"]]
    except (KeyError, TypeError, AttributeError) as e:
        raise BadInput(f"{type(e).__name__}: {e}") from None
    _check_paths(e.path for e in entries)
    return {e.path: e for e in entries}


def _check_paths(paths: Iterable[str]) -> None:
    """ValueError for a path that is not relative, is repeated, or is the manifest itself."""
    seen = set()
    for path in paths:
        check_relative(path)
        if path in seen or path == MANIFEST:
            raise BadInput(f"the manifest lists {path!r} twice or lists itself")
        seen.add(path)
