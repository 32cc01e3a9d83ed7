"""A resume's claim to continue a lineage, so that two resumes of one tip never both go on.

Resuming node k in its own lineage writes the nodes k+1, k+2... of that lineage;
two resumes of the same tip would write two histories over the same node ids.
The log is the arbiter (no conditional writes are needed, so it works on any
filesystem or object store): before its first record, a resume

1. refuses when the lineage already has records at or after k+1 (someone went on);
2. appends a ``_claim`` record at k+1 and flushes it (durable);
3. reads every ``_claim`` of k+1: if one is another writer's, it refuses.

At most one resume goes on: of two claims, the one published second is read by
its own writer together with the first. Both may refuse when their claims are
published at nearly the same moment; each is told so, and resuming again
branches, since the lineage then has records past k.

>>> import tempfile
>>> from theseus.store import Node, Store
>>> store, tip = Store(tempfile.mkdtemp()), Node.start("doc-claim")
>>> with store.writer() as w:
...     w.write(tip, {"train/loss": 1.0})
>>> with store.writer() as a, store.writer() as b:
...     claim(store, a, tip.next())
...     try:
...         claim(store, b, tip.next())
...     except ResumeConflict as e:
...         print("refused:", "already continued" in str(e))
refused: True
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from theseus.errors import Refused
from theseus.store import schema
from theseus.store.listing import list_segments, retry_vanished
from theseus.store.node import Node
from theseus.store.reader import scan

if TYPE_CHECKING:
    from theseus.store.store import Store
    from theseus.store.writer import Writer

__all__ = ["ResumeConflict", "claim", "claims"]



class ResumeConflict(Refused, RuntimeError):
    """Another resume already continues this lineage from the same node.

    >>> issubclass(ResumeConflict, RuntimeError)
    True
    """


def claim(store: Store, writer: Writer, node: Node) -> None:
    """Claim ``node`` (the first node of a run resumed in its own lineage) for ``writer``.

    Raises :class:`ResumeConflict` naming the lineage when its records already reach
    ``node`` (nothing is written then), or when another writer's claim of ``node`` is
    visible once this one is durable (see the module doc).

    >>> import tempfile
    >>> from theseus.store import Store
    >>> store, tip = Store(tempfile.mkdtemp()), Node.start("doc-claim")
    >>> with store.writer() as w:
    ...     w.write(tip, {"train/loss": 1.0}); w.flush()
    ...     claim(store, w, tip.next())
    ...     claims(store, tip.next()) == [w.id]
    True
    """
    lineage = f"{node.name}:{node.nonce}"
    last = _last_seq(store, node)
    if last >= node.seq:
        raise ResumeConflict(
            f"cannot continue {lineage} at seq {node.seq}: it was already continued (its records reach seq {last}), "
            "e.g. by another resume of the same node; resume again to branch, or branch() it")
    writer.claim(node)
    others = [w for w in claims(store, node) if w != writer.id]
    if others:
        raise ResumeConflict(
            f"cannot continue {lineage} at seq {node.seq}: another resume (writer {', '.join(others)}) claimed it "
            "at the same time; at most one resume continues a lineage, so this one stops before training "
            "(resume again to branch, or branch() it)")


def claims(store: Store, node: Node) -> list[str]:
    """The ids of the writers that claimed ``node``, in stamp order (retried under a concurrent compaction).

    >>> import tempfile
    >>> from theseus.store import Store
    >>> claims(Store(tempfile.mkdtemp()), Node.start("doc-claim"))
    []
    """
    def read() -> list[str]:
        paths = list_segments(store.fs, store.path(), node.name, node.nonce)
        if not paths:
            return []
        rows = (scan(store.fs, paths)
                .filter((pl.col("key") == schema.CLAIM) & (pl.col("seq") == node.seq))
                .select("stamp", "writer").unique().sort("stamp", "writer").collect())
        return list(dict.fromkeys(rows["writer"].to_list()))

    return retry_vanished(read)


def _last_seq(store: Store, node: Node) -> int:
    """The highest seq ``node``'s lineage has records for (-1 for none): one column of its segments."""
    def read() -> int:
        paths = list_segments(store.fs, store.path(), node.name, node.nonce)
        last = scan(store.fs, paths).select(pl.col("seq").max()).collect().item() if paths else None
        return -1 if last is None else last

    return retry_vanished(read)
