"""MixtureLoader.batch(k) against Loader.batch(k), measured in one run.

A synthetic root (a temporary folder) holds two contiguous datasets of ``--tokens`` random
tokens each, written with ``DatasetWriter``. The baseline is ``Loader.batch(k)`` on the
first; the mixture is ``MixtureLoader.batch(k)`` over both at rates 0.7 / 0.3; both build
``--batch`` x ``--block`` batches (default 512 x 512). Steps alternate between the two (the
same k for both, after one untimed warm-up pass over every step that pages the data in), so
background load hits both alike; prints the median and best time per batch of each and the
ratio of medians (goal <= 2x).

    uv run python bench/mixture_bench.py [--tokens 4000000] [--steps 200] [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import numpy as np

from theseus.data import DatasetWriter, Loader, open_dataset
from theseus.data.mixture import MixtureLoader


def build_root(root: str, n_tokens: int) -> None:
    """Two contiguous datasets, ``a`` and ``b``, of ``n_tokens`` random tokens each."""
    rng = np.random.default_rng(0)
    for name in ("a", "b"):
        with DatasetWriter(root, name, "contiguous") as w:
            w.append("train", rng.integers(0, 100_000, n_tokens, dtype=np.uint32))
            w.append("val", rng.integers(0, 100_000, 10_000, dtype=np.uint32))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tokens", type=int, default=4_000_000, help="tokens of each dataset")
    p.add_argument("--batch", type=int, default=512)
    p.add_argument("--block", type=int, default=512)
    p.add_argument("--steps", type=int, default=200, help="steps timed per round")
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as root:
        build_root(root, args.tokens)
        a, b = open_dataset(root, "a"), open_dataset(root, "b")
        single = Loader(a, seed=0, batch_size=args.batch, block_size=args.block)
        mix = MixtureLoader([(a, 0.7), (b, 0.3)], seed=0, batch_size=args.batch, block_size=args.block)
        steps = range(args.steps)
        for k in steps:  # warm-up: page in, first calls
            single.batch(k)
            mix.batch(k)
        times: dict[str, list[float]] = {"Loader": [], "MixtureLoader": []}
        for _ in range(args.rounds):
            for k in steps:
                for name, loader in (("Loader", single), ("MixtureLoader", mix)):
                    t0 = time.perf_counter()
                    loader.batch(k)
                    times[name].append(time.perf_counter() - t0)
        shares = np.bincount(np.concatenate([mix.source(k) for k in steps]), minlength=2) / (args.steps * args.batch)
    print(f"{args.batch} x {args.block} batches, 2 contiguous datasets of {args.tokens / 1e6:.1f}M tokens, "
          f"{args.rounds} rounds x {args.steps} steps; mixture rates 0.7 / 0.3, shares read "
          f"{shares[0]:.4f} / {shares[1]:.4f}")
    for name, ts in times.items():
        print(f"{name + '.batch(k)':<24} median {statistics.median(ts) * 1e3:7.3f} ms   best {min(ts) * 1e3:7.3f} ms")
    ratio = statistics.median(times["MixtureLoader"]) / statistics.median(times["Loader"])
    best = min(times["MixtureLoader"]) / min(times["Loader"])
    print(f"ratio MixtureLoader / Loader: {ratio:.2f}x median, {best:.2f}x best (goal <= 2x)")


if __name__ == "__main__":
    main()
