"""A small tmpfs for the disk-full tests: a root whose disk really fills up (ENOSPC).

Mounting needs root (or CAP_SYS_ADMIN). Where the kernel refuses with EPERM the test
skips and says why, except under CI (``CI=true``), where it fails: CI never goes green
without running the disk-full tests. The mount is always undone (lazily if busy).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import os
from collections.abc import Iterator

from tests.system_packages import skip_or_fail

_MS_REMOUNT = 32  # <sys/mount.h>
_MNT_DETACH = 2
_libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)


def _call(fn, *args) -> None:
    if fn(*args) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))


def _mount(folder: str, size: int, remount: bool = False) -> None:
    _call(_libc.mount, b"tmpfs", os.fsencode(folder), b"tmpfs", _MS_REMOUNT if remount else 0, f"size={size}".encode())


@contextlib.contextmanager
def small_tmpfs(folder: str | os.PathLike, size: int) -> Iterator[str]:
    """Mount a tmpfs of ``size`` bytes (rounded up to pages) on ``folder`` (created); yields its path."""
    folder = os.fspath(folder)
    os.makedirs(folder, exist_ok=True)
    try:
        _mount(folder, size)
    except OSError as e:
        if e.errno != errno.EPERM:
            raise
        why = f"cannot mount a tmpfs for the disk-full test (mount -t tmpfs: {e.strerror}; needs root or CAP_SYS_ADMIN)"
        skip_or_fail(why)
    try:
        yield folder
    finally:
        try:
            _call(_libc.umount2, os.fsencode(folder), 0)
        except OSError:  # busy (a file still open): detach it now, freed when the last user goes
            _call(_libc.umount2, os.fsencode(folder), _MNT_DETACH)


def resize(folder: str | os.PathLike, size: int) -> None:
    """Grow (or shrink) the tmpfs mounted on ``folder`` to ``size`` bytes (``mount -o remount,size=``)."""
    _mount(os.fspath(folder), size, remount=True)


def fill(path: str | os.PathLike) -> int:
    """Write zeros to ``path`` until the disk is full (ENOSPC); returns the bytes written."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    written = 0
    try:
        for block in (1 << 20, 1 << 12, 1):  # down to the last byte a page has room for
            data = bytes(block)
            while True:
                try:
                    written += os.write(fd, data)
                except OSError as e:
                    if e.errno != errno.ENOSPC:
                        raise
                    break
    finally:
        os.close(fd)
    return written
