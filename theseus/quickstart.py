"""The quickstart: the main job end to end on an embedded default, in one command.

It tokenizes the documentation that ships with Python (``pydoc_data``: no
network, no download), trains a small GPT on it on the CPU for a few hundred
steps, and prints where the run is and how to query it::

    uv run python -m theseus.quickstart [ROOT] [--steps N]
"""

from __future__ import annotations

import argparse
import tempfile

from theseus.quick import quick
from theseus.store import Node, Store


def configure(config, steps: int) -> None:
    """Shrink ``gpt/train/pretrain``'s config to a CPU-sized run of ``steps`` steps on the pydoc corpus.

    >>> from theseus.jobs import get_job
    >>> cfg = get_job("gpt/train/pretrain").defaults(); configure(cfg, 10)
    >>> cfg.training.tokens, cfg.data.dataset
    (5120, 'pydoc')
    """
    config.data.dataset = "pydoc"
    arch = config.architecture
    arch.n_embd, arch.n_layers, arch.n_head, arch.block_size = 64, 2, 4, 64
    arch.dtype.activation = "float32"
    config.training.batch_size = 8
    config.training.per_device_batch_size = 8
    config.training.tokens = steps * 8 * 64
    config.training.validation_steps = 4
    config.optimization.lr = 3e-3
    config.optimization.warmup_pct = 0.05
    config.optimization.decay_pct = 0.2
    config.logging.report_interval = 10
    config.logging.validation_interval = max(steps // 3, 1)
    config.logging.checkpoint_interval = max(steps // 3, 1)


def main(root: str | None = None, steps: int = 300, max_samples: int = -1) -> Node:
    """Tokenize the embedded corpus into ``root``, train a small GPT, print how to look at it.

    Returns the run's first node. (Takes minutes; the tests run it.)
    """
    root = root or tempfile.mkdtemp(prefix="theseus-")
    with quick(root) as q:
        q.build("data/tokenize/pydoc", "tokenize-pydoc")
        q.config.data.max_samples = max_samples
        q()
    with quick(root) as q:
        q.build("gpt/train/pretrain", "train-gpt")
        configure(q.config, steps)
        job = q.create()
        first = job.node
        job()
    store = Store(root)
    losses = [r["train/loss"] for r in store.find().nonce(first.nonce).has("train/loss").select(keys=["train/loss"])]
    print()
    print(f"run {first.name} nonce={first.nonce}: {len(losses)} reports, loss {losses[0]:.3f} -> {losses[-1]:.3f}")
    print(f"root: {store.root}")
    print("look at it:")
    print("  from theseus import quick")
    print(f"  with quick({store.root!r}) as q:")
    print(f"      print(q.find().nonce({first.nonce!r}).select(keys=['train/loss', 'train/tokens'])[-5:])")
    return first


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", nargs="?", default=None, help="root folder (default: a new temporary folder)")
    parser.add_argument("--steps", type=int, default=300, help="training steps (default 300)")
    args = parser.parse_args()
    main(args.root, args.steps)
