"""Where a root lives: local folders and fsspec URLs (gs://), with atomic publish."""

from __future__ import annotations

import os
import uuid
from typing import TYPE_CHECKING

import fsspec
from fsspec.implementations.local import LocalFileSystem

if TYPE_CHECKING:
    import pyarrow as pa


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


def publish(fs: fsspec.AbstractFileSystem, path: str, data: bytes | memoryview | pa.Buffer, exclusive: bool = False) -> None:
    """Make ``data`` (any bytes-like object) visible at ``path`` whole or not at all.

    With ``exclusive``, a ``path`` that already exists is a FileExistsError and is left
    as it was: locally the temporary is hard-linked to ``path`` (which fails if the name
    exists) instead of renamed over it; object stores without conditional writes only
    check before the upload, so there two publishers racing within that window both
    write (callers that need it publish identical bytes under one name).

    Locally: write a temporary name in the same folder (``.<name>.<random>.tmp``,
    which no reader lists), fsync, rename, fsync the folder and, for each folder
    this call created, its parent. The parents are fsynced last: a journaling
    filesystem has already committed their new entries with the file's fsync, so
    on a new run's first segment this costs two journal commits, not five. On
    object stores a single upload only becomes visible when it completes.

    >>> fs, p = open_root("/tmp/theseus-doc")
    >>> publish(fs, p + "/hello.txt", b"hi")
    >>> open(p + "/hello.txt", "rb").read()
    b'hi'
    >>> try:
    ...     publish(fs, p + "/hello.txt", b"bye", exclusive=True)
    ... except FileExistsError:
    ...     print(open(p + "/hello.txt", "rb").read())
    b'hi'
    """
    if not is_local(fs):
        if exclusive and fs.exists(path):
            raise FileExistsError(f"{url(fs, path)} already exists")
        fs.pipe_file(path, data if isinstance(data, bytes) else bytes(data))
        return
    folder, name = path.rsplit("/", 1)
    created = [] if os.path.isdir(folder) else _make_folders(folder)
    tmp = f"{folder}/.{name}.{uuid.uuid4().hex[:8]}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        try:
            view, written = memoryview(data), 0
            while written < len(view):
                written += os.write(fd, view[written:])
            os.fsync(fd)
        finally:
            os.close(fd)
        if exclusive:
            os.link(tmp, path)  # unlike rename, fails when the name exists
            os.unlink(tmp)
        else:
            os.rename(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    _fsync_folder(folder)
    for new in reversed(created):  # deepest first: each new folder's entry in its parent
        _fsync_folder(os.path.dirname(new))


def _make_folders(folder: str) -> list[str]:
    """Create ``folder`` and its missing parents; returns the folders made, outermost first.

    Their parents still need an fsync before the new entries are durable.
    """
    missing = []
    while not os.path.isdir(folder):
        missing.append(folder)
        folder = os.path.dirname(folder)
    missing.reverse()
    for new in missing:
        try:
            os.mkdir(new)
        except FileExistsError:  # made by another writer meanwhile; its entry may not be durable yet
            pass
    return missing


def _fsync_folder(folder: str) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
