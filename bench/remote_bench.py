"""Training cost of the live TensorBoard mirror (``logging.remote``): step time with the mirror versus without.

The quickstart model (n_embd 64, 2 layers, block 64, batch 8, vocab 100288) trains the
same steps twice in one process through the Trainer, reporting every step (the harshest
case: the quickstart reports every 10). Each report goes to the store's writer as the
training job does; with the mirror, it also goes to `theseus.mirror.Mirror` (a
bounded queue, a worker thread writing TensorBoard event files), as
``logging.remote_backend = "tensorboard"`` does. Rounds alternate and the best of each is
kept; the mirror's event files are checked to hold every report.

    uv run --group remote python bench/remote_bench.py [--steps 60] [--rounds 2]
"""

from __future__ import annotations

import argparse
import tempfile
import time

import numpy as np

from theseus.data.store import DatasetWriter
from theseus.mirror import Mirror, MirrorRun, open_sink
from theseus.store import Node, Store
from theseus.train.trainer import Trainer


def config(steps: int) -> dict:
    """The quickstart model's config for ``steps`` steps, a report every step, no checkpoint or validation."""
    return {
        "architecture": {"n_embd": 64, "n_layers": 2, "n_head": 4, "block_size": 64,
                         "dtype": {"activation": "float32"}},
        "training": {"batch_size": 8, "per_device_batch_size": 8, "tokens": 8 * 64 * steps, "validation": False},
        "logging": {"report_interval": 1, "checkpoint_interval": 10**9, "validation_interval": 10**9},
    }


def timed(root: str, steps: int, mirrored: bool) -> tuple[float, int]:
    """Seconds for ``steps`` steps after a warm-up step (compile), and how many reports the mirror wrote."""
    store, node = Store(root), Node.start("bench.remote.run")
    mirror = None
    if mirrored:
        run = MirrorRun(node.name, node.nonce, config(steps + 1), folder=tempfile.mkdtemp(prefix="tb-", dir=root))
        mirror = Mirror(lambda: open_sink("tensorboard", run), "bench", log=None)
    with store.writer() as writer:
        def report(step: int, metrics: dict) -> None:  # the training job's _report: the store, then the mirror
            writer.write(Node(node.name, node.nonce, step, None), metrics)
            if mirror is not None:
                mirror.report(step, metrics)

        trainer = Trainer(config(steps + 1), root, progress=False, peak_flops=1e12, on_report=report, log=_Quiet())
        trainer.init()
        trainer.train(until=1)  # compile outside the timing
        start = time.perf_counter()
        trainer.train()
        trainer.wait()
        seconds = time.perf_counter() - start
        trainer.close()
    stats = mirror.close() if mirror is not None else None
    if stats is not None and not stats.complete:
        raise SystemExit(f"the mirror lost reports: {stats}")
    return seconds, stats.mirrored if stats is not None else 0


class _Quiet:
    def __getattr__(self, name):
        return lambda *a, **k: None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    root = tempfile.mkdtemp(prefix="theseus-remote-bench-")
    rng = np.random.default_rng(0)
    with DatasetWriter(root, "fineweb", "contiguous") as w:
        w.append("train", rng.integers(0, 100277, 1_000_000))
        w.append("val", rng.integers(0, 100277, 20_000))
    best = {False: float("inf"), True: float("inf")}
    for r in range(args.rounds):
        for mirrored in (False, True):
            seconds, n = timed(root, args.steps, mirrored)
            best[mirrored] = min(best[mirrored], seconds)
            print(f"round {r}: {'tensorboard mirror' if mirrored else 'no mirror         '} {seconds:.2f} s"
                  + (f" ({n} reports mirrored)" if mirrored else ""))
    ratio = best[True] / best[False]
    print(f"\n{args.steps} steps, a report each: no mirror {1000 * best[False] / args.steps:.1f} ms/step | "
          f"tensorboard mirror {1000 * best[True] / args.steps:.1f} ms/step | ratio {ratio:.3f} "
          f"({100 * (ratio - 1):+.1f}%, target <= +2%)")


if __name__ == "__main__":
    main()
