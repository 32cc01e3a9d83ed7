"""The quickstart: the main job end to end on an embedded default, in one command.

Run it with ``uv run python -m theseus.quickstart [ROOT]``.
"""

from __future__ import annotations

import math
import sys
import tempfile

from theseus.store import Node, Store


def main(root: str | None = None) -> str:
    """Write a small synthetic run into ``root`` (a temporary folder by default) and query it.

    >>> import tempfile
    >>> nonce = main(tempfile.mkdtemp())  # doctest: +ELLIPSIS
    wrote ...
    """
    root = root or tempfile.mkdtemp(prefix="theseus-")
    store = Store(root)
    node = first = Node.start("quickstart")
    with store.writer() as w:
        w.job(node, "demo/synthetic", "steps: 200\n")
        for step in range(200):
            w.write(node, {"train/loss": 11.0 * math.exp(-step / 60) + 2.0, "train/tokens": 4096 * (step + 1)})
            node = node.next()
        w.finished(node)
    best = store.find().nonce(first.nonce).where("train/tokens", "<=", 700_000).sort("train/loss").first()
    print(f"wrote run {first.name} nonce={first.nonce} ({node.seq} nodes) into {store.root}")
    print(f"lowest loss under 700k tokens: seq {best.seq}")
    print("look at it:")
    print("  from theseus import Store")
    print(f"  store = Store({store.root!r})")
    print(f"  print(store.find().nonce({first.nonce!r}).select(keys=['train/loss', 'train/tokens'])[:5])")
    return first.nonce


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else None)
