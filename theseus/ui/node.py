"""The node page's data: the folded record, the artifact files, and the commands that use the node.

Artifact files are served only from the node's own folder, only regular files reached
without a link (DESIGN.md invariant 6), and never run: pictures are shown, the rest is
offered as text or bytes.

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

from theseus.store import Node, Store, layout, schema
from theseus.store import fs as rootfs
from theseus.store.fold import WRITTEN

SHOWN_INLINE = (".png", ".jpg", ".jpeg", ".gif", ".svg", ".webp")
MAX_FILES = 500  # listed per node; a folder of more is cut, saying so


def artifacts(store: Store, node_id: str) -> list[dict[str, Any]]:
    """The files of the node's artifact folder: root-relative path (within the folder), size, and
    whether the page shows it as a picture.

    >>> import tempfile
    >>> artifacts(Store(tempfile.mkdtemp()), Node("a.b.c", "abcdef", 0).id)
    []
    """
    folder = store.path(layout.OBJECTS, Node.from_id(node_id).id)
    try:
        found = store.fs.find(folder, detail=True)
    except FileNotFoundError:
        return []
    files = []
    for path, info in sorted(found.items())[:MAX_FILES]:
        relative = path[len(folder) + 1:]
        if not relative or info.get("type") not in (None, "file") or info.get("islink"):
            continue
        files.append({"path": relative, "bytes": info.get("size"),
                      "picture": relative.lower().endswith(SHOWN_INLINE)})
    return files


def read_artifact(store: Store, node_id: str, relative: str) -> tuple[bytes, str]:
    """``(bytes, media type)`` of one artifact file; a ValueError for a path leaving the folder,
    NotPlainFile for a link or anything not a regular file.

    >>> import tempfile
    >>> read_artifact(Store(tempfile.mkdtemp()), Node("a.b.c", "abcdef", 0).id, "../x")
    Traceback (most recent call last):
    ...
    ValueError: '../x' is not a relative path inside the folder
    """
    folder = store.path(layout.OBJECTS, Node.from_id(node_id).id)
    path = f"{folder}/{rootfs.check_relative(relative)}"
    rootfs.check_inside(store.fs, store.path(), path)
    data = rootfs.read_regular(store.fs, path)
    kind = mimetypes.guess_type(relative)[0] or "application/octet-stream"
    if kind.startswith("text/") or kind in ("application/json", "application/x-yaml"):
        kind = "text/plain; charset=utf-8"  # shown, never run as HTML or script
    elif kind == "image/svg+xml":
        kind = "text/plain; charset=utf-8"  # an SVG can hold script: shown as its text
    return data, kind


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
    ValueError: ...
    """
    node = Node.from_id(node_id)
    record = store.record(node)
    return {"id": node.id, "name": node.name, "nonce": node.nonce, "seq": node.seq,
            "parent": record.get("parent"), "written": record.get(WRITTEN),
            "record": {k: v for k, v in sorted(record.items()) if k not in ("node", "parent", WRITTEN)},
            "checkpoint": record.get(schema.CHECKPOINT), "artifacts": artifacts(store, node.id),
            "commands": commands(store.root, node, schema.CHECKPOINT in record)}
