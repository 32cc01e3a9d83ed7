"""Replay figures: resume vs fresh start, trainer.debug vs an eager forward pass, audit of a 1,000-node run.

1. **Resume to the first trained step** of the quickstart model (``theseus.quickstart.configure``:
   n_embd 64, 2 layers, block 64, batch 8, vocab 100288, ~80 MB of train state) versus a
   fresh start of the same job to its first trained step, both through the quick API and
   timed from the first call until the step's loss is on the host (``job.tick()`` returns
   after fetching it):

   - fresh:  ``q.build("gpt/train/pretrain", ...)``, ``configure``, ``q.create()``, ``job.tick()``
   - resume: ``q.find().nonce(n).checkpoint().seq(4).resume()``, ``q.build().create()``,
     ``job.tick()`` (the checkpoint at step 4 of a 12-step run: not the run's last node,
     so each resume is a branch of it).

   Both compile the train step (the process keeps no compiled program between jobs);
   the fresh start also compiles the parameter initialisation, the resume reads the
   checkpoint. Rounds alternate; medians and the per-phase split of the resume
   (query, trainer construction, checkpoint restore, first step) are printed.
2. **trainer.debug(path)** on the quickstart model (path: the last MLP, the deepest one)
   versus one eager forward pass ``model.apply({"params": params}, x)`` on the same
   rows (not jitted; both after a warm-up call, which compiles each primitive once).
3. **theseus.audit.audit(root)** of a run of 1,000 nodes and 20 checkpoints (a
   real ``gpt/train/pretrain`` run of 999 steps, a report every step and a checkpoint
   every 50: a 2-layer, 256-wide GPT over a 128-token vocabulary, ~19 MB of state per
   checkpoint), with and without checksums, against hashing the same checkpoint files
   with hashlib in one pass; the bytes the process read during the audit (Linux
   ``/proc/self/io`` ``rchar``) against the checkpoint bytes show that every byte is read once.

    uv run python bench/replay_bench.py [--rounds 3] [--debug-reps 20] [--skip-audit]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import sys
import tempfile
import time

import jax
import numpy as np
from loguru import logger

from theseus.data.store import DatasetWriter
from theseus.model.layers.mlp import MLP
from theseus.quick import quick
from theseus.quickstart import configure

STEPS = 12  # the run the resume restores from: checkpoints at 4, 8, 12


def quiet() -> None:
    """Only warnings from theseus's loguru logs (the bench prints its own lines)."""
    logger.remove()
    logger.add(sys.stderr, level="WARNING")


def prepare_quickstart(root: str) -> str:
    """Tokenize the pydoc corpus into ``root`` and train the quickstart model STEPS steps; returns its nonce."""
    with quick(root) as q:
        q.build("data/tokenize/pydoc", "tokenize-pydoc")
        q()
    with quick(root) as q:
        q.build("gpt/train/pretrain", "train-gpt")
        configure(q.config, STEPS)
        job = q.create()
        nonce = job.node.nonce
        job()
    return nonce


def fresh_start(root: str, run: str) -> dict[str, float]:
    """Seconds of a fresh start to the first step's loss on the host, with its phases."""
    t0 = time.perf_counter()
    with quick(root) as q:
        q.build("gpt/train/pretrain", run)
        configure(q.config, STEPS)
        job = q.create()  # trainer built, parameters initialised (compiled init)
        t1 = time.perf_counter()
        job.tick()
        t2 = time.perf_counter()
        job.close()
    return {"total": t2 - t0, "create": t1 - t0, "first step": t2 - t1}


def resume(root: str, nonce: str) -> dict[str, float]:
    """Seconds of ``resume()`` to the first step's loss on the host, with its phases."""
    t0 = time.perf_counter()
    with quick(root) as q:
        q.find().nonce(nonce).checkpoint().seq(4).resume()
        t1 = time.perf_counter()
        job = q.build().create()  # trainer built, checkpoint restored
        t2 = time.perf_counter()
        job.tick()
        t3 = time.perf_counter()
        job.close()
    return {"total": t3 - t0, "query": t1 - t0, "create": t2 - t1, "first step": t3 - t2}


def restore_only(root: str, nonce: str) -> float:
    """Seconds of the checkpoint read alone (``Trainer.restore`` on an already built trainer)."""
    with quick(root) as q:
        q.find().nonce(nonce).checkpoint().seq(4).resume()
        job = q.build().create()
        folder = job.store.url(job.store.record(job.base)["_checkpoint"])
        t0 = time.perf_counter()
        state = job.trainer.restore(folder)
        jax.block_until_ready(state)
        seconds = time.perf_counter() - t0
        job.close()
    return seconds


def bench_resume(root: str, nonce: str, rounds: int) -> tuple[float, float]:
    fresh_start(root, "bench-warmup")  # the process's one-time costs (backend, imports)
    resume(root, nonce)
    fresh, resumed = [], []
    for r in range(rounds):
        f = fresh_start(root, f"bench-fresh-{r}")
        s = resume(root, nonce)
        fresh.append(f)
        resumed.append(s)
        print(f"  round {r}: fresh {f['total']:.2f} s (create {f['create']:.2f}, first step {f['first step']:.2f}) | "
              f"resume {s['total']:.2f} s (query {s['query']:.2f}, create+restore {s['create']:.2f}, "
              f"first step {s['first step']:.2f})", flush=True)
    restore = statistics.median(restore_only(root, nonce) for _ in range(3))
    f_med = statistics.median(x["total"] for x in fresh)
    s_med = statistics.median(x["total"] for x in resumed)
    print(f"  checkpoint restore alone (Trainer.restore, ~80 MB): median {restore * 1000:.0f} ms")
    return f_med, s_med


def bench_debug(root: str, nonce: str, reps: int) -> tuple[float, float, tuple]:
    with quick(root) as q:
        q.find().nonce(nonce).checkpoint().seq(4).resume()
        job = q.build().create()
        trainer = job.trainer
        path = trainer.find(MLP)[-1]
        params = trainer.params
        x = jax.numpy.asarray(trainer.batch()["x"][0::trainer.accumulation])

        def debug() -> None:
            with trainer.debug(path) as result:
                jax.block_until_ready(result.output)

        def forward() -> None:
            jax.block_until_ready(trainer.model.apply({"params": params}, x, deterministic=True))

        debug(), forward()  # warm-up: eager mode compiles each primitive once
        times: dict[str, list[float]] = {"debug": [], "forward": []}
        for _ in range(reps):
            for name, fn in (("forward", forward), ("debug", debug)):
                t0 = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - t0)
        job.close()
    return statistics.median(times["debug"]), statistics.median(times["forward"]), path


def audit_config() -> dict:
    """A 999-step run of a 2-layer, 256-wide GPT on a 128-token vocabulary: a report every step,
    a checkpoint every 50."""
    block, batch, steps = 16, 4, 999
    return {
        "architecture": {"n_embd": 256, "n_layers": 2, "n_head": 4, "block_size": block, "vocab_size": 128,
                         "dtype": {"activation": "float32"}},
        "data": {"dataset": "synthetic"},
        "training": {"batch_size": batch, "per_device_batch_size": batch, "tokens": batch * block * steps,
                     "validation": False},
        "logging": {"report_interval": 1, "checkpoint_interval": 50, "validation_interval": 10**9},
    }


def rchar() -> int | None:
    """Bytes this process has read through read() so far (Linux), or None."""
    try:
        with open("/proc/self/io") as f:
            return int(next(line.split()[1] for line in f if line.startswith("rchar:")))
    except (OSError, StopIteration, ValueError):
        return None


def hash_files(folder: str) -> tuple[int, float]:
    """sha256 of every file under ``folder`` in 4 MiB reads: (bytes, seconds)."""
    t0 = time.perf_counter()
    total = 0
    for dirpath, _, files in os.walk(folder):
        for name in files:
            h = hashlib.sha256()
            with open(os.path.join(dirpath, name), "rb") as f:
                while chunk := f.read(4 << 20):
                    h.update(chunk)
                    total += len(chunk)
    return total, time.perf_counter() - t0


def bench_audit(root: str) -> None:
    from theseus.audit import audit

    rng = np.random.default_rng(0)
    tokens = (np.arange(200_000) * 7 + rng.integers(0, 3, 200_000)) % 128
    with DatasetWriter(root, "synthetic", "contiguous") as w:
        w.append("train", tokens[:180_000])
        w.append("val", tokens[180_000:])
    t0 = time.perf_counter()
    with quick(root) as q:
        q.build("gpt/train/pretrain", "audit-bench")
        q.config.merge_with(audit_config())
        job = q.create()
        nonce = job.node.nonce
        job()
    nodes = len(q.store.find().nonce(nonce).all())
    ckpts = len(q.store.find().nonce(nonce).checkpoint().all())
    print(f"  built the run in {time.perf_counter() - t0:.1f} s: {nodes} nodes, {ckpts} checkpoints")
    objects = os.path.join(root, "objects")
    for _ in range(2):  # warm the page cache the same way for every contender
        raw_bytes, raw_s = hash_files(objects)
    before = rchar()
    report = audit(root)
    read = None if before is None else rchar() - before
    assert report.ok, [p for p in report.errors]
    run = next(r for r in report.runs if r.nonce == nonce)
    assert run.nodes == nodes and len(run.checkpoints) == ckpts and all(c.verified for c in run.checkpoints)
    sizes_only = audit(root, verify_checksums=False)
    with_sums = statistics.median([report.seconds] + [audit(root).seconds for _ in range(2)])
    print(f"  audit(root), checksums: {with_sums:.3f} s for {report.bytes_verified / 2**20:.1f} MiB in "
          f"{report.files} checkpoint files ({report.bytes_verified / 2**20 / with_sums:.0f} MiB/s); "
          f"sizes only: {sizes_only.seconds:.3f} s")
    print(f"  hashlib sha256 of the same objects/ tree, one pass: {raw_s:.3f} s for {raw_bytes / 2**20:.1f} MiB "
          f"-> audit / raw hashing = {with_sums / raw_s:.2f}x")
    if read is not None:
        print(f"  bytes read by the audit (rchar): {read / 2**20:.1f} MiB = {read / report.bytes_verified:.2f}x the "
              f"checkpoint bytes (log segments, MANIFESTs and configs included)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3, help="alternating fresh / resume rounds")
    parser.add_argument("--debug-reps", type=int, default=20)
    parser.add_argument("--skip-audit", action="store_true")
    args = parser.parse_args()
    quiet()

    root = tempfile.mkdtemp(prefix="theseus-replay-bench-")
    t0 = time.perf_counter()
    nonce = prepare_quickstart(root)
    print(f"quickstart model trained {STEPS} steps in {root} ({time.perf_counter() - t0:.1f} s)\n")

    print("1. resume() vs fresh start, to the first step's loss on the host")
    fresh, resumed = bench_resume(root, nonce, args.rounds)
    print(f"resume {resumed:.2f} s | fresh start {fresh:.2f} s | ratio {resumed / fresh:.2f}x (target <= 2x)\n")

    print("2. trainer.debug(path) vs one eager forward pass")
    debug, forward, path = bench_debug(root, nonce, args.debug_reps)
    print(f"debug({path}) {debug * 1000:.1f} ms | eager forward {forward * 1000:.1f} ms | "
          f"ratio {debug / forward:.2f}x (target <= 3x)\n")

    if not args.skip_audit:
        print("3. audit(root) of a run of 1,000 nodes and 20 checkpoints")
        bench_audit(tempfile.mkdtemp(prefix="theseus-audit-bench-"))


if __name__ == "__main__":
    main()
