"""How the audit reads a root: opening it, the names it looks for, and the helpers its parts share.

Nothing read is executed or unpickled (DESIGN.md invariant 4): configs are parsed as
plain data with the rule resume applies (``store/trust.py``).

>>> relative("/root", "/root/objects/x")
'objects/x'
"""

from __future__ import annotations

import hashlib
import os

import fsspec

from theseus.store import fs as rootfs
from theseus.store import trust

INDEX = "checkpoint/index.json"
CHUNK = 4 << 20  # bytes hashed per read


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


def list_files(fs, folder: str) -> dict[str, int]:
    """Every file under ``folder`` (relative path -> size); empty when the folder does not exist.

    >>> import tempfile
    >>> list_files(rootfs.open_root("/")[0], tempfile.mkdtemp() + "/none")
    {}
    """
    if rootfs.is_local(fs):
        out = {}
        for top, _, names in os.walk(folder):
            for name in names:
                full = os.path.join(top, name)
                out[os.path.relpath(full, folder).replace(os.sep, "/")] = os.stat(full).st_size
        return out
    try:
        found = fs.find(folder, detail=True)
    except FileNotFoundError:
        return {}
    return {relative(folder, p): int(info.get("size") or 0) for p, info in found.items()
            if info.get("type") != "directory"}


def file_digest(fs, path: str, keep: bool) -> tuple[int, str, bytes | None] | Exception:
    """(bytes read, sha256, the content when ``keep``), or the error reading it: every byte read once, in chunks.

    >>> import tempfile
    >>> path = tempfile.mkstemp()[1]
    >>> file_digest(rootfs.open_root("/")[0], path, keep=True)[::2]
    (0, b'')
    """
    digest, size, kept = hashlib.sha256(), 0, []
    try:
        if rootfs.is_local(fs):
            f = rootfs.open_regular(path)  # a FIFO or device listed in a MANIFEST would block or never end
        else:
            f = fs.open(path, "rb", block_size=CHUNK, cache_type="none")
        with f:
            while block := f.read(CHUNK):
                digest.update(block)
                size += len(block)
                if keep:
                    kept.append(block)
    except Exception as e:
        return e
    return size, digest.hexdigest(), b"".join(kept) if keep else None
