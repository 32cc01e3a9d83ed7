"""Which filesystem holds a path (from ``/proc/self/mountinfo``), and so whether its folders' ctimes
prove a listing current (``theseus.store.listing``).
"""

from __future__ import annotations

import os
import re

# Kernel filesystems whose folder ctime changes on every entry added or removed and cannot be
# set from user space. FUSE (gcsfuse reports fixed times), NFS (cached attributes) and other
# network filesystems are not listed: there every query lists.
CTIME_FILESYSTEMS = frozenset({"ext2", "ext3", "ext4", "xfs", "btrfs", "tmpfs", "f2fs", "zfs", "overlay"})
_filesystem_types: dict[int, str] = {}


def ctime_proves_listings(path: str) -> bool | None:
    """True when ``path`` is on a filesystem whose folder ctimes prove listings current
    (None while ``path`` does not exist).

    >>> ctime_proves_listings("/proc"), ctime_proves_listings("/no/such/folder")
    (False, None)
    """
    try:
        device = os.stat(path).st_dev
    except OSError:
        return None
    if device not in _filesystem_types:
        _filesystem_types[device] = _filesystem_type(os.path.realpath(path))
    return _filesystem_types[device] in CTIME_FILESYSTEMS


def _filesystem_type(path: str) -> str:
    """The type of the mount holding ``path``, from /proc/self/mountinfo ("" when unknown)."""
    best, kind = "", ""
    try:
        with open("/proc/self/mountinfo") as f:
            for line in f:
                fields = line.split()
                mount = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4])  # "\\040" is a space
                fstype = fields[fields.index("-") + 1]
                inside = path == mount or path.startswith(mount.rstrip("/") + "/")
                if inside and len(mount) >= len(best):
                    best, kind = mount, fstype
    except (OSError, ValueError, IndexError):
        return ""
    return kind
