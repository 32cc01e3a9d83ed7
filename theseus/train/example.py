"""A tiny root and config that train in seconds: the examples of the docs and tests.

>>> root, config = tiny_example()
>>> config["architecture"]["n_embd"], config["training"]["batch_size"]
(32, 4)
"""

from __future__ import annotations

import tempfile

import numpy as np

from theseus.data.store import DatasetWriter

__all__ = ["tiny_example"]


def tiny_example(root: str | None = None, dataset: str = "fineweb", tokens: int = 20_000,
                 vocab: int = 128) -> tuple[str, dict]:
    """A root holding a small synthetic contiguous dataset, and a tiny config that trains on it in seconds.

    The tokens follow a simple learnable pattern (so the loss falls); the config is
    a 1-layer, 32-wide GPT, batch 4 x 16 tokens, 3 steps, validation on.

    >>> import os
    >>> root, config = tiny_example(dataset="toy")
    >>> os.listdir(os.path.join(root, "data")), config["data"]
    (['toy'], {'dataset': 'toy'})
    """
    root = root or tempfile.mkdtemp(prefix="theseus-")
    rng = np.random.default_rng(0)
    pattern = (np.arange(tokens) * 7 + rng.integers(0, 3, tokens)) % vocab
    with DatasetWriter(root, dataset, "contiguous", overwrite=True) as writer:
        writer.append("train", pattern[: tokens * 9 // 10])
        writer.append("val", pattern[tokens * 9 // 10:])
    config = {
        "architecture": {"n_embd": 32, "n_layers": 1, "n_head": 2, "block_size": 16, "vocab_size": vocab},
        "data": {"dataset": dataset},
        "training": {"batch_size": 4, "per_device_batch_size": 4, "tokens": 4 * 16 * 3, "validation_steps": 1},
        "logging": {"report_interval": 1, "checkpoint_interval": 1, "validation_interval": 3},
    }
    return root, config
