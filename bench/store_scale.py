"""The store at lab scale: what listing, compaction, a top-10 and memory cost as a root grows.

Roots (generated once through the public writer, many runs per writer and one flush per
chunk of steps, in two processes; cached under ``--cache``/scale-<runs>x<steps>x<flushes>-v<version>
and reused while the generator's version is unchanged):

- 100, 1,000 runs x 1,000 steps x 8 keys, 5 segments per run; 10,000 runs x 100 steps x 8
  keys, 2 segments per run;
- 1 run x 1,000,000 steps x 8 keys, 50 segments.

Per many-run root, fresh ``Store`` per call for *cold*, one reused ``Store`` for *warm*:
``Store.runs()`` before and after ``compact()``; ``compact()`` of the whole root (once,
on a copy); ``compact()`` after one new 10-step run (on that compacted copy, a new run
written before each repetition); top-10 lowest ``train/loss`` before compaction vs raw
Polars over the same log files. For the 1,000,000-step run: peak resident memory of a
fresh process that compacts it, and of one that queries it (``runs()``, a top-10 and the
history of 2 keys). For gs:// (gcp-storage-emulator): the storage requests (list, get,
head: every HTTP request gcsfs makes) of a cold ``runs()`` and a cold top-10 on compacted
roots of growing run counts.
"""

from __future__ import annotations

import json
import math
import multiprocessing as mp
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import numpy as np
import polars as pl

from theseus.store import Node, Store

KEYS = ["train/loss", "train/tokens", "train/lr", "train/grad_norm",
        "train/step_time", "train/tokens_per_s", "val/loss", "train/acc"]  # train/tokens is int
VERSION = 2  # 2: segments whose footers keep each key's latest record (a new name: older roots stay for their code)
RUNS_PER_FLUSH = 50  # runs buffered in one writer between flushes while generating


def values(r: int, lo: int, hi: int) -> list[np.ndarray]:
    """Deterministic metrics of run ``r`` at steps ``lo:hi`` (one array per key of KEYS)."""
    rng = np.random.default_rng((r, lo))
    step = np.arange(lo, hi)
    decay = np.exp(-step / (150.0 + r % 97))
    return [2.0 + 8.0 * decay + 0.05 * rng.standard_normal(hi - lo) + 0.001 * (r % 37), (step + 1) * 1000,
            3e-4 * np.minimum(1.0, (step + 1) / 100.0), rng.gamma(2.0, 0.5, hi - lo),
            0.1 + 0.01 * rng.random(hi - lo), 1e5 * (1 + 0.05 * rng.standard_normal(hi - lo)),
            2.1 + 8.0 * decay + 0.05 * rng.standard_normal(hi - lo), rng.random(hi - lo)]


def write_runs(root: str, runs: range, steps: int, flushes: int, prefix: str = "scale") -> None:
    """Write ``runs`` (numbers) of ``steps`` steps each through one writer, ``flushes`` segments per run."""
    store = Store(root)
    every = math.ceil(steps / flushes)
    for lo_run in range(runs.start, runs.stop, RUNS_PER_FLUSH):
        batch = range(lo_run, min(runs.stop, lo_run + RUNS_PER_FLUSH))
        nodes = {r: Node.start(f"bench.{prefix}.run-{r:05d}") for r in batch}
        with store.writer(flush_interval=3600) as w:
            for lo in range(0, steps, every):
                hi = min(steps, lo + every)
                for r in batch:
                    cols = [c.tolist() for c in values(r, lo, hi)]
                    node = nodes[r]
                    for i in range(hi - lo):
                        w.write(node, {k: c[i] for k, c in zip(KEYS, cols)})
                        node = node.next()
                    nodes[r] = node
                w.flush()
            for node in nodes.values():
                w.finished(node)


def _write_chunk(args) -> None:
    write_runs(*args)


def build_root(cache: Path, runs: int, steps: int, flushes: int) -> Path:
    """The pristine root (cached): ``runs`` x ``steps`` x 8 keys, ``flushes`` segments per run."""
    folder = cache / f"scale-{runs}x{steps}x{flushes}-v{VERSION}"
    done = folder / "done.json"
    if done.exists() and json.loads(done.read_text()).get("version") == VERSION:
        return folder
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    t0 = time.perf_counter()
    workers = 1 if runs < 2 else 2
    step = math.ceil(runs / workers)
    chunks = [(str(folder / "pristine"), range(lo, min(runs, lo + step)), steps, flushes)
              for lo in range(0, runs, step)]
    with mp.get_context("spawn").Pool(len(chunks)) as pool:
        pool.map(_write_chunk, chunks)
    t = time.perf_counter() - t0
    print(f"  generated {folder.name}: {runs * steps * len(KEYS):,} values in {t:.0f} s", flush=True)
    done.write_text(json.dumps({"version": VERSION, "write_s": t}))
    return folder


def compacted(folder: Path) -> tuple[Path, float]:
    """A compacted copy of the pristine root, made by this code (never cached: the view's format may
    have changed), and the seconds ``compact()`` took."""
    target = folder / "compacted"
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(folder / "pristine", target)
    t0 = time.perf_counter()
    Store(target).compact()
    return target, time.perf_counter() - t0


def timed(fn: Callable[[], object], repeat: int) -> float:
    """Median seconds of ``repeat`` calls."""
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def raw_top(root: Path) -> pl.DataFrame:
    """Top-10 lowest train/loss with raw Polars over the log files (no fold: records are unique here)."""
    return (pl.scan_parquet(f"{root}/log/**/*.parquet", hive_partitioning=True,
                            hive_schema={"name": pl.String, "nonce": pl.String})
            .filter(pl.col("key") == "train/loss").select("name", "nonce", "seq", pl.col("float").alias("train/loss"))
            .bottom_k(10, by="train/loss").sort("train/loss").collect())


def ours_top(root: Path, store: Store | None = None) -> list[dict]:
    return (store or Store(root)).find().has("train/loss").sort("train/loss").limit(10).select(keys=["train/loss"])


def s(t: float) -> str:
    return f"{t * 1e3:.0f} ms" if t < 1 else f"{t:.2f} s"


def bench_runs_root(cache: Path, runs: int, steps: int, flushes: int, repeat: int, row) -> None:
    """The listing, compaction and top-10 rows of one many-run root."""
    folder = build_root(cache, runs, steps, flushes)
    label = f"{runs:,} runs x {steps:,} steps"
    scale = max(1.0, runs / 1000)  # targets are the at 1,000 runs, proportional to runs above
    compacted_root, compact_s = compacted(folder)
    row(f"`compact()` {label}, whole root (once)", s(compact_s), "-", 0, None, "printed", None)
    for phase, root, factor in (("before compaction", folder / "pristine", 2.0), ("compacted", compacted_root, 1.0)):
        listed = Store(root).runs()
        assert listed.height == runs, f"runs() listed {listed.height} runs, not {runs}"
        warm = Store(root)
        warm.runs()
        cold_t = timed(lambda: Store(root).runs(), repeat)
        warm_t = timed(warm.runs, repeat)
        for which, t, goal in (("cold", cold_t, 0.5), ("warm", warm_t, 0.2)):
            target = goal * factor * scale
            row(f"`Store.runs()` {label}, {phase} ({which})", s(t), "-", t / target, "", f"<= {s(target)}",
                t <= target)

    scratch = folder / "scratch"
    shutil.rmtree(scratch, ignore_errors=True)
    shutil.copytree(compacted_root, scratch)
    times = []
    for i in range(repeat):
        write_runs(str(scratch), range(10**6 + i, 10**6 + i + 1), 10, 1, prefix="new")
        t0 = time.perf_counter()
        Store(scratch).compact()
        times.append(time.perf_counter() - t0)
    assert Store(scratch).runs().height == runs + repeat
    t = statistics.median(times)
    row(f"`compact()` after one new 10-step run, {label}", s(t), "-", t, "", "<= 1 s", t <= 1.0)
    shutil.rmtree(scratch, ignore_errors=True)

    pristine = folder / "pristine"
    want = raw_top(pristine)["train/loss"].to_list()
    assert [r["train/loss"] for r in ours_top(pristine)] == want, "top-10 mismatch"
    ours = timed(lambda: ours_top(pristine), repeat)
    raw = timed(lambda: raw_top(pristine), repeat)
    row(f"top-10 loss, {label}, never compacted (cold Store) vs raw Polars over the log files", s(ours), s(raw),
        ours / raw, "", "<= 2x", ours / raw <= 2.0)


MEMORY_CHILD = """
import resource, sys, time
from theseus.store import Store
root, what, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
store = Store(root)
t0 = time.perf_counter()
if what == "compact":
    store.compact()
else:
    assert store.runs().height == 1
    nonce = store.runs()["nonce"][0]
    top = store.find().has("train/loss").sort("train/loss").limit(10).select(keys=["train/loss"])
    cols = store.find().nonce(nonce).columns(keys=["train/loss", "val/loss"])
    assert len(top) == 10 and len(cols["train/loss"]) == steps, (len(cols["train/loss"]), steps)
def peak_bytes():
    # VmHWM: this process's own high-water mark; ru_maxrss keeps the forking parent's across exec on Linux
    try:
        with open("/proc/self/status") as status:
            return next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmHWM:"))
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(time.perf_counter() - t0, peak_bytes())
"""


def bench_memory(cache: Path, steps: int, row) -> None:
    """Peak resident memory of a fresh process compacting, then querying, one long run."""
    folder = build_root(cache, 1, steps, 50)
    root = folder / "mem"
    shutil.rmtree(root, ignore_errors=True)
    shutil.copytree(folder / "pristine", root)
    label = f"1 run x {steps:,} steps x 8 keys"
    for what in ("compact", "query"):
        out = subprocess.run([sys.executable, "-c", MEMORY_CHILD, str(root), what, str(steps)], check=True,
                             capture_output=True, text=True).stdout.split()
        t, peak = float(out[0]), int(out[1])
        row(f"peak memory, {what} {label} (fresh process; {s(t)})", f"{peak / 2**30:.2f} GiB", "-",
            peak / 2**30, "", "< 1 GiB", peak < 2**30)
    shutil.rmtree(root, ignore_errors=True)


GCS_CHILD = """
import collections, sys, gcsfs
from theseus.store import Node, Store
emulator, n = sys.argv[1], int(sys.argv[2])
bucket = f"scale-{n}"
gcsfs.GCSFileSystem(skip_instance_cache=True).mkdir(bucket)
root = f"gs://{bucket}/root"
with Store(root).writer() as w:
    for i in range(n):
        node = Node.start(f"bench.gcs.run{i:04d}")
        for step in range(3):
            w.write(Node(node.name, node.nonce, step), {"train/loss": float(i * 10 + step)})
Store(root).compact()
counts, original = collections.Counter(), gcsfs.GCSFileSystem._request
async def request(self, method, path, *args, **kwargs):
    counts[method] += 1
    return await original(self, method, path, *args, **kwargs)
gcsfs.GCSFileSystem._request = request
out = []
for query in ("runs", "top"):
    gcsfs.GCSFileSystem.clear_instance_cache()
    counts.clear()
    store = Store(root)
    store.runs() if query == "runs" else store.find().has("train/loss").sort("train/loss").limit(10).select()
    out.append(sum(counts.values()))
print(*out)
"""


def bench_gcs(runs: list[int], row) -> None:
    """Storage requests of a cold ``runs()`` and a cold top-10 on compacted gs:// roots of ``runs`` runs
    (3 steps each), on a gcp-storage-emulator started here."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    exe = Path(sys.executable).with_name("gcp-storage-emulator")
    emulator = subprocess.Popen([str(exe), "start", "--host", "127.0.0.1", "--port", str(port), "--in-memory", "-q"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    env = {**os.environ, "STORAGE_EMULATOR_HOST": f"http://127.0.0.1:{port}", "GOOGLE_AUTH_TOKEN_FOR_TESTING": "x",
           "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false"}
    try:
        time.sleep(2)
        counts = {n: subprocess.run([sys.executable, "-c", GCS_CHILD, env["STORAGE_EMULATOR_HOST"], str(n)],
                                    env=env, check=True, capture_output=True, text=True).stdout.split() for n in runs}
    finally:
        emulator.terminate()
        emulator.wait()
    for i, query in enumerate(("`runs()`", "top-10")):
        seen = [int(counts[n][i]) for n in runs]
        row(f"gs:// cold {query} of a compacted root: storage requests at {' / '.join(f'{n:,}' for n in runs)} runs",
            " / ".join(map(str, seen)), "-", seen[-1] / seen[0], "", "same at every size", len(set(seen)) == 1)


def bench_scale(cache: Path, repeat: int, row, sizes: list[tuple[int, int, int]] | None = None,
                long_steps: int = 1_000_000, gcs_runs: list[int] | None = None) -> None:
    """Every row of the scale section."""
    for runs, steps, flushes in [(100, 1000, 5), (1000, 1000, 5), (10_000, 100, 2)] if sizes is None else sizes:
        print(f"\n[5] {runs:,} runs x {steps:,} steps x 8 keys, {flushes} segments per run", flush=True)
        bench_runs_root(cache, runs, steps, flushes, repeat, row)
    if long_steps:
        print(f"\n[6] memory: 1 run x {long_steps:,} steps x 8 keys", flush=True)
        bench_memory(cache, long_steps, row)
    if gcs_runs:
        print(f"\n[7] gs:// requests of cold queries at {gcs_runs} runs (gcp-storage-emulator)", flush=True)
        bench_gcs(gcs_runs, row)


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", default="/tmp/theseus-store-bench")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--sizes", default="100x1000x5,1000x1000x5,10000x100x2")
    parser.add_argument("--long-steps", type=int, default=1_000_000)
    parser.add_argument("--gcs-runs", default="10,100,400")
    args = parser.parse_args()

    def show(figure, ours, peer, ratio, label, target, ok):
        print(f"  -> {figure}: {ours} | {peer} | target {target} | {'-' if ok is None else ('yes' if ok else 'NO')}",
              flush=True)

    sizes = [tuple(int(x) for x in size.split("x")) for size in args.sizes.split(",") if size]
    gcs = [int(n) for n in args.gcs_runs.split(",") if n]
    bench_scale(Path(args.cache), args.repeat, show, sizes, args.long_steps, gcs)
    os._exit(0)
