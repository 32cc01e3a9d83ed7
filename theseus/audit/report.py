"""What an audit and a garbage collection report: problems, runs, checkpoints, what gc deleted and kept.

Plain frozen dataclasses, printable as JSON by ``theseus audit --json``.

>>> Problem("missing-file", "objects/x/a", "gone").severity
'error'
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

ERROR, WARNING = "error", "warning"


@dataclasses.dataclass(frozen=True)
class Problem:
    """One finding: ``kind`` (e.g. ``corrupt-file``), ``path`` (root-relative file or
    folder, or ``name:nonce`` of a run), ``message`` and ``severity`` (``error``
    fails the audit, ``warning`` does not).

    >>> Problem("corrupt-file", "objects/x/a", "sha256 differs").severity
    'error'
    """

    kind: str
    path: str
    message: str
    severity: str = ERROR


@dataclasses.dataclass(frozen=True)
class Change:
    """One config key that differs between two checkpoints (``before``/``after`` None when absent).

    >>> Change("training.tokens", 100, 200)
    Change(key='training.tokens', before=100, after=200)
    """

    key: str
    before: Any
    after: Any


@dataclasses.dataclass(frozen=True)
class CheckpointAudit:
    """One committed checkpoint: its node, folder, file count and bytes on disk, whether
    every file matched MANIFEST.json (``verified`` is None when checksums were skipped),
    its config, the changes from the checkpoint ``against`` (a node id), how many
    integrity problems it has and how many bytes were read and hashed (``hashed``).

    >>> CheckpointAudit("id", 3, "objects/id", 2, 10, True, {"lr": 0.1}, None, ()).ok
    True
    """

    node: str
    seq: int
    path: str
    files: int
    bytes: int
    verified: bool | None
    config: dict | None
    against: str | None
    changes: tuple[Change, ...]
    problems: int = 0
    hashed: int = 0

    @property
    def ok(self) -> bool:
        """True when no integrity problem was found in this checkpoint.

        >>> CheckpointAudit("id", 3, "objects/id", 2, 10, False, None, None, (), problems=1).ok
        False
        """
        return self.problems == 0


@dataclasses.dataclass(frozen=True)
class Resume:
    """A run resumed in its own lineage: the first node of the resumed part and its parent.

    >>> Resume("b", 5, "a", 4, True).parent_seq
    4
    """

    node: str
    seq: int
    parent: str
    parent_seq: int
    parent_checkpoint: bool


@dataclasses.dataclass(frozen=True)
class RunAudit:
    """One run (lineage): identity, job, status, its nodes from seq 0 to the last, the
    node it branched from (``parent``, None for a fresh lineage), resumes, checkpoints,
    and where its job's class came from (``job_source``, None when not recorded).

    >>> run = RunAudit("a.b.c", "949e88", "doc/job", "failed", False, "boom", "id", 3, 0, 2, "id", 0, ((1, 1),))
    >>> run.label
    'a.b.c:949e88'
    """

    name: str
    nonce: str
    job: str | None
    status: str | None
    finished: bool | None
    error: str | None
    error_node: str | None
    nodes: int
    first_seq: int
    last_seq: int
    last_node: str
    written: int
    gaps: tuple[tuple[int, int], ...]
    parent: str | None = None
    resumes: tuple[Resume, ...] = ()
    checkpoints: tuple[CheckpointAudit, ...] = ()
    job_source: str | None = None

    @property
    def label(self) -> str:
        """``name:nonce``, how problems name a run."""
        return f"{self.name}:{self.nonce}"


@dataclasses.dataclass(frozen=True)
class AuditReport:
    """What :func:`audit` found. ``ok`` is False when any problem is an error.

    >>> report = AuditReport("/r", None, (), (Problem("failed-run", "a:1", "boom", WARNING),))
    >>> report.ok, len(report.warnings), json.loads(report.to_json())["ok"]
    (True, 1, True)
    """

    root: str
    nonce: str | None
    runs: tuple[RunAudit, ...]
    problems: tuple[Problem, ...]
    unreferenced: tuple[str, ...] = ()
    segments: int = 0
    files: int = 0
    bytes_verified: int = 0
    seconds: float = 0.0
    checksums: bool = True

    @property
    def ok(self) -> bool:
        """True when no integrity failure was found (warnings allowed)."""
        return not self.errors

    @property
    def errors(self) -> tuple[Problem, ...]:
        """The integrity failures."""
        return tuple(p for p in self.problems if p.severity == ERROR)

    @property
    def warnings(self) -> tuple[Problem, ...]:
        """Findings that do not fail the audit (failed or unfinished runs, unreferenced objects,
        jobs not registered in this process)."""
        return tuple(p for p in self.problems if p.severity != ERROR)

    def to_dict(self) -> dict:
        """The report as plain JSON-able data (``ok`` included)."""
        return {"ok": self.ok, **dataclasses.asdict(self)}

    def to_json(self) -> str:
        """The report as JSON text, for machines (``theseus audit --json``)."""
        return json.dumps(self.to_dict(), indent=1, default=str)


@dataclasses.dataclass(frozen=True)
class GcReport:
    """What :func:`gc` deleted (or, with ``dry_run``, would delete) and the bytes freed, and the
    unreferenced folders it kept, each with the reason (written too recently, its run has no log, a link);
    ``temporaries``: the temporary files of killed writers it deleted (or would delete); ``retired``: the
    folders of retired checkpoints whose files it deleted (or would delete), ``analysis/`` and ``logs/`` kept.

    >>> GcReport(("objects/x",), 10, (("objects/y", "written 5 s ago"),), True).deleted
    ('objects/x',)
    """

    deleted: tuple[str, ...]
    bytes: int
    kept: tuple[tuple[str, str], ...]
    dry_run: bool
    temporaries: tuple[str, ...] = ()
    retired: tuple[str, ...] = ()
