"""The node page's data: the folded record, the artifact files, and the commands that use the node.

Artifact files are listed and served only from the node's own folder, only regular files with
one hard link reached without a link (DESIGN.md invariant 6: a link, soft or hard, may name a
file outside the root), and never run: raster pictures are shown, text is served as plain
text, anything else as a download. An analysis folder without its ``MANIFEST.json`` (a
publication that was interrupted) is named as such, its files neither listed nor served.

>>> import tempfile
>>> from theseus.store import Node, Store
>>> store = Store(tempfile.mkdtemp())
>>> n = Node.start("doc.node.page")
>>> with store.writer() as w:
...     w.write(n, {"train/loss": 2.0})
>>> page = node_page(store, n.id)
>>> page["record"]["train/loss"], page["artifacts"], page["commands"]["sample"].startswith("theseus sample")
(2.0, [], True)
"""

from __future__ import annotations

import mimetypes
import shlex
from typing import Any

from theseus.errors import BadInput
from theseus.store import Node, Store, layout, schema
from theseus.store import fs as rootfs
from theseus.store.fold import WRITTEN

PICTURES = {"image/png", "image/jpeg", "image/gif", "image/webp"}  # raster: shown inline, never run
TEXT = ("application/json", "application/x-yaml", "application/yaml", "image/svg+xml")  # shown as their text
TEXT_SUFFIXES = (".yaml", ".yml", ".log", ".md", ".jsonl")  # text the platform's type table may not know
MAX_ENTRIES = 2000  # files and folders looked at per node; a larger folder is cut, saying so
# an artifact response: nothing in it runs, even opened on its own
ARTIFACT_POLICY = "default-src 'none'; img-src 'self'; style-src 'unsafe-inline'; sandbox"


def _folder(store: Store, node_id: str) -> str:
    """The node's artifact folder, refused (NotPlainFile) when a link lies on the way to it."""
    folder = store.path(layout.OBJECTS, Node.from_id(node_id).id)
    rootfs.check_inside(store.fs, store.path(), folder)
    return folder


def _unsealed(paths: list[str]) -> set[str]:
    """The analysis folders (``analysis/<name>``) among ``paths`` that hold no MANIFEST.json."""
    folders = {"/".join(p.split("/")[:2]) for p in paths if p.startswith(layout.ANALYSIS + "/") and p.count("/") > 1}
    return {f for f in folders if f"{f}/{layout.MANIFEST}" not in paths}


def listing(store: Store, node_id: str) -> dict[str, Any]:
    """The files of the node's artifact folder: ``artifacts`` (path within the folder, size, whether
    the page shows it as a picture), ``interrupted`` (analysis folders without a manifest, whose
    files are left out), ``artifacts_cut`` (the folder held more than ``MAX_ENTRIES`` entries) and
    ``artifacts_refused`` (why nothing is listed: a link on the way to the folder; None when listed).

    >>> import os, tempfile
    >>> store = Store(tempfile.mkdtemp()); n = Node("a.b.c", "abcdef", 0)
    >>> rootfs.write_atomic(store.objects(n) + "/analysis/norms/a.npy", b"x")
    >>> rootfs.write_atomic(store.objects(n) + "/loss.png", b"x")
    >>> found = listing(store, n.id)
    >>> found["artifacts"], found["interrupted"]
    ([{'path': 'loss.png', 'bytes': 1, 'picture': True}], ['analysis/norms'])
    """
    try:
        folder = _folder(store, node_id)
    except rootfs.NotPlainFile as e:
        return {"artifacts": [], "interrupted": [], "artifacts_cut": False, "artifacts_refused": str(e)}
    found, cut = rootfs.walk_files(store.fs, folder, MAX_ENTRIES)
    unsealed = _unsealed([path for path, _ in found])
    files = [{"path": path, "bytes": size, "picture": _media_type(path) in PICTURES}
             for path, size in found if "/".join(path.split("/")[:2]) not in unsealed]
    return {"artifacts": files, "interrupted": sorted(unsealed), "artifacts_cut": cut, "artifacts_refused": None}


def _media_type(relative: str) -> str:
    return mimetypes.guess_type(relative)[0] or "application/octet-stream"


def served_type(relative: str) -> str:
    """The media type an artifact is served with: a raster picture's own, ``text/plain`` for text
    (HTML, SVG, JSON and YAML included: shown, never run), else ``application/octet-stream`` (XML and
    XHTML included: a download).

    >>> served_type("a.png"), served_type("page.xhtml"), served_type("x.svg"), served_type("w.bin")
    ('image/png', 'application/octet-stream', 'text/plain; charset=utf-8', 'application/octet-stream')
    """
    kind = _media_type(relative)
    if kind in PICTURES:
        return kind
    if kind.startswith("text/") or kind in TEXT or relative.lower().endswith(TEXT_SUFFIXES):
        return "text/plain; charset=utf-8"
    return "application/octet-stream"


def artifact_headers(relative: str) -> dict[str, str]:
    """The headers an artifact is served with: the browser may not guess another type, runs nothing
    in it (a sandbox), and downloads what is neither a picture nor text.

    >>> artifact_headers("run.xhtml")["content-disposition"]
    'attachment; filename="run.xhtml"'
    """
    inline = served_type(relative) != "application/octet-stream"
    name = relative.rsplit("/", 1)[-1].replace("\\", "_").replace('"', "_")
    name = "".join(c if " " <= c < "\x7f" else "_" for c in name)
    return {"x-content-type-options": "nosniff", "content-security-policy": ARTIFACT_POLICY,
            "content-disposition": f'{"inline" if inline else "attachment"}; filename="{name}"'}


def read_artifact(store: Store, node_id: str, relative: str) -> tuple[bytes, str]:
    """``(bytes, media type)`` of one artifact file (:func:`served_type`); a ValueError for a path
    leaving the folder or a file of an interrupted analysis, NotPlainFile for a link (soft or hard)
    or anything not a regular file.

    >>> import tempfile
    >>> read_artifact(Store(tempfile.mkdtemp()), Node("a.b.c", "abcdef", 0).id, "../x")
    Traceback (most recent call last):
    ...
    theseus.errors.BadInput: '../x' is not a relative path inside the folder
    """
    rootfs.check_relative(relative)
    folder = _folder(store, node_id)
    path = f"{folder}/{relative}"
    rootfs.check_inside(store.fs, store.path(), path)
    parts = relative.split("/")
    if parts[0] == layout.ANALYSIS and len(parts) > 2 and parts[2] != layout.MANIFEST:
        if not store.fs.exists(f"{folder}/{parts[0]}/{parts[1]}/{layout.MANIFEST}"):
            raise BadInput(f"{parts[0]}/{parts[1]} has no {layout.MANIFEST}: its publication was interrupted, "
                             "so its files are not served")
    return rootfs.read_regular(store.fs, path, single_link=True), served_type(relative)


def commands(root: str, node: Node, checkpoint: bool) -> dict[str, str]:
    """The commands to resume, branch, verify and sample from the node (``checkpoint``: it has one;
    without one only the query that finds it applies).

    >>> commands("/r", Node("a.b.c", "abcdef", 3), True)["verify"]
    'theseus verify /r YS5iLmM6YWJjZGVmOjM'
    """
    r, ident = shlex.quote(root), node.id
    find = f'q.find().node("{ident}")'
    found = {"find": f'from theseus.quick import quick\nwith quick({root!r}) as q:\n    print({find}.select())'}
    if checkpoint:
        found.update({
            "resume": f"from theseus.quick import quick\nwith quick({root!r}) as q:\n    {find}.resume()\n"
                      "    q.build().create()()",
            "branch": f"from theseus.quick import quick\nwith quick({root!r}) as q:\n    {find}.branch()\n"
                      "    q.build().create()()",
            "verify": f"theseus verify {r} {ident}",
            "sample": f"theseus sample {r} {ident} 'The'",
            "analyze": f"theseus analyze {r} {ident} --analysis attention -o attention.png",
        })
    else:
        found["sample"] = f"theseus sample {r} {node.nonce} 'The'   # this node has no checkpoint: the run's last"
    return found


def node_page(store: Store, node_id: str) -> dict[str, Any]:
    """Everything the node page shows: identity, the folded record, artifacts and commands.

    >>> import tempfile
    >>> node_page(Store(tempfile.mkdtemp()), "not-an-id")
    Traceback (most recent call last):
    ...
    theseus.errors.BadInput: ...
    """
    node = Node.from_id(node_id)
    record = store.record(node)
    return {"id": node.id, "name": node.name, "nonce": node.nonce, "seq": node.seq,
            "parent": record.get("parent"), "written": record.get(WRITTEN),
            "record": {k: v for k, v in sorted(record.items()) if k not in ("node", "parent", WRITTEN)},
            "checkpoint": record.get(schema.CHECKPOINT), **listing(store, node.id),
            "commands": commands(store.root, node, schema.CHECKPOINT in record)}
