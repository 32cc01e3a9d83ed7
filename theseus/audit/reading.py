"""How the audit reads a root: opening it, the names it looks for, and the helpers its parts share.

Nothing read is executed or unpickled (DESIGN.md invariant 4): configs are parsed as
plain data with the rule resume applies (``store/trust.py``).

>>> relative("/root", "/root/objects/x")
'objects/x'
"""

from __future__ import annotations

import os

import fsspec

from theseus.store import fs as rootfs
from theseus.store import trust

INDEX = "checkpoint/index.json"


def open_root(root: str | os.PathLike) -> tuple[fsspec.AbstractFileSystem, str]:
    """(filesystem, base path) of an existing ``root``; FileNotFoundError when there is none.

    >>> import tempfile
    >>> open_root(tempfile.mkdtemp())[1].startswith("/")
    True
    """
    fs, base = rootfs.open_root(root)
    rootfs.require_root(fs, base)
    return fs, base


def relative(base: str, path: str) -> str:
    """``path`` relative to the root ``base`` (how problems and folders are named in a report).

    >>> relative("/r", "/r/log/a.parquet")
    'log/a.parquet'
    """
    return path[len(base):].lstrip("/")


def first_line(error: BaseException) -> str:
    """The error's type and the first line of its message: one line per problem in a report.

    >>> first_line(ValueError("bad\\nmore"))
    'ValueError: bad'
    """
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"


def thread_count(fs: fsspec.AbstractFileSystem, tasks: int) -> int:
    """Threads for ``tasks`` reads: a few on a local disk, many on an object store (latency-bound).

    >>> fs, _ = rootfs.open_root("/tmp")
    >>> thread_count(fs, 1)
    1
    """
    limit = max(2, min(8, os.cpu_count() or 2)) if rootfs.is_local(fs) else 32
    return max(1, min(limit, tasks))


def parse_config(data: bytes) -> dict:
    """A config.yaml as plain data (no tags, no objects, no resolvers: the rule resume applies too).

    >>> parse_config(b"training:\\n  lr: 0.1\\n")
    {'training': {'lr': 0.1}}
    """
    loaded = trust.plain_config(data.decode(), "this checkpoint")
    return loaded if isinstance(loaded, dict) else {"": loaded}
