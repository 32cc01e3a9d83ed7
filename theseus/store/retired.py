"""Retired checkpoints: the record that retires one, and what deleting a retired checkpoint removes.

A checkpoint is retired by a ``_retired`` record on its node (`Writer.retire`), written by a
run's retention (``logging.keep_checkpoints``) once a newer checkpoint commits. Retirement is
final: ``.checkpoint()`` no longer matches the node and nothing restores it. Only after the
record is durable is the folder cleared: everything of the checkpoint goes (its ``MANIFEST.json``
first, so a half-cleared folder never looks complete), while ``analysis/`` (published analyses,
which have their own record) and ``logs/`` (a dispatched launch's output) stay; a folder left
empty goes too. The job clears as it goes; ``theseus gc`` clears any a crash left behind.

>>> import tempfile
>>> from theseus.store import Node, Store
>>> store, node = Store(tempfile.mkdtemp()), Node.start("doc-retired")
>>> with store.writer() as w:
...     w.checkpoint(node, f"objects/{node.id}"); w.retire(node, "keep_checkpoints=1")
>>> retired(store.record(node))
'keep_checkpoints=1'
"""

from __future__ import annotations

import os
import shutil
import stat

import polars as pl

from theseus.store import fs as rootfs
from theseus.store import schema
from theseus.store.layout import ANALYSIS, MANIFEST, PROCESS_LOGS

#: entries of a node's folder that clearing its retired checkpoint keeps (they have other owners)
KEPT = (ANALYSIS, PROCESS_LOGS)


def retired(record: dict) -> str | None:
    """Why the checkpoint of the node folded as ``record`` was retired; None when it was not.

    >>> retired({"_checkpoint": "objects/x"}), retired({"_retired": "keep_checkpoints=2"})
    (None, 'keep_checkpoints=2')
    """
    return record.get(schema.RETIRED) or None


def kept_checkpoints(rows: pl.DataFrame) -> pl.DataFrame:
    """The ``_checkpoint`` rows of a run's records (columns ``seq``, ``key``, ...) whose node is not retired.

    >>> rows = pl.DataFrame({"seq": [0, 1, 1], "key": ["_checkpoint", "_checkpoint", "_retired"],
    ...                      "str": ["objects/a", "objects/b", "keep_checkpoints=1"]})
    >>> kept_checkpoints(rows)["seq"].to_list()
    [0]
    """
    retired_seqs = rows.filter(pl.col("key") == schema.RETIRED).select("seq")
    return rows.filter(pl.col("key") == schema.CHECKPOINT).join(retired_seqs, on="seq", how="anti")


def holds_checkpoint(fs, folder: str) -> bool:
    """Whether ``folder`` (a path of ``fs``) still holds anything clearing a retired checkpoint removes.

    >>> import tempfile
    >>> fs, base = rootfs.open_root(tempfile.mkdtemp())
    >>> os.makedirs(f"{base}/analysis"); holds_checkpoint(fs, base)
    False
    """
    return bool(_entries(fs, folder))


def clear(fs, base: str, folder: str) -> int:
    """Delete the retired checkpoint in ``folder`` (a path of ``fs`` under the root ``base``): every
    entry but `KEPT`, ``MANIFEST.json`` first, then the folder itself when nothing is left. Returns
    the bytes freed. Nothing is deleted through a link (`theseus.store.fs.NotPlainFile`).

    >>> import tempfile
    >>> fs, base = rootfs.open_root(tempfile.mkdtemp())
    >>> for rel in ("objects/n/MANIFEST.json", "objects/n/checkpoint/a", "objects/n/analysis/x/MANIFEST.json"):
    ...     rootfs.write_atomic(f"{base}/{rel}", b"12")
    >>> clear(fs, base, f"{base}/objects/n"), sorted(os.listdir(f"{base}/objects/n"))
    (4, ['analysis'])
    """
    rootfs.check_inside(fs, base, folder)
    freed = 0
    for name in sorted(_entries(fs, folder), key=lambda n: n != MANIFEST):
        path = f"{folder}/{name}"
        rootfs.check_inside(fs, base, path)
        freed += _remove(fs, path)
    if rootfs.is_local(fs):
        try:
            os.rmdir(folder)  # only when empty: what KEPT names stays
        except OSError:
            pass
    return freed


def _entries(fs, folder: str) -> list[str]:
    """Names of the entries of ``folder`` that clearing removes (none when it is absent)."""
    try:
        listed = os.listdir(folder) if rootfs.is_local(fs) else [
            p.rstrip("/").rsplit("/", 1)[-1] for p in fs.ls(folder, detail=False)]
    except (FileNotFoundError, NotADirectoryError):
        return []
    return [name for name in listed if name not in KEPT]


def _remove(fs, path: str) -> int:
    """Delete the file or folder ``path`` (a link itself, never its target); the bytes freed."""
    if not rootfs.is_local(fs):
        try:
            size = sum(int(info.get("size") or 0) for info in fs.find(path, detail=True).values())
            fs.rm(path, recursive=True)
        except FileNotFoundError:
            return 0
        return size
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return 0  # removed meanwhile (the job and gc may clear one folder at once)
    if not stat.S_ISDIR(st.st_mode):
        os.unlink(path)
        return st.st_size
    size = 0
    for top, _, names in os.walk(path):
        size += sum(os.lstat(os.path.join(top, n)).st_size for n in names)
    shutil.rmtree(path, ignore_errors=True)
    return size
