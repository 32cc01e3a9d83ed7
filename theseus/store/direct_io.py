"""Large local files written durably around the page cache, hashed as they are written.

``write_file(path, blocks)`` writes a new file from bytes-like blocks (NumPy arrays of any dtype included) under a
temporary name in the same folder, synced, then renamed into place, and returns its size and sha256, hashed on
another thread while it is written: no second read. It writes with ``O_DIRECT`` through an aligned staging
buffer (the last block zero-padded, then the file cut to its size), because a fresh page of the cache costs
more CPU to fill than the disk takes to write it, and a file this large is not read back soon; where the
platform or filesystem refuses ``O_DIRECT`` it writes through the cache. ``sync_folders(top, paths)`` then
makes the new entries durable, one fsync per folder however many files it gained.

>>> import os, tempfile, hashlib, numpy as np
>>> top = tempfile.mkdtemp(); os.makedirs(top + "/a/b")
>>> size, digest = write_file(top + "/a/b/w", [b"head", np.arange(3, dtype=np.float32)])
>>> size, digest == hashlib.sha256(b"head" + np.arange(3, dtype=np.float32).tobytes()).hexdigest()
(16, True)
>>> len(sync_folders(top, [top + "/a/b/w"]))  # a/b, a and top
3
"""

from __future__ import annotations

import hashlib
import mmap
import os
import uuid
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from theseus.store.fs import _fsync_folder  # the one way a folder is synced

#: a file is written through two staging buffers of at most this size each (one filled and hashed while the other
#: is written), in whole blocks of this alignment
STAGING_BYTES = 2**23
DIRECT_ALIGN = 4096


def _pieces(block: Any, limit: int) -> Iterator[np.ndarray]:
    """``block``'s bytes in C order as arrays of unsigned integers: a contiguous one whole, flat; a strided one
    (a transposed view) in pieces of at most ``limit`` bytes (rows, or smaller), never copied as a whole."""
    if not isinstance(block, np.ndarray):
        yield np.frombuffer(block, dtype=np.uint8)
        return
    # bytes are what is written: unsigned integers of the same size copy fastest (bfloat16 has no fast copy)
    array = block.reshape(1) if block.ndim == 0 else block.view(f"u{block.dtype.itemsize}") \
        if block.dtype.itemsize in (1, 2, 4, 8) else block
    if array.flags.c_contiguous or array.nbytes <= limit:
        yield array
        return
    rows = limit // max(1, array[0].nbytes)
    if rows:
        for start in range(0, len(array), rows):
            yield array[start:start + rows]
    else:
        for row in array:
            yield from _pieces(row, limit)


class _Staged:
    """The writer of one open file: bytes are copied into a staging buffer and hashed there, then written from it
    on another thread while the other buffer fills; with ``direct``, whole aligned blocks (``O_DIRECT``)."""

    def __init__(self, fd: int, size: int, direct: bool, pool: ThreadPoolExecutor):
        self.fd, self.direct, self.pool = fd, direct, pool
        self.maps = [mmap.mmap(-1, size) for _ in range(2)]  # anonymous memory is page aligned, as O_DIRECT needs
        self.buffers = [np.frombuffer(m, dtype=np.uint8) for m in self.maps]
        self.digest, self.held, self.current, self.writing = hashlib.sha256(), 0, 0, None

    def put(self, piece: np.ndarray) -> None:
        """Append ``piece``'s bytes (C order)."""
        free = self.buffers[self.current].size - self.held
        if not piece.flags.c_contiguous and piece.nbytes <= free:  # copied in order straight into the buffer
            out = self.buffers[self.current][self.held:self.held + piece.nbytes].view(piece.dtype)
            np.copyto(out.reshape(piece.shape), piece)
            self.held += piece.nbytes
            if self.held == self.buffers[self.current].size:
                self.flush()
            return
        flat = np.ascontiguousarray(piece).reshape(-1).view(np.uint8)
        while flat.size:
            n = min(flat.size, self.buffers[self.current].size - self.held)
            self.buffers[self.current][self.held:self.held + n] = flat[:n]
            self.held, flat = self.held + n, flat[n:]
            if self.held == self.buffers[self.current].size:
                self.flush()

    def flush(self) -> None:
        """Hash the bytes held and hand them to the writing thread (padded to a block where direct)."""
        buffer, held = self.buffers[self.current], self.held
        self.digest.update(buffer[:held])  # hashlib releases the GIL on large buffers
        size = -(-held // DIRECT_ALIGN) * DIRECT_ALIGN if self.direct else held
        buffer[held:size] = 0
        self.wait()
        self.writing = self.pool.submit(_write_all, self.fd, memoryview(self.maps[self.current])[:size])
        self.current, self.held = 1 - self.current, 0

    def wait(self) -> None:
        if self.writing is not None:
            self.writing.result()
            self.writing = None

    def close(self) -> None:
        self.wait()
        self.buffers.clear()
        for m in self.maps:
            m.close()


def _write_all(fd: int, view: memoryview) -> None:
    while view.nbytes:
        view = view[os.write(fd, view):]


def _write(path: str, blocks: Sequence[Any], total: int, direct: bool) -> str | None:
    """Write the new file ``path``, synced; its sha256, or None, nothing left behind, where ``direct`` is refused."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | (getattr(os, "O_DIRECT", 0) if direct else 0),
                     0o644)
    except OSError:
        if direct:
            return None
        raise
    size = min(STAGING_BYTES, max(DIRECT_ALIGN, -(-total // DIRECT_ALIGN) * DIRECT_ALIGN))
    try:
        with ThreadPoolExecutor(1) as pool:
            staged = _Staged(fd, size, direct, pool)
            try:
                for block in blocks:
                    for piece in _pieces(block, size):
                        staged.put(piece)
                if staged.held:
                    staged.flush()
            finally:
                staged.close()
        if direct:
            os.ftruncate(fd, total)  # the last block's padding cut off
        os.fsync(fd)
    except OSError:
        if not direct:
            raise
        os.close(fd)
        os.remove(path)
        return None
    except BaseException:
        os.close(fd)
        raise
    os.close(fd)
    return staged.digest.hexdigest()


def write_file(path: str, blocks: Sequence[Any]) -> tuple[int, str]:
    """Write ``blocks`` (bytes-like, or NumPy arrays of any dtype and layout, written in C order) as the file
    ``path`` (replacing one there), synced and renamed into place; returns its ``(size, sha256)``. Its folder must
    exist; the new entry is durable once `sync_folders` has synced it.

    >>> import tempfile
    >>> folder = tempfile.mkdtemp(); write_file(folder + "/empty", [])
    (0, 'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855')
    >>> write_file(folder + "/t", [np.arange(6, dtype=np.uint8).reshape(2, 3).T])[0], open(folder + "/t", "rb").read()
    (6, b'\\x00\\x03\\x01\\x04\\x02\\x05')
    """
    total = sum(memoryview(b).nbytes if not isinstance(b, np.ndarray) else b.nbytes for b in blocks)
    folder, name = os.path.split(path)
    temporary = os.path.join(folder, f".{name}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        digest = _write(temporary, blocks, total, direct=bool(getattr(os, "O_DIRECT", 0)))
        if digest is None:  # the platform or filesystem refuses O_DIRECT: through the page cache
            digest = _write(temporary, blocks, total, direct=False)
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.remove(temporary)
        raise
    return total, digest


def read_file(path: str) -> tuple[np.ndarray, str]:
    """The bytes of the file ``path`` as a flat uint8 array (in page-aligned memory of its own) and their sha256,
    hashed as they are read; read with ``O_DIRECT`` where the platform and filesystem allow it, as `write_file`
    writes, so a file not read soon again does not fill the page cache.

    >>> import tempfile
    >>> folder = tempfile.mkdtemp(); _ = write_file(folder + "/a", [b"abc"])
    >>> data, digest = read_file(folder + "/a"); bytes(data), digest[:8]
    (b'abc', 'ba7816bf')
    """
    flag = getattr(os, "O_DIRECT", 0)
    try:
        fd = os.open(path, os.O_RDONLY | flag)
    except OSError:
        if not flag:
            raise
        fd, flag = os.open(path, os.O_RDONLY), 0
    try:
        size = os.fstat(fd).st_size
        memory = mmap.mmap(-1, max(DIRECT_ALIGN, -(-size // DIRECT_ALIGN) * DIRECT_ALIGN))
        view, digest, held = memoryview(memory), hashlib.sha256(), 0
        while held < size:
            try:
                n = os.readv(fd, [view[held:held + STAGING_BYTES]])
            except OSError:
                if not flag:
                    raise
                os.close(fd)  # refused part way (an unaligned filesystem): the rest through the cache
                fd, flag = os.open(path, os.O_RDONLY), 0
                os.lseek(fd, held, os.SEEK_SET)
                continue
            if not n:
                raise OSError(f"{path} ended at byte {held} of {size}")
            digest.update(view[held:held + n])
            held += n
        view.release()
    finally:
        os.close(fd)
    return np.frombuffer(memory, dtype=np.uint8)[:size], digest.hexdigest()


def sync_folders(top: str, paths: Iterable[str], threads: int = 16) -> list[str]:
    """Fsync every folder from each of ``paths``' folders up to ``top`` (inclusive), each once, so the files written
    there and the folders made for them are durable once it returns; returns the folders synced. The fsyncs run on
    ``threads`` threads at once: a journaling filesystem commits those that wait together in one commit.

    >>> import tempfile
    >>> top = tempfile.mkdtemp(); os.makedirs(top + "/x/y")
    >>> [f[len(top):] for f in sync_folders(top, [top + "/x/y/a", top + "/x/b"])]
    ['/x/y', '/x', '']
    """
    top = os.path.normpath(top)
    folders: set[str] = set()
    for path in paths:
        folder = os.path.dirname(os.path.normpath(path))
        while folder not in folders and (folder == top or folder.startswith(top + os.sep)):
            folders.add(folder)
            folder = os.path.dirname(folder)
    ordered = sorted(folders, key=lambda f: (-f.count(os.sep), f))
    with ThreadPoolExecutor(max(1, min(threads, len(ordered)))) as pool:
        list(pool.map(_fsync_folder, ordered))
    return ordered
