"""Trainer overhead and CPU MFU: theseus's Trainer (reporting every step) vs the same jitted step in a bare loop.

Model: the quickstart size (n_embd 128, 4 layers, 4 heads, block 128, vocab 100288),
global batch 16 (per-device 16, no accumulation), bfloat16 activations, on a
synthetic contiguous dataset in a temporary root. Checkpoints and validation are
off on both sides so the comparison isolates the loop, batch placement and the
per-step report (``on_report`` collects every step's metrics).

- theseus: ``trainer.train(until=...)`` with ``report_interval=1``; with ``--composed`` the
  trainer runs a composed recipe (a 70/30 mixture of two datasets, Lion, a cosine schedule)
  and the bare loop the same compiled step over the same mixture batches.
- bare: ``state, m = step(state, device_put(loader.batch(k)), key)`` in a Python loop,
  the same compiled step function and the same batches, no metrics fetched.

Rounds alternate bare / theseus; the best mean step time of each is kept, and the
per-round ratios are printed (the machine may be shared: look at their spread), and
so is the process CPU time per step, which other load on the machine barely moves.
MFU = tokens/s * (6N + 12 L d T) / measured CPU matmul peak (activation dtype).

    uv run python bench/train_bench.py [--steps 8] [--rounds 3] [--per-device 16] [--composed]
"""

from __future__ import annotations

import argparse
import tempfile
import time

import jax
import numpy as np

from theseus.data.store import DatasetWriter
from theseus.train import optimizers, schedules
from theseus.train.recipe import Recipe, Sampling
from theseus.train.trainer import Trainer


class Composed(Recipe):
    """A mixture of two datasets, Lion and a cosine schedule."""

    DATA = [Sampling("fineweb", 0.7), Sampling("prose", 0.3)]
    OPTIMIZER = optimizers.Lion
    SCHEDULE = schedules.Cosine


def quickstart_config(steps_total: int, per_device: int) -> dict:
    """The quickstart model with every-step reports, no checkpoints, no validation or evaluations."""
    batch, block = 16, 128
    return {
        "architecture": {"n_embd": 128, "n_layers": 4, "n_head": 4, "block_size": block, "vocab_size": 100288},
        "training": {"batch_size": batch, "per_device_batch_size": per_device, "tokens": batch * block * steps_total,
                     "validation": False, "evaluate": False},
        "logging": {"report_interval": 1, "checkpoint_interval": 10**9, "validation_interval": 10**9},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=8, help="timed steps per round and side")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--per-device", type=int, default=16)
    parser.add_argument("--composed", action="store_true", help="a 70/30 mixture of two datasets, Lion, cosine")
    args = parser.parse_args()

    root = tempfile.mkdtemp(prefix="theseus-bench-")
    rng = np.random.default_rng(0)
    for name in ("fineweb", "prose"):
        with DatasetWriter(root, name, "contiguous") as w:
            w.append("train", rng.integers(0, 100277, 2_000_000))
            w.append("val", rng.integers(0, 100277, 50_000))

    total = args.warmup + 2 * args.rounds * (args.steps + args.warmup) + 8
    reports: list[tuple[int, dict]] = []
    from loguru import logger

    logger.remove()  # keep the bench output readable (the TRAIN lines would print every step)
    config = quickstart_config(total, args.per_device)
    trainer = Trainer(config, root, recipe=Composed if args.composed else None, progress=False,
                      on_report=lambda step, metrics: reports.append((step, metrics)))
    trainer.init()
    step_fn = trainer.train_step  # compiled once, shared by both loops
    peak = trainer.measure_peak()
    print(f"recipe: {'composed (mixture 0.7/0.3, Lion, cosine)' if args.composed else 'gpt/train/pretrain'}")
    print(f"model: {trainer.n_params / 1e6:.2f}M params, batch {trainer.batch_size} x {trainer.block_size}, "
          f"per-device {trainer.per_device_batch_size} x {trainer.accumulation} accumulation, "
          f"{jax.device_count()} {jax.devices()[0].platform} device(s)")
    print(f"measured CPU peak ({trainer.config.architecture.dtype.activation}): {peak / 1e9:.1f} GFLOP/s; "
          f"{trainer.flops_per_token / 1e6:.1f} MFLOP/token")

    trainer.train(until=args.warmup)  # warm both the loop and the step

    bare_state = jax.jit(lambda s: jax.tree.map(lambda a: a.copy(), s),
                         out_shardings=trainer.state_shardings)(trainer.state)
    key = jax.device_put(trainer.base_key, trainer.replicated)
    loader, sharding = trainer.loader, trainer.batch_sharding

    def bare(start: int, n: int) -> tuple[float, float]:
        nonlocal bare_state
        t0, c0 = time.perf_counter(), time.process_time()
        metrics = None
        for k in range(start, start + n):
            batch = jax.device_put(loader.batch(k), sharding)
            bare_state, metrics = step_fn(bare_state, batch, key)
        jax.block_until_ready((bare_state, metrics))
        return (time.perf_counter() - t0) / n, (time.process_time() - c0) / n

    def theseus(n: int) -> tuple[float, float]:
        t0, c0 = time.perf_counter(), time.process_time()
        trainer.train(until=trainer.step + n)
        return (time.perf_counter() - t0) / n, (time.process_time() - c0) / n

    bare_times, theseus_times, bare_cpu, theseus_cpu = [], [], [], []
    k = args.warmup
    bare(k, args.warmup)
    for _ in range(args.rounds):
        wall, cpu = bare(k, args.steps)
        bare_times.append(wall)
        bare_cpu.append(cpu)
        wall, cpu = theseus(args.steps)
        theseus_times.append(wall)
        theseus_cpu.append(cpu)
        k += args.steps
    b, t = min(bare_times), min(theseus_times)
    assert len(reports) >= args.rounds * args.steps, "every step must report"
    tokens = trainer.tokens_per_step
    mfu_bare = tokens / b * trainer.flops_per_token / peak
    mfu_theseus = tokens / t * trainer.flops_per_token / peak
    reported = [m["train/mfu"] for _, m in reports[-args.steps:]]
    print(f"bare loop step:     {b * 1e3:8.1f} ms  (rounds: {', '.join(f'{x * 1e3:.0f}' for x in bare_times)})")
    print(f"theseus step:       {t * 1e3:8.1f} ms  (rounds: {', '.join(f'{x * 1e3:.0f}' for x in theseus_times)})")
    paired = sorted(x / y for x, y in zip(theseus_times, bare_times, strict=True))
    print(f"overhead ratio:     {t / b:8.3f}  best/best (goal <= 1.05); per-round ratios "
          f"{', '.join(f'{r:.3f}' for r in paired)}, median {paired[len(paired) // 2]:.3f}")
    print(f"process CPU time per step (all threads; robust to a shared machine): bare {min(bare_cpu):.3f} s, "
          f"theseus {min(theseus_cpu):.3f} s, ratio {min(theseus_cpu) / min(bare_cpu):.3f}")
    print(f"tokens/s:           bare {tokens / b:,.0f}  theseus {tokens / t:,.0f}")
    print(f"MFU vs measured CPU peak: bare {mfu_bare:.1%}  theseus {mfu_theseus:.1%}  "
          f"(train/mfu reported, median of last round: {np.median(reported):.1%})")


if __name__ == "__main__":
    main()
