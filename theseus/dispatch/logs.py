"""The output of launched processes, read back from the root (``theseus logs ROOT NONCE``).

Each bootstrap publishes its process's output at ``objects/<first node of the
launch>/logs/process-<i>.log``. A lineage's launches start at seq 0 and, for each
resume, at the node after a checkpointed one, so those are the only folders
looked at (no listing of ``objects/``).

>>> import tempfile
>>> from theseus.dispatch.bootstrap import publish_log
>>> from theseus.dispatch.spec import LaunchSpec
>>> from theseus.store import Store
>>> root = tempfile.mkdtemp()
>>> spec = LaunchSpec("data/tokenize/pydoc", "tok", "", root, nonce="abcdef")
>>> with Store(root).writer() as w:
...     w.job(spec.first_node(), spec.job_key, "")
>>> _ = publish_log(spec, 0, b"hello from process 0\\n")
>>> [(log.node.seq, log.process, log.text()) for log in find_logs(root, "abcdef")]
[(0, 0, 'hello from process 0\\n')]
"""

from __future__ import annotations

import dataclasses
import re

import fsspec

from theseus.store import EmptyResult, Store, layout
from theseus.store.node import Node, check_nonce

__all__ = ["ProcessLog", "find_logs"]

_NAME = re.compile(r"^process-(\d+)(?:\.(\d+))?\.log$")


@dataclasses.dataclass(frozen=True)
class ProcessLog:
    """One published process output: the launch's first node, the process index, the attempt, its URL.

    >>> ProcessLog(Node("a.b.c", "abcdef", 0), 1, 1, "/r/x.log").title
    'a.b.c:abcdef seq 0, process 1'
    """

    node: Node
    process: int
    attempt: int
    path: str

    @property
    def title(self) -> str:
        """A one-line heading naming the launch and the process."""
        again = f" (attempt {self.attempt})" if self.attempt > 1 else ""
        return f"{self.node.name}:{self.node.nonce} seq {self.node.seq}, process {self.process}{again}"

    def text(self) -> str:
        """The whole output (UTF-8, undecodable bytes replaced)."""
        with fsspec.open(self.path, "rb") as f:
            return f.read().decode(errors="replace")


def find_logs(root: str, nonce: str, process: int | None = None) -> list[ProcessLog]:
    """The published outputs of every launch of run ``nonce``, by seq, process and attempt.

    An unknown nonce is an error naming the root; a run with no published output
    (one without a job record too: a script's run, never launched) gives an empty list.

    >>> import tempfile
    >>> find_logs(tempfile.mkdtemp(), "abcdef")
    Traceback (most recent call last):
    ...
    theseus.store.cursor.EmptyResult: no run with nonce 'abcdef' in ...
    """
    check_nonce(nonce)
    store = Store(root)
    # the reserved record names the run; one without reserved records (a script's run) is named by its nodes
    name = store.run_record(nonce).get("name") or store.find().nonce(nonce).first().name
    starts = [Node(name, nonce, 0)]
    try:
        # a launch from a since-retired checkpoint still published its output beside the next node
        starts += [node.next() for node in store.find().nonce(nonce).checkpoint(retired=True).all()]
    except (EmptyResult, ValueError):
        pass
    found: list[ProcessLog] = []
    for node in sorted(set(starts), key=lambda n: n.seq):
        folder = store.path(layout.OBJECTS, node.id, layout.PROCESS_LOGS)
        try:
            names = [p.rstrip("/").rsplit("/", 1)[-1] for p in store.fs.ls(folder, detail=False)]
        except FileNotFoundError:
            continue
        for file in names:
            match = _NAME.match(file)
            if not match or (process is not None and int(match[1]) != process):
                continue
            found.append(ProcessLog(Node(name, nonce, node.seq), int(match[1]), int(match[2] or 1),
                                    store.url(layout.OBJECTS, node.id, layout.PROCESS_LOGS, file)))
    return sorted(found, key=lambda log: (log.node.seq, log.attempt, log.process))
