"""Tokenization and loader throughput, measured in one run.

1. End-to-end ``tokenize_contiguous`` (read the pydoc corpus repeated to
   ``--mb`` MB, encode on 2 threads, write the dataset, progress callback)
   against raw tiktoken ``encode_ordinary_batch(texts, num_threads=2)`` over
   the same texts; prints both throughputs and the ratio (goal >= 0.8x).
2. ``Loader.batch(k)`` for a 512 x 512 batch from a 100M-token contiguous
   dataset of random tokens; prints the mean time per batch.

    uv run python bench/tokenize_bench.py [--mb 30] [--loader-tokens 100000000]
"""

from __future__ import annotations

import argparse
import itertools
import tempfile
import time

import numpy as np

from theseus.data import DatasetWriter, Loader, Reading, get_tokenizer, open_dataset, tokenize_contiguous
from theseus.data.sources import pydoc_corpus


def corpus(mb: float) -> list[str]:
    """The pydoc topics, repeated until they reach ``mb`` megabytes of UTF-8."""
    topics = list(pydoc_corpus())
    size = sum(len(t.encode()) for t in topics)
    repeats = max(1, round(mb * 1e6 / size))
    return [t for _ in range(repeats) for t in topics]


def bench_tokenize(texts: list[str], repeats: int) -> None:
    tok = get_tokenizer()
    mb = sum(len(t.encode()) for t in texts) / 1e6
    raw_s, e2e_s, raw_cpu, e2e_cpu, n_tokens = [], [], [], [], 0
    for _ in range(repeats):  # interleave the two so background load hits both alike
        t0, c0 = time.perf_counter(), time.process_time()
        ids = tok.encoding.encode_ordinary_batch(texts, num_threads=2)
        raw_s.append(time.perf_counter() - t0)
        raw_cpu.append(time.process_time() - c0)
        n_tokens = sum(map(len, ids)) + len(ids)  # + one eot per document, as the dataset stores
        del ids
        with tempfile.TemporaryDirectory() as root:
            calls = []
            t0, c0 = time.perf_counter(), time.process_time()
            s = tokenize_contiguous(texts, tok, DatasetWriter(root, "bench", "contiguous"),
                                    Reading(on_progress=lambda *a: calls.append(a)))
            e2e_s.append(time.perf_counter() - t0)
            e2e_cpu.append(time.process_time() - c0)
            assert s["train_tokens"] + s["val_tokens"] == n_tokens, (s, n_tokens)
    raw, e2e = min(raw_s), min(e2e_s)
    print(f"corpus: {len(texts)} documents, {mb:.1f} MB, {n_tokens / 1e6:.2f}M tokens (best of {repeats})")
    print(f"{'path':<44} {'wall s':>7} {'MB/s':>7} {'Mtok/s':>7} {'cpu s':>7}")
    for name, wall, cpu in (("raw tiktoken encode_ordinary_batch(2 thr)", raw, min(raw_cpu)),
                            ("tokenize_contiguous (read+encode+write)", e2e, min(e2e_cpu))):
        print(f"{name:<44} {wall:7.2f} {mb / wall:7.2f} {n_tokens / wall / 1e6:7.2f} {cpu:7.2f}")
    print(f"ratio end-to-end / raw throughput: {raw / e2e:.2f}x wall (goal >= 0.8x), "
          f"{min(raw_cpu) / min(e2e_cpu):.2f}x cpu time (load-independent)")


def bench_loader(n_tokens: int, batch: int, block: int, steps: int) -> None:
    with tempfile.TemporaryDirectory() as root:
        rng = np.random.default_rng(0)
        with DatasetWriter(root, "random", "contiguous") as w:
            chunk = 10_000_000
            for i in range(0, n_tokens, chunk):
                w.append("train", rng.integers(0, 100288, min(chunk, n_tokens - i), dtype=np.uint32))
            w.append("val", rng.integers(0, 100288, 10_000, dtype=np.uint32))
        loader = Loader(open_dataset(root, "random"), seed=0, batch_size=batch, block_size=block)
        loader.batch(0)  # first touch: page in / warm up
        times = []
        for k in itertools.islice(itertools.count(1), steps):
            t0 = time.perf_counter()
            b = loader.batch(k)
            times.append(time.perf_counter() - t0)
        assert b["x"].shape == (batch, block)
        t = np.array(times) * 1e3
        print(f"Loader.batch(k), {batch}x{block} from {n_tokens / 1e6:.0f}M tokens: "
              f"mean {t.mean():.2f} ms, median {np.median(t):.2f} ms, max {t.max():.2f} ms over {steps} steps")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mb", type=float, default=30.0, help="corpus size in MB")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--loader-tokens", type=int, default=100_000_000)
    p.add_argument("--steps", type=int, default=50)
    args = p.parse_args()
    bench_tokenize(corpus(args.mb), args.repeats)
    bench_loader(args.loader_tokens, 512, 512, args.steps)


if __name__ == "__main__":
    main()
