"""How long ``theseus export tensorboard`` takes to answer, writing event files with the ``tensorboard`` package
against the tensorboardX writer it used before (tensorboardX imports torch).

Each export is a fresh process over a small root (`cli_startup.write_root`: 3 runs x 20
steps) into a new folder, run in turns, Python's bytecode cache on in a private folder an
untimed round fills:

- **before**: the TensorBoard sink module of ``--before`` (the last commit writing with
  tensorboardX, read with ``git show``) loaded in place of the current one, the backend
  entry naming ``tensorboardX`` as it did, then the same command through ``theseus.cli``;
- **after**: the console script, ``theseus export tensorboard ROOT OUT``.

Both must exit 0 and write one event file per run. Medians of the rounds, wall time and CPU
time (user + system), and the ratio before / after (above 1: the export answers sooner now).
The 'before' export needs tensorboardX, in the ``bench`` group (``uv sync --group bench --group remote``).

    uv run --group remote python bench/tensorboard_export_bench.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

from cli_startup import RUNS, STEPS, timed, write_root

#: the last commit whose TensorBoard sink wrote with tensorboardX
BEFORE = "37817ed6ae6333019530aa36d39a0c64cdd533fd"

#: the export with the old sink module (argv: its source file, the root, the output folder)
OLD_EXPORT = """
import importlib.util, sys
from theseus.mirror import sinks

spec = importlib.util.spec_from_file_location("theseus.mirror.to_tensorboard", sys.argv[1])
old = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = old
spec.loader.exec_module(old)
sinks.BACKENDS["tensorboard"] = sinks.Backend("tensorboardX", "tensorboardX", spec.name)
from theseus.cli import app
app(["export", "tensorboard", *sys.argv[2:]])
"""


def event_files(out: str) -> int:
    """How many event files the export wrote under ``out``."""
    return sum("tfevents" in name for _, _, names in os.walk(out) for name in names)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds of each export (default 5)")
    parser.add_argument("--before", default=BEFORE, help="the commit whose sink module the 'before' export runs")
    args = parser.parse_args()
    if importlib.util.find_spec("tensorboardX") is None:  # no longer in the `remote` group: the 'before' needs it
        sys.exit("the 'before' export needs tensorboardX (the bench group): uv sync --group bench --group remote, "
                 "then run this again")

    work = tempfile.mkdtemp(prefix="theseus-tb-bench-")
    try:
        root = os.path.join(work, "root")
        write_root(root)
        old_module = os.path.join(work, "old_to_tensorboard.py")
        with open(old_module, "w") as f:
            f.write(subprocess.run(["git", "show", f"{args.before}:theseus/mirror/to_tensorboard.py"],
                                   capture_output=True, text=True, check=True).stdout)
        script = os.path.join(os.path.dirname(sys.executable), "theseus")
        theseus = [script] if os.path.exists(script) else [sys.executable, "-m", "theseus.cli"]
        todo = {"before (tensorboardX)": [sys.executable, "-c", OLD_EXPORT, old_module, root],
                "after (tensorboard)": [*theseus, "export", "tensorboard", root]}
        env = {**os.environ, "PYTHONPYCACHEPREFIX": os.path.join(work, "pycache")}  # filled by the untimed round
        env.pop("PYTHONDONTWRITEBYTECODE", None)  # which it would not fill otherwise, compiling in every round
        times: dict[str, list[tuple[float, float]]] = {label: [] for label in todo}
        for r in range(-1, args.rounds):  # round -1, untimed, fills the bytecode cache
            for label, argv in todo.items():
                out = os.path.join(work, f"out-{len(times[label])}-{r}-{label.split()[0]}")
                seconds = timed([*argv, out], 0, env)
                if event_files(out) != RUNS:
                    raise RuntimeError(f"{label} wrote {event_files(out)} event files, not {RUNS}")
                if r >= 0:
                    times[label].append(seconds)
            if r >= 0:
                print(f"  round {r}: " + " | ".join(f"{label} {t[-1][0]:.2f} s ({t[-1][1]:.2f} s CPU)"
                                                    for label, t in times.items()), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    wall = {label: statistics.median(w for w, _ in t) for label, t in times.items()}
    cpu = {label: statistics.median(c for _, c in t) for label, t in times.items()}
    before, after = todo
    print(f"\n{RUNS} runs x {STEPS} steps; medians of {args.rounds} rounds\n")
    print("| figure | before (tensorboardX) | after (tensorboard) | ratio (before / after) |")
    print("|---|---|---|---|")
    for name, medians in (("wall", wall), ("CPU", cpu)):
        print(f"| `theseus export tensorboard ROOT OUT` ({name}) | {medians[before]:.2f} s | {medians[after]:.2f} s | "
              f"{medians[before] / medians[after]:.1f}x |")


if __name__ == "__main__":
    main()
