"""What ``theseus run ... --resume`` continues: the newest lineage of a run name, when it did not finish.

``newest_lineage(store, name)`` is the lineage of ``name`` written last (inspection branches
left out), with its status by the rule of ``ls`` (`theseus.store.status`), its last seq and
the seq of its latest committed checkpoint. A lineage that did not finish (running, stale,
failed, preempted) is resumable from that checkpoint; ``theseus run`` without ``--resume``
prints a hint when the newest lineage of the name it starts is such a one.

>>> import tempfile
>>> from theseus.store import Node, Store
>>> store = Store(tempfile.mkdtemp())
>>> newest_lineage(store, "train-gpt") is None
True
>>> node = Node("general.default.train-gpt", "abcdef", 0)
>>> with store.writer() as w:
...     w.job(node, "gpt/train/pretrain", "")
...     w.failed(node.next(), "boom")
>>> lineage = newest_lineage(store, "train-gpt")
>>> lineage.label, lineage.status, lineage.finished, lineage.checkpoint_seq
('general.default.train-gpt:abcdef', 'failed', False, None)
"""

from __future__ import annotations

import dataclasses

from theseus.store import Store
from theseus.store.node import normalize_name
from theseus.store.status import without_inspections

__all__ = ["Lineage", "newest_lineage"]


@dataclasses.dataclass(frozen=True)
class Lineage:
    """One lineage of a run name: its nonce, status, last seq and latest checkpoint's seq (None: none).

    >>> Lineage("general.default.r", "abcdef", "preempted", 9, 9).finished
    False
    """

    name: str
    nonce: str
    status: str
    last_seq: int
    checkpoint_seq: int | None

    @property
    def finished(self) -> bool:
        """Whether the lineage ran to its end (nothing to resume)."""
        return self.status == "finished"

    @property
    def label(self) -> str:
        """``name:nonce``, as messages name a lineage."""
        return f"{self.name}:{self.nonce}"


def newest_lineage(store: Store, name: str) -> Lineage | None:
    """The lineage of run ``name`` ('run' or 'project.group.run') written last in ``store``; None when it has none.

    >>> import tempfile
    >>> newest_lineage(Store(tempfile.mkdtemp()), "nothing-here"), newest_lineage(Store("/no/such/root"), "r")
    (None, None)
    """
    name = normalize_name(name)
    try:
        if not store.find().name(name).all():
            return None
    except FileNotFoundError:  # no root yet: a writer creates it, and it holds no lineage
        return None
    runs = without_inspections(store.runs())
    runs = runs.filter(runs["name"] == name).sort("_written")
    if runs.height == 0:
        return None
    row = runs.row(runs.height - 1, named=True)
    nonce = row["nonce"]
    checkpoints = store.find().name(name).nonce(nonce).checkpoint().all()
    return Lineage(name, nonce, row["status"], int(row["last seq"]),
                   checkpoints[-1].seq if checkpoints else None)
