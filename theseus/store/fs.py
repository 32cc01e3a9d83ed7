"""File helpers: where a root lives (local folders and fsspec URLs such as gs://), atomic
publish of a file or a folder, reads that refuse what is not a regular file of the root,
and the same operations on a bare location (a path or URL) for artifact folders."""

from __future__ import annotations

import errno
import hashlib
import os
import re
import shutil
import stat
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

import fsspec
from fsspec.implementations.local import LocalFileSystem

from theseus.errors import BadInput, MissingFile, Refused

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
        raise BadInput("root must be a non-empty path or URL")
    try:
        fs, path = fsspec.core.url_to_fs(root)
    except ValueError as e:  # fsspec's answer to an unknown protocol: the root named is bad input
        raise BadInput(f"root {root!r}: {e}") from None
    if is_local(fs):
        path = os.path.abspath(path)
        if os.path.exists(path) and not os.path.isdir(path):  # neither a reader nor a writer can use it
            raise NotADirectoryError(f"root {path} is a file, not a folder")
    return fs, path.rstrip("/") or "/"


def require_root(fs: fsspec.AbstractFileSystem, path: str) -> None:
    """Raise :class:`~theseus.errors.MissingFile` (a FileNotFoundError) naming the root when it does not
    exist: reading one is an error (a typo must not look like an empty root), while writing creates it.

    >>> require_root(*open_root("/no/such/root"))
    Traceback (most recent call last):
    ...
    theseus.errors.MissingFile: no root at /no/such/root: the folder does not exist (a writer creates it)
    """
    if not fs.isdir(path):
        raise MissingFile(f"no root at {url(fs, path)}: the folder does not exist (a writer creates it)")


def is_local(where: fsspec.AbstractFileSystem | str) -> bool:
    """True for the local filesystem (where rename is atomic and fsync exists), given a
    filesystem or a location (a plain path or a ``file://`` URL).

    >>> is_local(open_root("/tmp/x")[0]), is_local("/tmp/x"), is_local("file:///tmp/x"), is_local("gs://b/x")
    (True, True, True, False)
    """
    if isinstance(where, str):
        return fsspec.core.split_protocol(where)[0] in (None, "file", "local")
    return isinstance(where, LocalFileSystem)


def url(fs: fsspec.AbstractFileSystem, path: str) -> str:
    """A path with the protocol a user can hand back to fsspec (``gs://b/p``).

    >>> fs, p = open_root("/tmp/x")
    >>> url(fs, p)
    '/tmp/x'
    """
    if is_local(fs):
        return path
    return fs.unstrip_protocol(path)


def publish(fs: fsspec.AbstractFileSystem, path: str, data: bytes | memoryview | pa.Buffer,
            exclusive: bool = False) -> None:
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


def publish_folder(fs: fsspec.AbstractFileSystem, staging: str, path: str, last: str) -> None:
    """Make the local folder ``staging`` visible at ``path`` whole, replacing any folder there;
    the file named ``last`` marks the folder complete, so it appears last and goes first.

    Locally ``staging`` is a sibling of ``path`` (one rename publishes it): a folder already
    at ``path`` is renamed aside, ``staging`` renamed into place, the parent fsynced, the old
    folder removed. On object stores, which have no folder rename, ``last`` of the old folder
    is removed before anything else of it, every file of ``staging`` is uploaded, ``last``
    at the end, and the local ``staging`` removed.

    >>> import tempfile
    >>> parent = tempfile.mkdtemp()
    >>> os.makedirs(parent + "/.new"); open(parent + "/.new/meta.json", "w").close()
    >>> publish_folder(open_root(parent)[0], parent + "/.new", parent + "/ds", "meta.json")
    >>> os.listdir(parent), os.listdir(parent + "/ds")
    (['ds'], ['meta.json'])
    """
    if is_local(fs):
        old = None
        if os.path.exists(path):  # a folder being replaced, or garbage without ``last``
            old = f"{os.path.dirname(path)}/.{os.path.basename(path)}.old-{uuid.uuid4().hex[:12]}"
            os.rename(path, old)
        os.rename(staging, path)
        _fsync_folder(os.path.dirname(path))
        if old:
            shutil.rmtree(old, ignore_errors=True)
        return
    if fs.exists(path):
        if fs.exists(f"{path}/{last}"):
            fs.rm(f"{path}/{last}")  # the old folder stops being complete before any file changes
        fs.rm(path, recursive=True)
    for name in sorted(os.listdir(staging)):
        if name != last:
            fs.put_file(os.path.join(staging, name), f"{path}/{name}")
    fs.put_file(os.path.join(staging, last), f"{path}/{last}")
    shutil.rmtree(staging, ignore_errors=True)

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


# ---------------------------------------------------------------------------
# the "inside the root only" rule: what theseus reads, writes and deletes locally
# is a regular file or folder reached from the root without a link (a link may point
# anywhere, a FIFO blocks a read forever, a device never ends)

TEMPORARY = re.compile(r"^\..+\.[0-9a-f]{8}\.tmp$")  # publish()'s temporary names


class NotPlainFile(Refused, OSError):
    """A path theseus refuses to read or delete: a link, FIFO, device or socket, or one
    reached through a link; the message names it and says what it is."""


def kind_of(mode: int) -> str:
    """What an ``lstat`` mode is, in words.

    >>> kind_of(os.lstat("/").st_mode), kind_of(os.lstat("/dev/null").st_mode)
    ('a folder', 'a character device')
    """
    for test, kind in ((stat.S_ISREG, "a regular file"), (stat.S_ISDIR, "a folder"), (stat.S_ISLNK, "a symbolic link"),
                       (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return kind
    return "not a regular file"


def check_regular(fs: fsspec.AbstractFileSystem, path: str) -> None:
    """Raise :class:`NotPlainFile` unless ``path`` is a regular file itself (not a link to one).

    Readers call it before opening a file of the root, since opening a FIFO blocks and a
    device never ends; FileNotFoundError passes through. Object stores hold only files.

    >>> check_regular(open_root("/")[0], "/dev/null")
    Traceback (most recent call last):
    ...
    theseus.store.fs.NotPlainFile: /dev/null is a character device, not a regular file: not read
    """
    if is_local(fs):
        mode = os.lstat(path).st_mode
        if not stat.S_ISREG(mode):
            raise NotPlainFile(f"{path} is {kind_of(mode)}, not a regular file: not read")


def open_regular(path: str, single_link: bool = False):
    """Open a local regular file for binary reading, refusing anything else without blocking.

    The checks are made on the open file itself (no race with a swap): a link is not
    followed, and a FIFO is opened without waiting for a writer, then refused. With
    ``single_link``, a file with more than one hard link is refused too: a hard link
    made inside the root may name any file of the same filesystem, outside the root.

    >>> import tempfile
    >>> with open_regular(tempfile.mkstemp()[1]) as f:
    ...     f.read()
    b''
    >>> path = tempfile.mkstemp()[1]; os.link(path, path + ".twin")
    >>> open_regular(path, single_link=True)
    Traceback (most recent call last):
    ...
    theseus.store.fs.NotPlainFile: ... has 2 hard links (one may be outside the root): not read
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    except OSError as e:
        if e.errno == errno.ELOOP:  # the last part is a link
            raise NotPlainFile(f"{path} is a symbolic link: not followed") from None
        raise
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or (single_link and st.st_nlink > 1):
        os.close(fd)
        raise NotPlainFile(f"{path} is {kind_of(st.st_mode)}, not a regular file: not read"
                           if not stat.S_ISREG(st.st_mode) else _linked(path, st.st_nlink))
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def _linked(path: str, links: int) -> str:
    return f"{path} has {links} hard links (one may be outside the root): not read"


def read_regular(fs: fsspec.AbstractFileSystem, path: str, single_link: bool = False) -> bytes:
    """The bytes of a file of the root; locally only a regular file (see :func:`open_regular`,
    which ``single_link`` is passed to; object stores have no links).

    >>> fs, p = open_root("/tmp/theseus-doc")
    >>> publish(fs, p + "/hello.txt", b"hi")
    >>> read_regular(fs, p + "/hello.txt", single_link=True)
    b'hi'
    """
    if not is_local(fs):
        return fs.cat_file(path)
    with open_regular(path, single_link) as f:
        return f.read()


def walk_files(fs: fsspec.AbstractFileSystem, folder: str, limit: int) -> tuple[list[tuple[str, int]], bool]:
    """``([(path relative to folder, size)], cut)``: the regular files under ``folder`` with one
    hard link, reached without a link (links are neither followed nor listed), sorted; at most
    ``limit`` entries are looked at (files and folders), and ``cut`` says whether more were left.
    A missing folder has no files. Callers check the folder itself with :func:`check_inside`.

    >>> import tempfile
    >>> d = tempfile.mkdtemp(); write_atomic(d + "/a/b.txt", b"hi"); os.symlink("/", d + "/up")
    >>> walk_files(open_root(d)[0], d, 10), walk_files(open_root(d)[0], d, 1)
    (([('a/b.txt', 2)], False), ([], True))
    """
    if not is_local(fs):
        try:
            found = sorted(fs.find(folder, detail=True).items())
        except FileNotFoundError:
            return [], False
        files = [(p[len(folder) + 1:], int(info.get("size") or 0)) for p, info in found[:limit]
                 if info.get("type") != "directory" and p.startswith(folder + "/")]
        return files, len(found) > limit
    files, todo, seen = [], [""], 0
    while todo:
        prefix = todo.pop()
        try:
            entries = sorted(os.scandir(f"{folder}/{prefix}" if prefix else folder), key=lambda e: e.name)
        except (FileNotFoundError, NotADirectoryError):
            continue
        for entry in entries:
            seen += 1
            if seen > limit:
                return sorted(files), True
            st = entry.stat(follow_symlinks=False)
            if stat.S_ISDIR(st.st_mode):
                todo.append(prefix + entry.name + "/")
            elif stat.S_ISREG(st.st_mode) and st.st_nlink == 1:
                files.append((prefix + entry.name, st.st_size))
    return sorted(files), False


def check_inside(fs: fsspec.AbstractFileSystem, root: str, path: str) -> None:
    """Raise :class:`NotPlainFile` unless ``path`` lies under ``root`` with no link on the
    way: neither it nor a folder between it and the root is a link. Every delete checks
    this first, since deleting through a link deletes outside the root.

    >>> import tempfile
    >>> root = tempfile.mkdtemp()
    >>> os.symlink("/tmp", root + "/objects")
    >>> check_inside(*open_root(root), root + "/objects/x")
    Traceback (most recent call last):
    ...
    theseus.store.fs.NotPlainFile: .../objects is a symbolic link (to /tmp): not followed
    """
    parts = path[len(root):].split("/") if path.startswith(root + "/") else None
    if not parts or any(p in ("", ".", "..") for p in parts[1:]):
        raise NotPlainFile(f"{path} is not a path inside the root {root}: not followed")
    if not is_local(fs):
        return
    current = root
    for part in parts[1:]:
        current = f"{current}/{part}"
        try:
            mode = os.lstat(current).st_mode
        except FileNotFoundError:
            return  # nothing there to follow
        if stat.S_ISLNK(mode):
            raise NotPlainFile(f"{current} is a symbolic link (to {os.readlink(current)}): not followed")


def temporaries(fs: fsspec.AbstractFileSystem, root: str) -> list[tuple[str, float, int]]:
    """``(path, mtime, size)`` of every temporary file :func:`publish` left under ``root``
    (a writer killed between writing and renaming one), links never followed.

    >>> import tempfile
    >>> root = tempfile.mkdtemp()
    >>> open(root + "/.s-1.parquet.0123abcd.tmp", "w").close()
    >>> [os.path.basename(p) for p, _, _ in temporaries(*open_root(root))]
    ['.s-1.parquet.0123abcd.tmp']
    """
    if not is_local(fs):
        return []  # an upload is visible only when complete: object stores hold no temporaries
    found = []
    for top, _, names in os.walk(root):  # does not descend into linked folders
        for name in names:
            if TEMPORARY.match(name):
                full = f"{top}/{name}"
                try:
                    st = os.lstat(full)
                except FileNotFoundError:
                    continue  # renamed or removed meanwhile
                if stat.S_ISREG(st.st_mode):
                    found.append((full, st.st_mtime, st.st_size))
    return sorted(found)


# ---------------------------------------------------------------------------
# the same operations on a bare location (a path or URL), for artifact folders that
# are handed around as one string (a checkpoint folder, a dataset's files)

_BLOCK = 16 << 20  # bytes hashed per read


def local_path(location: str) -> str:
    """The absolute filesystem path of a local ``location``.

    >>> local_path("file:///tmp/x")
    '/tmp/x'
    """
    if not is_local(location):
        raise BadInput(f"{location} is not a local path")
    return os.path.abspath(fsspec.core.split_protocol(location)[1])


def join(location: str, *parts: str) -> str:
    """``location/part/...`` for a path or URL.

    >>> join("gs://b/run", "checkpoint", "index.json")
    'gs://b/run/checkpoint/index.json'
    """
    return "/".join([location.rstrip("/"), *(p.strip("/") for p in parts)])


def check_relative(path: str) -> str:
    """``path`` if it is a clean relative path inside a folder, else ValueError.

    >>> check_relative("config.yaml")
    'config.yaml'
    >>> check_relative("../x")
    Traceback (most recent call last):
    ...
    theseus.errors.BadInput: '../x' is not a relative path inside the folder
    """
    parts = path.split("/")
    if not path or path.startswith("/") or any(p in ("", ".", "..") for p in parts) or "\\" in path:
        raise BadInput(f"{path!r} is not a relative path inside the folder")
    return path


def write_atomic(location: str, data: bytes | memoryview) -> None:
    """:func:`publish` ``data`` at a path or URL: visible whole or not at all.

    >>> import tempfile; d = tempfile.mkdtemp()
    >>> write_atomic(d + "/a.json", b"{}"); open(d + "/a.json", "rb").read()
    b'{}'
    """
    fs, path = open_root(location)
    publish(fs, path, bytes(data))


def read_bytes(location: str) -> bytes:
    """The content of the file at ``location`` (path or URL).

    >>> import tempfile; d = tempfile.mkdtemp(); write_atomic(d + "/a", b"x"); read_bytes(d + "/a")
    b'x'
    """
    fs, path = fsspec.core.url_to_fs(location)
    return read_regular(fs, path)  # a FIFO named like a manifest would block the read


def read_many(locations: list[str], threads: int = 16) -> list[bytes]:
    """The contents of several files, read concurrently (object stores are latency-bound).

    >>> import tempfile; d = tempfile.mkdtemp(); write_atomic(d + "/a", b"x"); read_many([d + "/a"])
    [b'x']
    """
    with ThreadPoolExecutor(max(1, min(threads, len(locations)))) as pool:
        return list(pool.map(read_bytes, locations))


def exists(location: str) -> bool:
    """Whether a file exists at ``location``.

    >>> exists("/nonexistent/MANIFEST.json")
    False
    """
    fs, path = fsspec.core.url_to_fs(location)
    return fs.exists(path)


def remove_tree(location: str) -> None:
    """Delete the folder at ``location`` and everything in it (no error if it is absent).

    >>> import tempfile; d = tempfile.mkdtemp(); write_atomic(d + "/x/a", b"1"); remove_tree(d + "/x")
    >>> exists(d + "/x/a")
    False
    """
    fs, path = fsspec.core.url_to_fs(location)
    if fs.exists(path):
        fs.rm(path, recursive=True)


def remove_tree_except(location: str, keep: str) -> None:
    """Delete everything in the folder at ``location`` except its entry named ``keep`` (no error if absent).

    >>> import tempfile; d = tempfile.mkdtemp(); write_atomic(d + "/a", b"1"); write_atomic(d + "/k/b", b"2")
    >>> remove_tree_except(d, "k"); exists(d + "/a"), exists(d + "/k/b")
    (False, True)
    """
    fs, path = fsspec.core.url_to_fs(location)
    if not fs.exists(path):
        return
    for entry in fs.ls(path, detail=False):
        if entry.rstrip("/").rsplit("/", 1)[-1] != keep:
            fs.rm(entry, recursive=True)


def hash_file(location: str) -> tuple[int, str]:
    """(size, sha256 hex) of the file at ``location``, streamed in blocks.

    >>> import tempfile; d = tempfile.mkdtemp(); write_atomic(d + "/a", b"")
    >>> hash_file(d + "/a")
    (0, 'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855')
    """
    fs, path = fsspec.core.url_to_fs(location)
    digest, size = hashlib.sha256(), 0
    with fs.open(path, "rb") as f:
        while block := f.read(_BLOCK):
            digest.update(block)
            size += len(block)
    return size, digest.hexdigest()
