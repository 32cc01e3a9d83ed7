"""Event-store figures: theseus vs MLflow (sqlite) and Aim, and vs raw Polars, in one run.

1. Ingest: 1 run x 10,000 steps x 8 float keys, default durability, close included.
   theseus ``writer().write(node, {8 keys})`` per step (median of 15, after a warm-up);
   MLflow ``MlflowClient.log_batch`` of 8 metrics per step on a local sqlite tracking URI
   (only the first ``--mlflow-steps`` timed, as each call commits to sqlite; the rest filled untimed);
   Aim ``run.track({8 keys}, step=i)`` on a local repo, then ``close()`` (median of 5, each
   run after 3 of theseus'). Values/s, theseus over each peer (goal >= 100x MLflow, >= 200x Aim).
2. History of 2 keys of that run into Python lists: theseus
   ``find().nonce(n).columns(keys=[a, b])`` (one list per key; ``select()``'s rows, then a
   list per key, shown too); MLflow ``get_metric_history`` x 2 (cold: a new
   ``MlflowClient`` per read, against a new ``Store``; warm: one reused client and Store); Aim
   ``Run(hash, read_only=True).get_metric(k, Context({}))`` then ``.values.values_list()``
   (fastest, storage order) or ``.data.items_list()`` (step order), x 2.
   Goal: theseus <= 1/100 of MLflow's time and <= 1/2 of Aim's.
3. 1,000 runs x 1,000 steps x 8 keys, written through the public writer (5 flushes per
   run, as a live run would), cached under ``--cache`` and reused; the same rows also go
   to ONE wide Parquet file (name, nonce, seq, 8 keys) for raw Polars. ``store.compact()``
   (cached too) merges each run's segments and writes the folded view.
   a. point query: ``find().nonce(x).where("train/tokens", "<=", 700_000)
      .sort("train/loss").select(keys=["train/loss", "train/tokens"])`` vs
      ``pl.scan_parquet(wide).filter(nonce == x, tokens <= 700_000).sort(loss)
      .select(loss, tokens).collect()``; before compaction (goal <= 5x) and after
      ``store.compact()`` (goal <= 1.5x).
   b. top-10 lowest ``train/loss`` over all runs after compaction: ``find().has("train/loss")
      .sort("train/loss").limit(10).select(keys=["train/loss", "train/tokens"])`` vs
      ``pl.scan_parquet(wide).select(...).bottom_k(10, by=loss).collect()`` (goal <= 2x).
   Cold = a fresh ``Store`` per repetition (footers read again); warm = one reused ``Store``.
   Medians of ``--repeat`` repetitions, alternating theseus and raw.
4. One synchronous commit record (``w.checkpoint(node, "objects/x")``) on local disk:
   p50/p90/p99/max over ``--commits`` commits (goal p99 < 5 ms).
5-7. The store at scale (``bench/store_scale.py``): ``runs()``, ``compact()`` and a top-10 at
   100, 1,000 and 10,000 runs, peak memory of one 1,000,000-step run, gs:// request counts.

    uv run --group bench python bench/store_bench.py [--quick] [--cache /tmp/theseus-store-bench]
        [--tmp /tmp] [--repeat 9] [--only ingest,history,query,commit,scale] [--readme]

``--readme`` writes the table into the Store section of bench/README.md.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import multiprocessing as mp
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from operator import attrgetter, itemgetter
from pathlib import Path

import numpy as np
import polars as pl

from theseus.store import Node, Store
from theseus.store.listing import list_segments

INGEST_KEYS = [
    "train/loss", "train/lr", "train/grad_norm", "train/step_time",
    "train/tokens_per_s", "train/acc", "val/loss", "val/acc",
]
GRID_KEYS = [
    "train/loss", "train/tokens", "train/lr", "train/grad_norm",
    "train/step_time", "train/tokens_per_s", "val/loss", "train/acc",
]  # train/tokens is an int key, the rest floats
HISTORY_KEYS = ["train/loss", "val/loss"]
TOKENS_CUT = 700_000
DATASET_VERSION = 3  # 2: segments with a block index; compaction writes the view; 3: always-filled columns required

ROWS: list[dict] = []


# -- helpers --------------------------------------------------------------------



def segments_of(root: str) -> list[str]:
    """The published segments of the root ``root`` (listed afresh, as a new reader would)."""
    store = Store(root)
    return list_segments(store.fs, store.path())

def interleaved(fns: dict, repeat: int) -> dict[str, float]:
    """Median seconds per named callable, alternating them so background load hits all alike."""
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeat):
        for k, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[k].append(time.perf_counter() - t0)
    return {k: statistics.median(v) for k, v in times.items()}


def ms(s: float) -> str:
    return f"{s * 1e3:.1f} ms" if s < 10 else f"{s:.1f} s"


def row(figure: str, ours: str, peer: str, ratio: float, ratio_label: str, target: str, ok: bool | None) -> None:
    ROWS.append(
        {"figure": figure, "theseus": ours, "peer": peer,
         "ratio": f"{ratio_label}{ratio:.3g}x" if ratio_label is not None else f"{ratio:.3g}",
         "target": target, "pass": "-" if ok is None else ("yes" if ok else "**no**")}
    )
    print(f"  -> {figure}: theseus {ours} | peer {peer} | {ROWS[-1]['ratio']} | target {target} | "
          f"{ROWS[-1]['pass']}", flush=True)


def ingest_values(steps: int) -> list[list[float]]:
    """Per step, 8 float values (precomputed so value generation is not timed)."""
    rng = np.random.default_rng(0)
    base = rng.random((steps, len(INGEST_KEYS)))
    return base.tolist()


# -- 1 + 2: ingest and history ----------------------------------------------------------


def theseus_ingest(root: str, values: list[list[float]]) -> tuple[float, str]:
    store = Store(root)
    node = first = Node.start("bench.ingest.run")
    keys = INGEST_KEYS
    t0 = time.perf_counter()
    with store.writer() as w:
        for vals in values:
            w.write(node, dict(zip(keys, vals)))
            node = node.next()
    return time.perf_counter() - t0, first.nonce


def theseus_history(root: str, nonce: str, store: Store | None = None) -> list[list[float]]:
    """``columns()``: one list per key."""
    store = store or Store(root)
    columns = store.find().nonce(nonce).columns(keys=HISTORY_KEYS)
    return [columns[k] for k in HISTORY_KEYS]


def theseus_history_rows(root: str, nonce: str, store: Store | None = None) -> list[list[float]]:
    """Rows (``select()``: one dict per node, the seed's ``loss_over_time``), then one list per key."""
    store = store or Store(root)
    rows = store.find().nonce(nonce).select(keys=HISTORY_KEYS)
    return [list(map(itemgetter(k), rows)) for k in HISTORY_KEYS]


def mlflow_setup(folder: str):
    import logging

    logging.getLogger("alembic").setLevel(logging.WARNING)
    logging.getLogger("mlflow").setLevel(logging.WARNING)
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{folder}/mlflow.db"
    client = MlflowClient(tracking_uri=uri)
    exp = client.create_experiment("bench", artifact_location=f"file://{folder}/artifacts")
    return client, exp, uri


def mlflow_ingest(client, exp, values: list[list[float]], timed_steps: int) -> tuple[float, str]:
    """Seconds for the first ``timed_steps`` steps (one log_batch each); the rest are filled
    untimed in batches of 1,000 metrics so the history read sees the whole run."""
    from mlflow.entities import Metric

    run = client.create_run(exp)
    run_id = run.info.run_id
    keys = INGEST_KEYS
    t0 = time.perf_counter()
    for step, vals in enumerate(values[:timed_steps]):
        ts = int(time.time() * 1000)
        client.log_batch(run_id, metrics=[Metric(k, v, ts, step) for k, v in zip(keys, vals)])
    elapsed = time.perf_counter() - t0
    rest = [Metric(k, v, int(time.time() * 1000), step)
            for step, vals in enumerate(values) if step >= timed_steps for k, v in zip(keys, vals)]
    for i in range(0, len(rest), 1000):
        client.log_batch(run_id, metrics=rest[i:i + 1000])
    client.set_terminated(run_id)
    return elapsed, run_id


def mlflow_history(client, run_id: str) -> list[list[float]]:
    return [list(map(attrgetter("value"), client.get_metric_history(run_id, k))) for k in HISTORY_KEYS]


def mlflow_history_cold(uri: str, run_id: str) -> list[list[float]]:
    """As a fresh script reads: a new client (and so a new tracking store) for the read."""
    from mlflow.tracking import MlflowClient

    return mlflow_history(MlflowClient(tracking_uri=uri), run_id)


def aim_ingest(folder: str, values: list[list[float]]) -> tuple[float, str]:
    import aim

    aim.Repo.from_path(folder, init=True)
    keys = INGEST_KEYS
    t0 = time.perf_counter()
    run = aim.Run(repo=folder, experiment="bench", system_tracking_interval=None,
                  log_system_params=False, capture_terminal_logs=False)
    for step, vals in enumerate(values):
        run.track(dict(zip(keys, vals)), step=step)
    run_hash = run.hash
    run.close()
    return time.perf_counter() - t0, run_hash


def aim_index(folder: str, run_hash: str) -> float:
    """Aim 3.2x reads runs through meta/index, which its server's watcher fills; do it directly."""
    import aim
    from aim.sdk.index_manager import RepoIndexManager

    t0 = time.perf_counter()
    RepoIndexManager(aim.Repo.from_path(folder)).index(run_hash)
    return time.perf_counter() - t0


def aim_history(folder: str, run_hash: str) -> list[list[float]]:
    """Step-ordered histories: ``Metric.data.items_list()`` -> (steps, values)."""
    import aim
    from aim.storage.context import Context

    run = aim.Run(run_hash, repo=folder, read_only=True)
    out = []
    for k in HISTORY_KEYS:
        steps, cols = run.get_metric(k, Context({})).data.items_list()
        out.append(list(cols[0]) if isinstance(cols, (list, tuple)) else list(cols))
    return out


def aim_values(folder: str, run_hash: str) -> list[list[float]]:
    """Aim's fastest read, ``Metric.values.values_list()``: the values in storage order, not step order."""
    import aim
    from aim.storage.context import Context

    run = aim.Run(run_hash, repo=folder, read_only=True)
    return [run.get_metric(k, Context({})).values.values_list() for k in HISTORY_KEYS]


def missing_peers() -> list[str]:
    """The peers of sections 1 and 2 (MLflow, Aim) this environment lacks (``uv sync --group bench`` has them)."""
    return [name for name in ("mlflow", "aim") if importlib.util.find_spec(name) is None]


def bench_ingest_history_alone(tmp: str, steps: int, repeat: int, missing: list[str]) -> None:
    """Sections 1 and 2 for theseus alone, printed, no row: their rows are ratios to the peers ``missing`` here."""
    print(f"\n[1-2] {' and '.join(missing)} not installed in this environment: their rows are skipped "
          "(`uv sync --group bench` installs them); theseus alone, for reference", flush=True)
    values, work = ingest_values(steps), tempfile.mkdtemp(prefix="store-bench-ingest-", dir=tmp)
    try:
        theseus_ingest(f"{work}/warm", values[:1000])
        runs = [theseus_ingest(f"{work}/theseus-{i}", values) for i in range(repeat)]
        t, (root, nonce) = statistics.median(t for t, _ in runs), (f"{work}/theseus-{repeat - 1}", runs[-1][1])
        print(f"  ingest 1 run x {steps:,} steps x {len(INGEST_KEYS)} keys (median of {repeat}): {t:.3f} s = "
              f"{steps * len(INGEST_KEYS) / t:,.0f} values/s", flush=True)
        expect = [[v[INGEST_KEYS.index(k)] for v in values] for k in HISTORY_KEYS]
        assert theseus_history(root, nonce) == expect, "theseus history mismatch"
        warm = Store(root)
        times = interleaved({"cold": lambda: theseus_history(root, nonce),
                             "warm": lambda: theseus_history("", nonce, warm)}, repeat)
        print(f"  history of {len(HISTORY_KEYS)} keys: cold {ms(times['cold'])}, warm {ms(times['warm'])}", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def bench_ingest_history(tmp: str, steps: int, mlflow_steps: int, repeat: int) -> None:
    missing = missing_peers()
    if missing:
        bench_ingest_history_alone(tmp, steps, repeat, missing)
        return
    n_values = steps * len(INGEST_KEYS)
    values = ingest_values(steps)
    mlflow_steps = min(mlflow_steps, steps)
    print(f"\n[1] ingest: 1 run x {steps:,} steps x {len(INGEST_KEYS)} float keys ({n_values:,} values)", flush=True)
    work = tempfile.mkdtemp(prefix="store-bench-ingest-", dir=tmp)
    vs = lambda n, t: f"{n / t:,.0f} values/s"  # noqa: E731
    try:
        # one-time process costs (lazy imports: pyarrow imports pandas on the first flush; the
        # first large segment's codec and buffers) are paid by a 1,000-step warm-up per system
        # (8,000 values: a flush past SMALL_SEGMENT_ROWS), as a long training process pays them once
        t_warm, _ = theseus_ingest(f"{work}/warm-theseus", values[:1000])
        aim_ingest(f"{work}/warm-aim", values[:1000])
        print(f"  (warm-up: theseus' first 1,000-step write+close in this process took {t_warm:.2f} s)", flush=True)
        # theseus and Aim alternate, so a slow spell of the shared machine hits both: 5 Aim runs,
        # each after 3 theseus runs (which are much shorter, so one noisy moment weighs more on one)
        runs, aim_runs = [], []
        for i in range(5):
            runs += [theseus_ingest(f"{work}/theseus-{3 * i + j}", values) for j in range(3)]
            aim_runs.append(aim_ingest(f"{work}/aim-{i}", values))
        t_ours = statistics.median(t for t, _ in runs)
        nonce = runs[-1][1]
        root = f"{work}/theseus-{len(runs) - 1}"
        segs = len(segments_of(root))
        print(f"  theseus (median of {len(runs)}): {t_ours:.3f} s = {vs(n_values, t_ours)} ({segs} segments; "
              f"all: {', '.join(f'{t:.3f}' for t, _ in runs)} s)", flush=True)

        os.makedirs(f"{work}/mlflow")
        client, exp, uri = mlflow_setup(f"{work}/mlflow")
        mlflow_ingest(client, exp, values[:10], 10)
        t_ml, run_id = mlflow_ingest(client, exp, values, mlflow_steps)
        n_ml = mlflow_steps * len(INGEST_KEYS)
        print(f"  MLflow (sqlite, log_batch per step; first {mlflow_steps:,} steps timed): "
              f"{t_ml:.2f} s = {vs(n_ml, t_ml)}", flush=True)

        t_aim, run_hash = statistics.median(t for t, _ in aim_runs), aim_runs[-1][1]
        aim_repo = f"{work}/aim-{len(aim_runs) - 1}"
        print(f"  Aim (run.track dict per step, close; median of 5, alternating with theseus): {t_aim:.2f} s = "
              f"{vs(n_values, t_aim)} (all: {', '.join(f'{t:.2f}' for t, _ in aim_runs)} s)", flush=True)
        print(f"  Aim index of the run (untimed above; its server does this in the background): "
              f"{aim_index(aim_repo, run_hash):.2f} s", flush=True)

        r_ml = (n_values / t_ours) / (n_ml / t_ml)
        r_aim = t_aim / t_ours
        label = f"ingest 1 run x {steps:,} steps x 8"
        row(f"{label} vs MLflow", vs(n_values, t_ours), vs(n_ml, t_ml), r_ml, "", ">= 100x", r_ml >= 100)
        row(f"{label} vs Aim", vs(n_values, t_ours), vs(n_values, t_aim), r_aim, "", ">= 200x", r_aim >= 200)

        print(f"\n[2] history of {len(HISTORY_KEYS)} keys x {steps:,} steps into lists (median of {repeat})",
              flush=True)
        expect = [[v[INGEST_KEYS.index(k)] for v in values] for k in HISTORY_KEYS]
        assert theseus_history(root, nonce) == expect, "theseus history mismatch"
        assert theseus_history_rows(root, nonce) == expect, "theseus history (select rows) mismatch"
        assert mlflow_history(client, run_id) == expect, "MLflow history mismatch"
        assert mlflow_history_cold(uri, run_id) == expect, "MLflow history (new client) mismatch"
        assert aim_history(aim_repo, run_hash) == expect, "Aim history mismatch"
        assert [sorted(x) for x in aim_values(aim_repo, run_hash)] == [sorted(x) for x in expect], "Aim values mismatch"
        warm = Store(root)
        theseus_history("", nonce, warm)
        times = interleaved({
            "theseus cold": lambda: theseus_history(root, nonce),
            "theseus warm": lambda: theseus_history("", nonce, warm),
            "theseus select() rows cold": lambda: theseus_history_rows(root, nonce),
            "theseus select() rows warm": lambda: theseus_history_rows("", nonce, warm),
            "MLflow get_metric_history": lambda: mlflow_history(client, run_id),
            "MLflow get_metric_history, new client": lambda: mlflow_history_cold(uri, run_id),
            "Aim data.items_list (step order)": lambda: aim_history(aim_repo, run_hash),
            "Aim values.values_list (storage order)": lambda: aim_values(aim_repo, run_hash),
        }, repeat)
        for k, v in times.items():
            print(f"  {k}: {ms(v)}", flush=True)
        label = f"history 2 keys x {steps:,} steps"
        # like for like: a new Store against a new MLflow client, one reused Store against one reused client
        for w, peer, short in (("cold", "MLflow get_metric_history, new client",
                                "MLflow (cold: new Store, new client)"),
                               ("warm", "MLflow get_metric_history", "MLflow (warm: one Store, one client)")):
            r = times[f"theseus {w}"] / times[peer]
            row(f"{label} vs {short}", ms(times[f"theseus {w}"]), ms(times[peer]), r, "", "<= 0.01x", r <= 0.01)
        for w, peer in (("cold", "MLflow get_metric_history, new client"), ("warm", "MLflow get_metric_history")):
            r = times[f"theseus select() rows {w}"] / times[peer]
            row(f"{label} as select() rows ({w}), shown for reference", ms(times[f"theseus select() rows {w}"]),
                ms(times[peer]), r, "", "(0.01x)", None)
        r = times["theseus cold"] / times["MLflow get_metric_history"]
        row(f"{label}, new Store vs MLflow's reused client (mixed, shown for reference)", ms(times["theseus cold"]),
            ms(times["MLflow get_metric_history"]), r, "", "(0.01x)", None)
        for peer, short, goal, limit, which in (
            ("Aim values.values_list (storage order)", "Aim values_list, unordered", "<= 0.5x", 0.5, ("cold", "warm")),
            ("Aim data.items_list (step order)", "Aim items_list, step order", "<= 0.5x", 0.5, ("cold",)),
        ):
            for w in which:
                r = times[f"theseus {w}"] / times[peer]
                row(f"{label} vs {short} ({w} Store)", ms(times[f"theseus {w}"]), ms(times[peer]), r, "", goal,
                    r <= limit)
    finally:
        shutil.rmtree(work, ignore_errors=True)


# -- 3: the 1,000-run grid ---------------------------------------------------------------


def grid_values(r: int, steps: int) -> dict[str, np.ndarray]:
    """Deterministic metrics of run ``r`` (the same for the store and the wide file)."""
    rng = np.random.default_rng(1000 + r)
    step = np.arange(steps)
    return {
        "train/loss": (2.0 + 8.0 * np.exp(-step / (150.0 + r % 97)) + 0.05 * rng.standard_normal(steps)
                       + 0.001 * (r % 37)),
        "train/tokens": (step + 1) * 1000,
        "train/lr": 3e-4 * np.minimum(1.0, (step + 1) / 100.0),
        "train/grad_norm": rng.gamma(2.0, 0.5, steps),
        "train/step_time": 0.1 + 0.01 * rng.random(steps),
        "train/tokens_per_s": 1e5 * (1 + 0.05 * rng.standard_normal(steps)),
        "val/loss": 2.1 + 8.0 * np.exp(-step / (150.0 + r % 97)) + 0.05 * rng.standard_normal(steps),
        "train/acc": rng.random(steps),
    }


def _write_runs(args: tuple[str, int, int, int, int]) -> list[tuple[int, str, str]]:
    root, lo, hi, steps, flushes = args
    store = Store(root)
    out = []
    every = max(1, steps // flushes)
    for r in range(lo, hi):
        cols = grid_values(r, steps)
        lists = [cols[k].tolist() for k in GRID_KEYS]
        node = first = Node.start(f"bench.grid.run-{r:04d}")
        with store.writer() as w:
            for i in range(steps):
                w.write(node, {k: col[i] for k, col in zip(GRID_KEYS, lists)})
                node = node.next()
                if (i + 1) % every == 0:
                    w.flush()
        out.append((r, first.name, first.nonce))
    return out


def build_grid(cache: Path, runs: int, steps: int, flushes: int) -> dict:
    manifest_path = cache / "manifest.json"
    want = {"version": DATASET_VERSION, "runs": runs, "steps": steps, "flushes": flushes}
    if manifest_path.exists():
        manifest = json.loads(manifest_path.read_text())
        if ({k: manifest.get(k) for k in want} == want and (cache / "pristine").exists()
                and (cache / "wide.parquet").exists()):
            print(f"  reusing cached grid {cache}", flush=True)
            return manifest
    print(f"  building grid in {cache}: {runs:,} runs x {steps:,} steps x {len(GRID_KEYS)} keys, "
          f"{flushes} flushes per run (once; cached)", flush=True)
    shutil.rmtree(cache, ignore_errors=True)
    cache.mkdir(parents=True)
    t0 = time.perf_counter()
    workers = max(1, min(2, os.cpu_count() or 1))
    chunks = [(str(cache / "pristine"), lo, min(runs, lo + math.ceil(runs / workers)), steps, flushes)
              for lo in range(0, runs, math.ceil(runs / workers))]
    with mp.get_context("spawn").Pool(len(chunks)) as pool:
        done = [x for part in pool.map(_write_runs, chunks) for x in part]
    t_write = time.perf_counter() - t0
    print(f"  wrote {runs * steps * len(GRID_KEYS):,} values in {t_write:.0f} s on {workers} processes "
          f"({runs * steps * len(GRID_KEYS) / t_write:,.0f} values/s)", flush=True)
    done.sort()
    frames = []
    for r, name, nonce in done:
        cols = grid_values(r, steps)
        frames.append(pl.DataFrame({"name": [name] * steps, "nonce": [nonce] * steps, "seq": np.arange(steps), **cols}))
    pl.concat(frames).write_parquet(cache / "wide.parquet")
    manifest = {**want, "runs_written": [[name, nonce] for _, name, nonce in done], "write_s": t_write}
    manifest_path.write_text(json.dumps(manifest))
    return manifest


def compacted_copy(cache: Path) -> Path:
    target = cache / "compacted"
    if (target / ".done").exists():
        print(f"  reusing compacted copy {target}", flush=True)
        return target
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(cache / "pristine", target)
    t0 = time.perf_counter()
    merged = Store(target).compact()
    t = time.perf_counter() - t0
    print(f"  store.compact(): {len(merged):,} runs merged in {t:.1f} s", flush=True)
    (target / ".done").write_text(f"{t}\n")
    return target


def theseus_point(root: Path, nonce: str, store: Store | None = None):
    store = store or Store(root)
    return (store.find().nonce(nonce).where("train/tokens", "<=", TOKENS_CUT)
            .sort("train/loss").select(keys=["train/loss", "train/tokens"]))


def raw_point(wide: Path, nonce: str) -> pl.DataFrame:
    return (pl.scan_parquet(wide).filter((pl.col("nonce") == nonce) & (pl.col("train/tokens") <= TOKENS_CUT))
            .sort("train/loss").select("train/loss", "train/tokens").collect())


def theseus_top(root: Path, store: Store | None = None):
    store = store or Store(root)
    return store.find().has("train/loss").sort("train/loss").limit(10).select(keys=["train/loss", "train/tokens"])


def raw_top(wide: Path) -> pl.DataFrame:
    return (pl.scan_parquet(wide).select("name", "nonce", "seq", "train/loss", "train/tokens")
            .bottom_k(10, by="train/loss").sort("train/loss").collect())


def bench_grid(cache: Path, runs: int, steps: int, flushes: int, repeat: int) -> None:
    print(f"\n[3] {runs:,} runs x {steps:,} steps x {len(GRID_KEYS)} keys", flush=True)
    manifest = build_grid(cache, runs, steps, flushes)
    wide = cache / "wide.parquet"
    pristine = cache / "pristine"
    nonces = [nonce for _, nonce in manifest["runs_written"]]
    unique = [n for n in nonces if nonces.count(n) == 1]
    nonce = unique[len(unique) // 2]
    n_seg = len(segments_of(pristine))
    print(f"  {n_seg:,} segments before compaction; wide file {wide.stat().st_size / 1e6:.0f} MB; "
          f"query nonce {nonce}", flush=True)

    def check_point(root):
        got = theseus_point(root, nonce)
        want = raw_point(wide, nonce).to_dicts()
        assert got == want, f"point query mismatch: {got[:3]} vs {want[:3]}"
        return len(got)

    for phase, root, goal, limit in (("before compaction", pristine, "<= 5x", 5.0),
                                     ("after compaction", None, "<= 1.5x", 1.5)):
        if root is None:
            root = compacted_copy(cache)
            print(f"  {len(segments_of(root)):,} segments after compaction", flush=True)
        n = check_point(root)
        warm = Store(root)
        theseus_point(root, nonce, warm)
        t = interleaved({
            "cold": lambda: theseus_point(root, nonce),
            "warm": lambda: theseus_point(root, nonce, warm),
            "raw": lambda: raw_point(wide, nonce),
        }, repeat)
        print(f"  point query {phase} ({n} rows): theseus cold {ms(t['cold'])}, warm {ms(t['warm'])}, "
              f"raw Polars {ms(t['raw'])}", flush=True)
        for which in ("cold", "warm"):
            r = t[which] / t["raw"]
            row(f"point query {phase} ({which} Store) vs raw Polars", ms(t[which]), ms(t["raw"]), r, "", goal,
                r <= limit)

    got = theseus_top(root)
    want = raw_top(wide)
    assert [r["train/loss"] for r in got] == want["train/loss"].to_list(), f"top-10 mismatch: {got} vs {want}"
    warm = Store(root)
    theseus_top(root, warm)
    t = interleaved({"cold": lambda: theseus_top(root), "warm": lambda: theseus_top(root, warm),
                     "raw": lambda: raw_top(wide)}, repeat)
    print(f"  top-10 lowest train/loss after compaction: theseus cold {ms(t['cold'])}, warm {ms(t['warm'])}, "
          f"raw Polars {ms(t['raw'])}", flush=True)
    for which in ("cold", "warm"):
        r = t[which] / t["raw"]
        row(f"top-10 loss of {runs:,} runs after compaction ({which} Store) vs raw Polars", ms(t[which]), ms(t["raw"]),
            r, "", "<= 2x", r <= 2.0)


# -- 4: commit latency ---------------------------------------------------------------------


def bench_commit(tmp: str, commits: int) -> None:
    print(f"\n[4] synchronous commit record: {commits} x w.checkpoint(node, 'objects/x') on {tmp}", flush=True)
    work = tempfile.mkdtemp(prefix="store-bench-commit-", dir=tmp)
    os.sync()  # the bench's own earlier writes (runs, repos, deleted scratch folders) are not the commit's to flush
    try:
        store = Store(work)
        node = Node.start("bench.commit.run")
        lat = []
        with store.writer() as w:
            w.write(node, {"train/loss": 1.0})
            w.checkpoint(node, "objects/x")  # warm-up: footer read, folders made
            for _ in range(commits):
                node = node.next()
                t0 = time.perf_counter()
                w.checkpoint(node, "objects/x")
                lat.append(time.perf_counter() - t0)
        a = np.array(lat) * 1e3
        p = {q: float(np.percentile(a, q)) for q in (50, 90, 99)}
        print(f"  p50 {p[50]:.2f} ms  p90 {p[90]:.2f} ms  p99 {p[99]:.2f} ms  max {a.max():.2f} ms  "
              f"mean {a.mean():.2f} ms", flush=True)
        edges = [0, 0.5, 1, 2, 3, 5, 10, 20, 50, math.inf]
        hist = np.histogram(a, bins=edges)[0]
        print("  distribution (ms): " + "  ".join(
            f"[{lo:g},{hi:g}):{c}" for lo, hi, c in zip(edges, edges[1:], hist) if c), flush=True)
        ROWS.append({"figure": f"commit record latency ({commits} commits)",
                     "theseus": f"p50 {p[50]:.2f} / p90 {p[90]:.2f} / p99 {p[99]:.2f} / max {a.max():.2f} ms",
                     "peer": "-", "ratio": "-", "target": "p99 < 5 ms", "pass": "yes" if p[99] < 5 else "**no**"})
        print(f"  -> p99 {p[99]:.2f} ms: {ROWS[-1]['pass']}", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


# -- report -----------------------------------------------------------------------------------


def table() -> str:
    lines = ["| figure | theseus | peer | ratio (theseus / peer) | target | pass |", "|---|---|---|---|---|---|"]
    lines += [f"| {r['figure']} | {r['theseus']} | {r['peer']} | {r['ratio']} | {r['target']} | {r['pass']} |"
              for r in ROWS]
    return "\n".join(lines)


START, END = "<!-- store-bench:start -->", "<!-- store-bench:end -->"

README_INTRO = """## Store

`bench/store_bench.py` measures the event store (`theseus/store`) against MLflow (local
sqlite tracking URI, `MlflowClient.log_batch`), Aim (local repo, `run.track`) and raw Polars
on one wide Parquet file, all in one run:

1. **Ingest**: 1 run x 10,000 steps x 8 float keys at default durability, close included.
   theseus: `w.write(node, {8 keys}); node = node.next()` per step in `with store.writer()
   as w:` (median of 15, after a 1,000-step warm-up that pays the process's one-time costs).
   Aim: `run.track({8 keys}, step=i)` per step, then `close()` (median of 5, each after 3 of
   theseus', so a slow spell of the shared machine hits both; its run index, which Aim's
   server builds in the background, is built untimed). MLflow: one `log_batch` of 8 metrics
   per step, the first 1,000 steps timed, the rest filled untimed.
2. **History** of 2 keys of that run into Python lists. theseus:
   `find().nonce(n).columns(keys=[a, b])`; `select(keys=[a, b])` then a list per key is shown
   for reference. MLflow: `get_metric_history` x 2. *cold* is a new `Store` against a new
   `MlflowClient` (a fresh script's read), *warm* one reused `Store` against one reused
   client. Aim: `Run(hash, read_only=True).get_metric(k, Context({}))` then
   `.values.values_list()` (storage order) or `.data.items_list()` (step order).
3. **1,000 runs x 1,000 steps x 8 keys** written through the public writer (5 flushes per
   run) once into `/tmp/theseus-store-bench` and reused; the same rows in one wide Parquet
   file for raw Polars. Point query: `find().nonce(x).where("train/tokens", "<=", 700_000)
   .sort("train/loss").select(keys=["train/loss", "train/tokens"])` (700 rows) vs the same
   filter, sort and select on `pl.scan_parquet(wide)`, before and after `store.compact()`.
   Top-10: `find().has("train/loss").sort("train/loss").limit(10).select(keys=[...])` vs
   `scan_parquet(wide).bottom_k(10, by=loss)`. *cold* = a fresh `Store` per query, *warm* =
   one reused `Store`.
4. **Commit latency**: `w.checkpoint(node, "objects/x")` (segment written, fsync'd, renamed,
   folder fsync'd before it returns), distribution over 500 commits on local disk.

Every result is checked against the others before timing. Times are medians of 9
repetitions interleaving the contenders. Ratios are theseus / peer: for ingest higher is
better, for times lower is better. Ratios from one run count, not single figures: on a
shared machine those move between runs.

    uv run --group bench python bench/store_bench.py            # the grid is built once, then cached
    uv run --group bench python bench/store_bench.py --quick    # 2k-step ingest, 100-run grid
    uv run --group bench python bench/store_bench.py --readme   # also rewrite the table below
"""


def write_readme(path: Path, header: str) -> None:
    block = f"{START}\n{header}\n\n{table()}\n{END}"
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    if "## Store" in text and START in text and END in text:  # the intro and the table, refreshed
        before, rest = text.split("## Store", 1)
        after = rest.split(END, 1)[1]
        text = before + README_INTRO + "\n" + block + after
    elif "## Store" in text:
        head, tail = text.split("## Store", 1)
        nxt = tail.find("\n## ")
        tail = tail[nxt:] if nxt >= 0 else "\n"
        text = head + README_INTRO + "\n" + block + "\n" + tail
    else:
        text = text.rstrip("\n") + "\n\n" + README_INTRO + "\n" + block + "\n"
    path.write_text(text)
    print(f"\nwrote the table into {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2k-step ingest, 100-run grid, 100 commits, 3 repeats")
    parser.add_argument("--steps", type=int, default=None, help="ingest steps (default 10,000; quick 2,000)")
    parser.add_argument("--mlflow-steps", type=int, default=None,
                        help="MLflow steps timed one log_batch each (default 1,000; quick 300); "
                             "the rest filled untimed")
    parser.add_argument("--runs", type=int, default=None, help="grid runs (default 1,000; quick 100)")
    parser.add_argument("--grid-steps", type=int, default=1000)
    parser.add_argument("--flushes", type=int, default=5, help="flushes (segments) per grid run")
    parser.add_argument("--commits", type=int, default=None, help="commit records timed (default 500; quick 100)")
    parser.add_argument("--repeat", type=int, default=None, help="repetitions per timing (default 9; quick 3)")
    parser.add_argument("--cache", default=None, help="grid cache folder (default /tmp/theseus-store-bench[-quick])")
    parser.add_argument("--tmp", default=tempfile.gettempdir(), help="local folder for scratch stores and commits")
    parser.add_argument("--only", default="ingest,history,query,commit,scale", help="comma list of parts to run")
    parser.add_argument("--readme", action="store_true", help="write the table into bench/README.md")
    args = parser.parse_args()
    q = args.quick
    steps = args.steps or (2_000 if q else 10_000)
    runs = args.runs or (100 if q else 1_000)
    mlflow_steps = args.mlflow_steps or (300 if q else 1_000)
    commits = args.commits or (100 if q else 500)
    repeat = args.repeat or (3 if q else 9)  # a few-ms read is one noisy moment from doubling
    cache = Path(args.cache or f"/tmp/theseus-store-bench{'-quick' if q else ''}")
    only = set(args.only.split(","))

    import pyarrow

    header = (f"Measured {time.strftime('%Y-%m-%d')} on {os.cpu_count()} CPU cores (shared), local disk; "
              f"Python {platform.python_version()}, Polars {pl.__version__}, PyArrow {pyarrow.__version__}")
    try:
        from importlib.metadata import version

        header += f", MLflow {version('mlflow')}, Aim {version('aim')}"
    except Exception:
        pass
    header += "; `" + " ".join(["store_bench.py", *sys.argv[1:]]) + "`."
    print(header, flush=True)
    t0 = time.perf_counter()
    if only & {"ingest", "history"}:
        bench_ingest_history(args.tmp, steps, mlflow_steps, repeat)
    if "query" in only:
        bench_grid(cache, runs, args.grid_steps, args.flushes, repeat)
    if "commit" in only:
        bench_commit(args.tmp, commits)
    if "scale" in only:  # bench/store_scale.py: listing, incremental compaction, memory, gs:// requests
        from store_scale import bench_scale

        sizes = [(100, 1000, 5)] if q else None
        bench_scale(cache.parent, 3, row, sizes, 100_000 if q else 1_000_000, [10, 100] if q else [10, 100, 400])
    print(f"\ntotal {time.perf_counter() - t0:.0f} s\n")
    print(table())
    if args.readme:
        write_readme(Path(__file__).with_name("README.md"), header)


if __name__ == "__main__":
    main()
