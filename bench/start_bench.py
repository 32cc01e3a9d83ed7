"""Time to the first trained step: a first start (empty compilation cache) vs a second start of the same job.

A small synthetic root (a learnable token pattern over a 128-token vocabulary) and a
2-layer GPT (n_embd 128, 4 heads, block 128, batch 8, the default bf16 activations):
``gpt/train/pretrain`` runs STEPS steps through ``theseus.quick.quick(root)`` with a
checkpoint every 2 steps, untimed, with the cache off. Then each timed start is a fresh
Python process (as a real second start is), with ``THESEUS_COMPILATION_CACHE`` set:

- **first start**: ``q.build("gpt/train/pretrain", ...)``, the same config, ``q.create()``,
  ``job()``, on an empty cache folder;
- **second start**: the same, on the folder the first start filled;
- **resume, cold**: ``q.find().nonce(n).checkpoint().seq(2).resume()``, ``q.build().create()``,
  ``job()`` on an empty folder (a branch: step 2 is not the run's last node), what every
  resume cost before the cache;
- **resume, warm**: the same on the folder the two starts filled.

Each is timed from just before the parent starts the process (interpreter start and
imports included) until the first step's report: the trainer's ``TRAIN | 1/..`` log line,
emitted just before the report reaches the job (a loguru sink in the child takes
``time.time()`` there). The child also stamps the end of its imports and the return of
``q.create()``, to split the time. Every start uses the CPU peak measured by the untimed
run (cached in the root), and Python's bytecode cache in a private folder that the
untimed run filled, as on any machine that imported theseus before (this one sets
``PYTHONDONTWRITEBYTECODE``; ``--no-bytecode-cache`` keeps that). Rounds repeat the
four starts on fresh compilation cache folders; medians are printed with the ratios.

    uv run python bench/start_bench.py [--rounds 2] [--steps 4]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time

MARK = "@@START@@"
RUN = "start-bench"

# one start in a fresh interpreter; argv: root, mode ("fresh" or "resume"), steps, base nonce
CHILD = f"""
import json, sys, time
stamps = {{}}
from loguru import logger
logger.remove()
logger.add(sys.stderr, level="WARNING")
def first_report(message):
    if message.record["message"].startswith("TRAIN |") and "report" not in stamps:
        stamps["report"] = time.time()
logger.add(first_report, level="INFO")
from theseus.quick import quick
import start_bench
stamps["imported"] = time.time()
root, mode, steps, nonce, model = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
with quick(root) as q:
    if mode == "fresh":
        q.build("gpt/train/pretrain", {RUN!r})
        start_bench.MODELS[model](q.config, steps)
    else:
        q.find().nonce(nonce).checkpoint().seq(2).resume()
        q.build()
    job = q.create()
    stamps["created"] = time.time()
    created = job.node.nonce
    job()
print({MARK!r} + json.dumps({{**stamps, "nonce": created}}), flush=True)
"""


def configure(config, steps: int) -> None:
    """The bench's job: a 2-layer, 128-wide GPT on the synthetic dataset, ``steps`` steps, a checkpoint every 2."""
    arch = config.architecture
    arch.n_embd, arch.n_layers, arch.n_head, arch.block_size, arch.vocab_size = 128, 2, 4, 128, 128
    config.data.dataset = "synthetic"
    config.training.batch_size = 8
    config.training.per_device_batch_size = 8
    config.training.tokens = steps * 8 * 128
    config.training.validation_steps = 2
    config.logging.report_interval = 1
    config.logging.checkpoint_interval = 2
    config.logging.validation_interval = steps


def configure_quickstart(config, steps: int) -> None:
    """The quickstart's model and data (``theseus.quickstart.configure``: a 2-layer, 64-wide GPT over the
    100,288-token vocabulary, on pydoc), ``steps`` steps, a checkpoint every 2."""
    from theseus.quickstart import configure as quickstart

    quickstart(config, steps)
    config.logging.report_interval = 1
    config.logging.checkpoint_interval = 2
    config.logging.validation_interval = steps


def configure_deep(config, steps: int) -> None:
    """An 8-layer, 256-wide GPT (8 heads, block 128) on the synthetic dataset: a model whose compilation
    outweighs the imports and tracing every process pays, as larger models' do."""
    configure(config, steps)
    arch = config.architecture
    arch.n_embd, arch.n_layers, arch.n_head = 256, 8, 8


#: the bench's models: ``--model`` picks one
MODELS = {"synthetic": configure, "quickstart": configure_quickstart, "deep": configure_deep}


def write_pydoc(root: str) -> None:
    """The quickstart's dataset: the pydoc corpus tokenized into ``root`` (untimed)."""
    from theseus.quick import quick

    with quick(root) as q:
        q.build("data/tokenize/pydoc", "tokenize-pydoc")
        q()


def write_dataset(root: str, tokens: int = 200_000, vocab: int = 128) -> None:
    """A learnable pattern ((7 i + noise) mod vocab) as the contiguous dataset ``synthetic``."""
    import numpy as np

    from theseus.data.store import DatasetWriter

    rng = np.random.default_rng(0)
    pattern = (np.arange(tokens) * 7 + rng.integers(0, 3, tokens)) % vocab
    with DatasetWriter(root, "synthetic", "contiguous") as writer:
        writer.append("train", pattern[: tokens * 9 // 10])
        writer.append("val", pattern[tokens * 9 // 10:])


def start(root: str, mode: str, steps: int, nonce: str, cache: str, pycache: str | None,
          model: str) -> dict[str, float]:
    """One start in a fresh process: seconds from its launch to imports done, job created, first report.

    ``pycache``: the folder of Python's bytecode cache (None: as this environment says).
    """
    env = {**os.environ, "THESEUS_COMPILATION_CACHE": cache,
           "PYTHONPATH": os.pathsep.join(p for p in (os.path.dirname(os.path.abspath(__file__)),
                                                     os.environ.get("PYTHONPATH")) if p)}
    if pycache is not None:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = pycache
    t0 = time.time()
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(CHILD), root, mode, str(steps), nonce, model],
                          env=env, capture_output=True, text=True)
    lines = [line[len(MARK):] for line in proc.stdout.splitlines() if line.startswith(MARK)]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"{mode} start failed (rc={proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}")
    stamps = json.loads(lines[-1])
    return {"imports": stamps["imported"] - t0, "created": stamps["created"] - t0, "total": stamps["report"] - t0,
            "nonce": stamps["nonce"]}


def entries(folder: str) -> int:
    return len(os.listdir(folder)) if os.path.isdir(folder) else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2, help="rounds of the four starts (default 2)")
    parser.add_argument("--steps", type=int, default=4, help="steps of each run (default 4)")
    parser.add_argument("--no-bytecode-cache", action="store_true",
                        help="leave Python's bytecode cache as the environment says (default: on, in a private "
                             "folder that the untimed run fills)")
    parser.add_argument("--model", choices=sorted(MODELS), default="quickstart",
                        help="quickstart: the quickstart's 2-layer GPT on pydoc (default); synthetic: a 2-layer, "
                             "128-wide GPT over a 128-token vocabulary; deep: 8 layers, 256 wide, same data")
    args = parser.parse_args()

    work = tempfile.mkdtemp(prefix="theseus-start-bench-")
    root = os.path.join(work, "root")
    (write_pydoc if args.model == "quickstart" else write_dataset)(root)
    pycache = None if args.no_bytecode_cache else os.path.join(work, "pycache")
    run = functools.partial(start, root, steps=args.steps, pycache=pycache, model=args.model)
    base = run("fresh", nonce="", cache="off")["nonce"]  # the run resumes restore from; compilation cache off
    print(f"model {args.model}, root {root}, base run {base} ({args.steps} steps, checkpoints every 2)", flush=True)

    results: dict[str, list[dict]] = {"first": [], "second": [], "resume cold": [], "resume warm": []}
    for r in range(args.rounds):
        cache, cold = os.path.join(work, f"cache-{r}"), os.path.join(work, f"cold-{r}")
        results["first"].append(run("fresh", nonce="", cache=cache))
        written = entries(cache)
        results["second"].append(run("fresh", nonce="", cache=cache))
        by_second = entries(cache) - written
        results["resume cold"].append(run("resume", nonce=base, cache=cold))
        results["resume warm"].append(run("resume", nonce=base, cache=cache))
        by_resume = entries(cache) - written - by_second
        print(f"  round {r}: " + " | ".join(
            f"{name} {res[-1]['total']:.2f} s (imports {res[-1]['imports']:.2f}, created {res[-1]['created']:.2f})"
            for name, res in results.items())
            + f" | cache entries: {written} by the first start, +{by_second} by the second, +{by_resume} by the "
              "warm resume", flush=True)

    med = {name: statistics.median(x["total"] for x in res) for name, res in results.items()}
    rows = [
        ("second start vs first start (fresh run, same config)", med["second"], med["first"]),
        ("`resume()` with the cache filled vs with an empty one", med["resume warm"], med["resume cold"]),
        ("`resume()` with the cache filled vs the first start", med["resume warm"], med["first"]),
    ]
    print()
    print("| figure | with the cache | baseline | ratio | target | pass |")
    print("|---|---|---|---|---|---|")
    for i, (name, ours, peer) in enumerate(rows):
        target = "<= 0.3x" if i == 0 else "printed"
        passed = ("yes" if ours / peer <= 0.3 else "no") if i == 0 else "-"
        print(f"| {name} | {ours:.2f} s | {peer:.2f} s | {ours / peer:.2f}x | {target} | {passed} |")


if __name__ == "__main__":
    main()
