"""Lineages: which run branched from which node, as a tree of runs.

A branch is a new lineage whose first node's parent is a node of another run; a fresh
run's first node has no parent. The tree holds every run descending from the oldest
ancestor of the run asked about (ancestors outside the root are named, not followed).

>>> import tempfile
>>> from theseus.store import Node, Store
>>> from theseus.ui.follow import Follower
>>> store = Store(tempfile.mkdtemp())
>>> a = Node.start("doc.tree.a")
>>> b = Node.start("doc.tree.b", parent=a.next().id)
>>> with store.writer() as w:
...     w.write(a, {"x": 1}); w.write(a.next(), {"x": 2}); w.write(b, {"x": 3})
>>> follower = Follower(store); _ = follower.poll()
>>> tree = family(follower.runs, b.nonce, follower.origins())
>>> tree["nonce"] == a.nonce, [(c["nonce"] == b.nonce, c["from_seq"]) for c in tree["children"]]
(True, [(True, 1)])
"""

from __future__ import annotations

from typing import Any

from theseus.store.node import decode_id
from theseus.ui.follow import RunLog


def origin(run: RunLog, parent: str | None) -> tuple[str, str, int] | None:
    """``(name, nonce, seq)`` of the node the run branched from (``parent``: the parent id of its first
    node), None for a fresh lineage.

    >>> origin(RunLog("a", "abcdef"), None) is None
    True
    """
    if not parent:
        return None
    name, nonce, seq = decode_id(parent)
    return None if nonce == run.nonce else (name, nonce, seq)


def family(runs: dict[str, RunLog], nonce: str, parents: dict[str, str | None]) -> dict[str, Any]:
    """The tree of runs around ``nonce``: ``{name, nonce, from_seq, children: [...]}`` from its oldest
    ancestor in the root (``outside``: the node id of an ancestor run the root does not hold);
    ``parents``: the parent id of each run's first node (``Follower.origins``).

    >>> family({"abcdef": RunLog("a", "abcdef")}, "abcdef", {})["children"]
    []
    """
    origins = {n: origin(run, parents.get(n)) for n, run in runs.items()}
    top, outside, seen = nonce, None, set()
    while origins.get(top) is not None and top not in seen:
        seen.add(top)
        parent = origins[top][1]
        if parent not in runs:
            outside = origins[top]
            break
        top = parent
    children: dict[str, list[str]] = {}
    for n, o in origins.items():
        if o is not None and o[1] in runs:
            children.setdefault(o[1], []).append(n)

    def node(n: str, depth: int) -> dict[str, Any]:
        o = origins[n]
        kids = sorted(children.get(n, []), key=lambda c: (origins[c][2], runs[c].name)) if depth < 64 else []
        return {"name": runs[n].name, "nonce": n, "from_seq": o[2] if o else None,
                "children": [node(c, depth + 1) for c in kids]}

    tree = node(top, 0)
    if outside is not None:
        tree["outside"] = f"{outside[0]}:{outside[1]}:{outside[2]}"
    return tree
