"""An inspection session's records: a training job ticked outside ``job()`` (``trainer.tick()`` after
``q.find()...resume()``) is closed when the job is closed or the process exits.

A lineage the ticks start (a branch, or a fresh run) is an inspection branch: its status is
``inspecting`` while the session lasts and ``inspected`` once it is closed, and ``theseus ls``
and the UI list it only when asked (``theseus.store.status.INSPECTION``). Ticks that continue an
existing lineage write its status ``closed`` at the end, so that it is never ``running`` forever.
A job that runs (``job()``) after its ticks ends with its own finished or failed record instead.
"""

from __future__ import annotations

from typing import Any

from theseus.store import Node, Store
from theseus.store.status import CLOSED, INSPECTED, INSPECTING


class Inspection:
    """The open inspection of one job's lineage, from its first tick to `close` (idempotent).

    >>> import tempfile
    >>> store, node = Store(tempfile.mkdtemp()), Node.start("look")
    >>> inspection = Inspection(store, new_lineage=True)
    >>> with store.writer() as w:
    ...     inspection.start(w, node)
    >>> store.run_record(node.nonce)["_status"]
    'inspecting'
    >>> inspection.moved(node.next()); inspection.close(); inspection.close()
    >>> store.run_record(node.nonce)["_status"], store.find().nonce(node.nonce).newest().first().seq
    ('inspected', 1)
    """

    def __init__(self, store: Store, new_lineage: bool):
        self.store, self.new_lineage = store, new_lineage
        self.node: Node | None = None  # the last node ticked; None: not started or closed

    def start(self, writer: Any, node: Node) -> None:
        """Mark ``node``'s lineage as inspected (a new one) with ``writer``, after the job record."""
        if self.new_lineage:
            writer.status(node, INSPECTING)
        self.node = node

    def moved(self, node: Node) -> None:
        """The session ticked to ``node``."""
        if self.node is not None:
            self.node = node

    def drop(self) -> None:
        """Forget the session without a record (``job()`` took it over and records its own end)."""
        self.node = None

    def close(self) -> None:
        """Write the session's end at its last node: ``inspected`` (a new lineage) or ``closed``."""
        node, self.node = self.node, None
        if node is None:
            return
        with self.store.writer() as w:
            w.status(node, INSPECTED if self.new_lineage else CLOSED)
