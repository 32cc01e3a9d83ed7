"""Training overhead of periodic checkpoints: a checkpoint every 50 steps versus none.

The quickstart model (n_embd 64, 2 layers, block 64, batch 8, vocab 100288: 6.5M
parameters, ~80 MB of train state with AdamW) trains the same steps twice in one
process through the Trainer, once with ``folder_fn`` and ``checkpoint_interval=50``
(each save copies the state to host and writes it in the background while the
next steps run) and once without; rounds alternate and the best of each is kept.

    uv run python bench/checkpoint_overhead_bench.py [--steps 100] [--rounds 2]
"""

from __future__ import annotations

import argparse
import tempfile
import time

import numpy as np

from theseus.data.store import DatasetWriter
from theseus.train.trainer import Trainer


def config(steps: int, every: int) -> dict:
    """The quickstart model's config for ``steps`` steps, checkpointing every ``every``."""
    return {
        "architecture": {"n_embd": 64, "n_layers": 2, "n_head": 4, "block_size": 64,
                         "dtype": {"activation": "float32"}},
        "training": {"batch_size": 8, "per_device_batch_size": 8, "tokens": 8 * 64 * steps, "validation": False},
        "logging": {"report_interval": 10, "checkpoint_interval": every, "validation_interval": 10**9},
    }


def timed(root: str, steps: int, checkpoints: bool) -> tuple[float, int]:
    """Seconds for ``steps`` steps after a warm-up step (compile), and how many checkpoints were committed."""
    committed = []
    trainer = Trainer(config(steps + 1, 50), root, progress=False, peak_flops=1e12,
                      folder_fn=((lambda k: tempfile.mkdtemp(prefix="ckpt-", dir=root) + f"/step-{k}")
                                 if checkpoints else None),
                      on_checkpoint=lambda k, f: committed.append(k), log=_Quiet())
    trainer.init()
    trainer.train(until=1)  # compile outside the timing
    start = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - start
    trainer.close()
    return seconds, len(committed)


class _Quiet:
    def __getattr__(self, name):
        return lambda *a, **k: None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    root = tempfile.mkdtemp(prefix="theseus-ckpt-bench-")
    rng = np.random.default_rng(0)
    with DatasetWriter(root, "fineweb", "contiguous") as w:
        w.append("train", rng.integers(0, 100277, 1_000_000))
        w.append("val", rng.integers(0, 100277, 20_000))
    best = {False: float("inf"), True: float("inf")}
    saves = 0
    for r in range(args.rounds):
        for checkpoints in (False, True):
            seconds, n = timed(root, args.steps, checkpoints)
            best[checkpoints] = min(best[checkpoints], seconds)
            saves = max(saves, n)
            print(f"round {r}: {'every 50' if checkpoints else 'none    '} {seconds:.2f} s ({n} checkpoints)")
    ratio = best[True] / best[False]
    print(f"\n{args.steps} steps: no checkpoints {best[False]:.2f} s | checkpoint every 50 steps {best[True]:.2f} s "
          f"({saves} saves) | overhead {100 * (ratio - 1):+.1f}% (target <= +5%)")


if __name__ == "__main__":
    main()
