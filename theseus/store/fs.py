"""Where a root lives: local folders and fsspec URLs (gs://), with atomic publish."""

from __future__ import annotations

import os
import uuid

import fsspec
from fsspec.implementations.local import LocalFileSystem


def open_root(root: str | os.PathLike) -> tuple[fsspec.AbstractFileSystem, str]:
    """Resolve a root to ``(filesystem, path)``; local roots become absolute.

    >>> fs, path = open_root("/tmp/theseus-doc")
    >>> path
    '/tmp/theseus-doc'
    """
    root = os.fspath(root)
    if not root:
        raise ValueError("root must be a non-empty path or URL")
    fs, path = fsspec.core.url_to_fs(root)
    if is_local(fs):
        path = os.path.abspath(path)
    return fs, path.rstrip("/") or "/"


def is_local(fs: fsspec.AbstractFileSystem) -> bool:
    """True for the local filesystem (where rename is atomic and fsync exists)."""
    return isinstance(fs, LocalFileSystem)


def url(fs: fsspec.AbstractFileSystem, path: str) -> str:
    """A path with the protocol a user can hand back to fsspec (``gs://b/p``).

    >>> fs, p = open_root("/tmp/x")
    >>> url(fs, p)
    '/tmp/x'
    """
    if is_local(fs):
        return path
    return fs.unstrip_protocol(path)


def publish(fs: fsspec.AbstractFileSystem, path: str, data: bytes) -> None:
    """Make ``data`` visible at ``path`` whole or not at all.

    Locally: write a temporary name in the same folder (ending ``.tmp``, which
    no reader lists), fsync, rename, fsync the folder. On object stores a
    single upload only becomes visible when it completes.

    >>> fs, p = open_root("/tmp/theseus-doc")
    >>> publish(fs, p + "/hello.txt", b"hi")
    >>> open(p + "/hello.txt", "rb").read()
    b'hi'
    """
    if not is_local(fs):
        fs.pipe_file(path, data)
        return
    folder = os.path.dirname(path)
    os.makedirs(folder, exist_ok=True)
    tmp = os.path.join(folder, f".{os.path.basename(path)}.{uuid.uuid4().hex[:8]}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.rename(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    dir_fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
