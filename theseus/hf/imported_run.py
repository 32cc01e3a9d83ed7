"""Write an imported run of one node: its checkpoint first, then the records that commit it.

Both importers (`theseus.hf.importer`: a model, `theseus.hf.peft_import`: an adapter) convert before they write
and write in this order, so a folder that fails part way leaves neither a checkpoint folder nor a run behind.

>>> import tempfile
>>> from theseus.store import Node, Store
>>> store, node = Store(tempfile.mkdtemp()), Node.start("import-example")
>>> saved(store, node, iter([("step", __import__("numpy").int32(0))]), {})
>>> committed(store, node, "llama/import/hf", "{}\\n", None, {"train/step": 0})
>>> store.record(node)["train/step"]
0
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np

from theseus.store import Node, Store

__all__ = ["committed", "saved"]

Sidecars = Mapping[str, bytes | str] | Callable[[], Mapping[str, bytes | str]]


def saved(store: Store, node: Node, leaves: Iterable[tuple[str, np.ndarray]], sidecars: Sidecars) -> None:
    """Save ``leaves`` and ``sidecars`` as the checkpoint of ``node`` (`theseus.train.checkpoint.save_streamed`);
    the folder is removed if the save fails part way.

    >>> callable(saved)
    True
    """
    from theseus.store import fs as rootfs
    from theseus.train import checkpoint as ckpt  # lazily: TensorStore writes the checkpoint

    try:
        ckpt.save_streamed(store.objects(node), leaves, sidecars)
    except BaseException:
        rootfs.remove_tree(store.objects(node))
        raise


def committed(store: Store, node: Node, key: str, config: str, source: Any, record: Mapping[str, Any]) -> None:
    """Record the run of ``node`` as one finished node of job ``key`` (its ``config`` YAML and job ``source``),
    ``record`` its values, its checkpoint the one `saved` wrote.

    >>> callable(committed)
    True
    """
    from theseus.store.layout import objects

    with store.writer() as w:
        w.begin(node)
        w.job(node, key, config, source=source)
        w.write(node, dict(record))
        w.checkpoint(node, objects(node.id))
        w.finished(node)
