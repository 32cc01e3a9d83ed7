"""Retired checkpoints in an audit, and clearing the ones a crash left behind (``theseus gc``).

A retired checkpoint (`theseus.store.retired`) is never one a reader needs: ``retired-needed`` (an
error) names one that is the newest committed checkpoint of its lineage (what a resume restores, and
what ``sample``/``verify`` take for the run) or the node another lineage starts from (a branch); a
retired one whose folder still holds checkpoint files is a ``retired-object`` warning, which
``theseus gc`` clears.

>>> retired_problems([], [], None, None)
[]
"""

from __future__ import annotations

from theseus.audit.checkpoints import folder_of
from theseus.audit.report import WARNING, Problem
from theseus.store import retired, schema, trust
from theseus.store.node import describe


def retired_nodes(records: list[dict]) -> dict[str, str]:
    """``{node id: reason}`` of the retired checkpoints among reserved ``records`` (node, key, value).

    >>> retired_nodes([{"node": "a", "key": "_retired", "value": "keep_checkpoints=1"},
    ...                {"node": "b", "key": "_checkpoint", "value": "objects/b"}])
    {'a': 'keep_checkpoints=1'}
    """
    return {r["node"]: r["value"] for r in records if r["key"] == schema.RETIRED and r["value"]}


def retired_problems(records: list[dict], origins: list[tuple[str, str]], fs, base: str | None) -> list[Problem]:
    """``retired-needed`` errors and ``retired-object`` warnings of the reserved ``records``; ``origins``:
    ``(run label, node id its seq 0 starts from)`` of the branches; ``fs`` None skips looking at folders.

    >>> records = [{"node": "a", "name": "r", "nonce": "abc123", "seq": 2, "key": k, "value": v}
    ...            for k, v in (("_checkpoint", "objects/a"), ("_retired", "keep_checkpoints=1"))]
    >>> [p.kind for p in retired_problems(records, [], None, None)]
    ['retired-needed']
    """
    gone = retired_nodes(records)
    if not gone:
        return []
    out = []
    newest: dict[tuple[str, str], dict] = {}
    for r in records:
        if r["key"] == schema.CHECKPOINT:
            run = (r["name"], r["nonce"])
            if run not in newest or r["seq"] > newest[run]["seq"]:
                newest[run] = r
    for (name, nonce), r in sorted(newest.items()):
        if r["node"] in gone:
            out.append(Problem("retired-needed", f"{name}:{nonce}", f"the newest checkpoint of {name}:{nonce} (seq "
                               f"{r['seq']}) is retired ({gone[r['node']]}): a resume would restore an older one"))
    for label, origin in origins:
        if origin in gone:
            out.append(Problem("retired-needed", label, f"{label} starts from {describe(origin)}, whose checkpoint is "
                               f"retired ({gone[origin]}): the branch cannot be started again from it"))
    if fs is not None:
        for r in records:
            if r["key"] == schema.CHECKPOINT and r["node"] in gone and _holds(fs, base, r["value"]):
                path = folder_of(r["value"])
                out.append(Problem("retired-object", path, f"{path} ({describe(r['node'])}) still holds its retired "
                                   "checkpoint (left by a crash?); `theseus gc` deletes it", WARNING))
    return out


def _holds(fs, base: str, path: str) -> bool:
    """Whether the checkpoint folder ``path`` (root-relative) still holds checkpoint files."""
    try:
        return retired.holds_checkpoint(fs, trust.checkpoint_folder(fs, base, path))
    except ValueError:
        return False  # leaves the root: reported by the checkpoint checks, never followed


def clear_retired(fs, base: str, records: list[dict], dry_run: bool) -> tuple[list[str], list[tuple[str, str]], int]:
    """Clear the folders of retired checkpoints that still hold files (`theseus.store.retired.clear`): the folders
    cleared (or, with ``dry_run``, to clear), those kept with the reason, and the bytes freed. A folder that a
    live checkpoint or an artifacts record of another node also names is kept.

    >>> import tempfile
    >>> from theseus.audit.reading import open_root
    >>> fs, base = open_root(tempfile.mkdtemp())
    >>> clear_retired(fs, base, [], dry_run=True)
    ([], [], 0)
    """
    gone = retired_nodes(records)
    live = {folder_of(r["value"]) for r in records
            if r["key"] in schema.FOLDER_KEYS and r["value"] and r["node"] not in gone}
    cleared, kept, freed = [], [], 0
    for r in records:
        if r["key"] != schema.CHECKPOINT or r["node"] not in gone or not r["value"]:
            continue
        path = folder_of(r["value"])
        if path in live:
            kept.append((path, "a live checkpoint or artifacts record of another node names it"))
            continue
        try:
            folder = trust.checkpoint_folder(fs, base, r["value"])
        except ValueError as e:
            kept.append((path, str(e)))
            continue
        if not retired.holds_checkpoint(fs, folder):
            continue
        if dry_run:
            freed += _size(fs, folder)
        else:
            try:
                freed += retired.clear(fs, base, folder)
            except (OSError, ValueError) as e:  # a link (NotPlainFile) is never followed
                kept.append((path, str(e)))
                continue
        cleared.append(path)
    return cleared, kept, freed


def _size(fs, folder: str) -> int:
    """Bytes of what clearing ``folder`` would delete."""
    found = fs.find(folder, detail=True)
    prefix = folder.rstrip("/") + "/"
    return sum(int(info.get("size") or 0) for name, info in found.items()
               if name[len(prefix):].split("/", 1)[0] not in retired.KEPT)
