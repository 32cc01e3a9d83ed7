"""What evaluations during training cost: a quickstart-sized run with and without them, in one process.

The quickstart's run (`theseus.quickstart.configure`: a 2-layer, 64-wide GPT, block 64, batch 8,
float32 activations, on the pydoc dataset) for 300 steps, validation every 100 steps, twice:

- without: ``training.evaluate=false`` (the validation loss still runs at steps 100, 200, 300);
- with: ``training.evaluate=true`` and ``eval.length=64``: `gpt/train/pretrain`'s evaluations
  (the validation loss and the bits per byte of the pydoc val split, 64 windows of 64 tokens)
  and the ``pydoc`` evaluation (64 windows of the raw pydoc topics) at steps 100, 200 and 300.

Each run is timed whole (``job()``, checkpoints included); the evaluations' own time is
measured around each part's ``run`` in the second run. It prints both runs, the split and
the overhead (with / without - 1); the target is at most 10%. The first, untimed run
compiles what both share (train step, validation).

    uv run python bench/eval_overhead_bench.py [--steps 300]
"""

from __future__ import annotations

import argparse
import platform
import tempfile
import time

from theseus.jobs import job
from theseus.quick import quick
from theseus.quickstart import configure
from theseus.train import Pretrain
from theseus.train.evals.text import BitsPerByte, PydocText
from theseus.train.evaluations import ValidationLoss

TARGET = 0.10
SPENT: dict[str, float] = {}


def timed_part(part: type) -> type:
    """``part`` with its ``run`` timed into `SPENT` (same name, same keys)."""
    def run(cls, context):
        t0 = time.perf_counter()
        try:
            return part.run.__func__(cls, context)
        finally:
            SPENT[part.name] = SPENT.get(part.name, 0.0) + time.perf_counter() - t0

    return type(part.__name__, (part,), {"run": classmethod(run)})


@job("bench/train/evaluated", "The quickstart's run with its evaluations timed (bench/eval_overhead_bench.py).")
class Evaluated(Pretrain):
    EVALUATION = (timed_part(ValidationLoss), timed_part(BitsPerByte), timed_part(PydocText))


def run(root: str, key: str, steps: int, evaluate: bool) -> float:
    """Seconds of one run of ``steps`` steps."""
    with quick(root) as q:
        q.build(key, f"bench-{'with' if evaluate else 'without'}")
        configure(q.config, steps)
        q.config.training.evaluate = evaluate
        q.config.eval.length = 64
        job = q.create()
        t0 = time.perf_counter()
        job()
        seconds = time.perf_counter() - t0
        job.close()
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300, help="steps per run (default 300)")
    args = parser.parse_args()
    root = tempfile.mkdtemp(prefix="theseus-eval-bench-")
    with quick(root) as q:
        q.build("data/tokenize/pydoc", "tokenize-pydoc")
        q()
    run(root, "bench/train/evaluated", 10, True)  # warm-up: compiles the step, validation and scoring shapes
    SPENT.clear()
    without = run(root, "bench/train/evaluated", args.steps, False)
    with_ = run(root, "bench/train/evaluated", args.steps, True)
    evals = sum(v for k, v in SPENT.items() if k != "val-loss")
    overhead = with_ / without - 1
    print(f"machine: {platform.machine()} {platform.processor() or ''}, steps {args.steps}, validation every "
          f"{max(args.steps // 3, 1)}")
    print(f"without evaluations: {without:.1f} s")
    print(f"with evaluations:    {with_:.1f} s  (of which "
          + ", ".join(f"{k} {v:.1f} s" for k, v in SPENT.items()) + f"; evaluations beyond val-loss {evals:.1f} s)")
    print(f"overhead: {overhead * 100:+.1f}% (target <= {TARGET * 100:.0f}%): "
          f"{'PASS' if overhead <= TARGET else 'FAIL'}")


if __name__ == "__main__":
    main()
