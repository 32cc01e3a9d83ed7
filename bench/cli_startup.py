"""How long the ``theseus`` command takes to answer, against a Python process that imports Polars and PyArrow.

Commands that neither train, sample nor evaluate import no JAX, Flax, Optax or
TensorStore, so their floor is what every theseus process imports anyway: Polars and
PyArrow. Each command is a fresh process, run in turns with the others, timed from just
before the parent starts it until it exits (interpreter start, imports and the command's
work). The root is small: RUNS runs of STEPS steps written with the store's writer.

- **baseline**: ``python -c "import polars, pyarrow"``;
- ``theseus --help``, ``ls ROOT``, ``show ROOT NONCE``, ``jobs``, ``parts``, ``audit ROOT``
  and an unknown command (an error path), through the console script beside the
  interpreter (``python -m theseus.cli`` where there is none);
- for reference, ``python -c "import jax, flax, optax"``: what these commands no longer pay.

``theseus/catalog.json`` must be up to date (``python -m theseus.catalog --check``), or
``jobs`` and ``parts`` would load the registries. Python's bytecode cache is on, in a
private folder an untimed round fills first, as on any machine that ran theseus before
(``--no-bytecode-cache`` leaves it as the environment says). Medians of the rounds, the
ratio to the baseline's median and each command's range, for the wall time and for the CPU
time (user + system) the process used, which a shared machine's waits affect much less; the
target holds when both ratios do.

    uv run python bench/cli_startup.py [--rounds 7]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

RUNS, STEPS = 3, 20


def write_root(root: str) -> str:
    """RUNS finished runs of STEPS steps in ``root``, written with the store's writer; the first run's nonce."""
    from theseus.store import Node, Store

    store, nonces = Store(root), []
    for i in range(RUNS):
        node = Node.start(f"bench.cli.run-{i}")
        with store.writer() as w:
            w.job(node, "gpt/train/pretrain", "optimization:\n  lr: 0.0003\n")
            for step in range(STEPS):
                node = node.next()
                w.write(node, {"train/loss": 10.0 - step * 0.1, "train/tokens": 4096 * step})
            w.finished(node)
        nonces.append(node.nonce)
    return nonces[0]


def commands(root: str, nonce: str) -> dict[str, tuple[list[str], int]]:
    """Label -> (argv, the exit code it must end with)."""
    script = os.path.join(os.path.dirname(sys.executable), "theseus")
    theseus = [script] if os.path.exists(script) else [sys.executable, "-m", "theseus.cli"]
    return {
        'python -c "import polars, pyarrow" (baseline)': ([sys.executable, "-c", "import polars, pyarrow"], 0),
        "theseus --help": ([*theseus, "--help"], 0),
        "theseus ls ROOT": ([*theseus, "ls", root], 0),
        "theseus show ROOT NONCE": ([*theseus, "show", root, nonce], 0),
        "theseus jobs": ([*theseus, "jobs"], 0),
        "theseus parts": ([*theseus, "parts"], 0),
        "theseus audit ROOT": ([*theseus, "audit", root], 0),
        "theseus nope (unknown command)": ([*theseus, "nope"], 2),
        'python -c "import jax, flax, optax" (reference)': ([sys.executable, "-c", "import jax, flax, optax"], 0),
    }


def timed(argv: list[str], code: int, env: dict[str, str]) -> tuple[float, float]:
    """Seconds from just before ``argv`` starts to its exit, and the CPU seconds (user + system) it used; a wrong
    exit code is an error."""
    before, t0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    proc = subprocess.run(argv, env=env, capture_output=True, text=True)
    seconds, after = time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != code:
        raise RuntimeError(f"{' '.join(argv)} exited {proc.returncode}, not {code}:\n{proc.stdout[-2000:]}\n"
                           f"{proc.stderr[-3000:]}")
    return seconds, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7, help="timed rounds of every command (default 7)")
    parser.add_argument("--no-bytecode-cache", action="store_true",
                        help="leave Python's bytecode cache as the environment says (default: on, in a private "
                             "folder that an untimed round fills)")
    args = parser.parse_args()

    work = tempfile.mkdtemp(prefix="theseus-cli-bench-")
    try:
        root = os.path.join(work, "root")
        nonce = write_root(root)
        env = {**os.environ, "COLUMNS": "120"}
        if not args.no_bytecode_cache:
            env.pop("PYTHONDONTWRITEBYTECODE", None)
            env["PYTHONPYCACHEPREFIX"] = os.path.join(work, "pycache")
        todo = commands(root, nonce)
        check = subprocess.run([sys.executable, "-m", "theseus.catalog", "--check"], capture_output=True, text=True)
        if check.returncode != 0:  # jobs and parts would load the registries, which is not what is measured
            sys.exit(f"{check.stderr.strip()}\nrewrite it first: python -m theseus.catalog")
        for argv, code in todo.values():  # untimed: fills the bytecode cache and checks every command
            timed(argv, code, env)
        times: dict[str, list[tuple[float, float]]] = {label: [] for label in todo}
        for r in range(args.rounds):
            for label, (argv, code) in todo.items():
                times[label].append(timed(argv, code, env))
            print(f"  round {r}: " + " | ".join(f"{label.split(' (')[0]} {t[-1][0]:.2f} s ({t[-1][1]:.2f} s CPU)"
                                                for label, t in times.items()), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    # wall time counts the waits of a shared machine; the CPU time a command uses much less so
    wall = {label: [w for w, _ in t] for label, t in times.items()}
    cpu = {label: [c for _, c in t] for label, t in times.items()}
    baseline = {label: statistics.median(v) for label, v in (("wall", next(iter(wall.values()))),
                                                             ("cpu", next(iter(cpu.values()))))}
    print(f"\n{RUNS} runs x {STEPS} steps; medians of {args.rounds} rounds\n")
    print("| command | median (wall) | ratio (wall) | range (wall) | median CPU | ratio (CPU) | target | pass |")
    print("|---|---|---|---|---|---|---|---|")
    for label in times:
        w, c = statistics.median(wall[label]), statistics.median(cpu[label])
        gated = label in ("theseus --help", "theseus ls ROOT")
        ratio = max(w / baseline["wall"], c / baseline["cpu"])
        print(f"| `{label}` | {w:.2f} s | {w / baseline['wall']:.2f}x | {min(wall[label]):.2f}-{max(wall[label]):.2f} s"
              f" | {c:.2f} s | {c / baseline['cpu']:.2f}x | {'<= 2x' if gated else 'printed'} | "
              f"{('yes' if ratio <= 2 else 'no') if gated else '-'} |")


if __name__ == "__main__":
    main()
