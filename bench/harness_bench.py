"""Multiple choice on 500 questions: theseus's own evaluation vs lm-evaluation-harness through the adapter.

One GPT of the quickstart's size (n_embd 64, 2 layers, 4 heads, block 64, float32
activations, random parameters) over the quickstart's tokenizer (tiktoken cl100k_base),
and 500 questions in ARC's published columns (``question``, ``choices {text, label}``,
``answerKey``: four choices each, 2,000 continuations) in a local jsonl, offline:

- theseus: ``ARCEasy.questions`` (the ``arc-easy`` part's loader over that file) scored by
  ``theseus.train.evals.choice.multiple_choice``: what ``theseus eval ... --tasks arc-easy``
  and training-time evaluations run;
- lm-eval: lm-eval's own ``arc_easy`` task with the dataset swapped for the same file
  (``include_path``), run by ``lm_eval.simple_evaluate`` on ``TheseusLM`` over the same
  parameters: what ``theseus eval ... --harness`` runs.

Both load the questions inside the timed call; both score through the same jitted
log-likelihood, compiled in an untimed warm-up on the first ``--warmup`` questions (the
same padded shapes; the jsonl is cached by ``datasets`` then too). The two must give the same acc and
acc_norm. ``--rounds`` timed calls of each, alternating; the medians and their ratio
(lm-eval's seconds over theseus's: above 1, theseus is faster) are printed.

    uv run python bench/harness_bench.py [--questions 500] [--rounds 3] [--warmup 32]
"""

from __future__ import annotations

import argparse
import logging
import os
import platform
import random
import statistics
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_DATASETS_OFFLINE", "1")  # before datasets is imported: nothing downloads
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import jax  # noqa: E402 - after the offline settings
import jax.numpy as jnp  # noqa: E402
import lm_eval  # noqa: E402
import yaml  # noqa: E402
from lm_eval.tasks import TaskManager  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402

from theseus.data.tokenizer import get_tokenizer  # noqa: E402
from theseus.model.config import GPTConfig  # noqa: E402
from theseus.model.gpt import GPT  # noqa: E402
from theseus.train.evals.choice import multiple_choice  # noqa: E402
from theseus.train.evals.harness import TheseusLM  # noqa: E402
from theseus.train.evals.public import ARCEasy  # noqa: E402

TARGET = 1.0  # lm-eval's seconds over theseus's: theseus at least as fast
LABELS = "ABCD"
SUBJECTS = ["apples", "books", "coins", "stones", "birds", "cars", "shells", "cups"]


def questions(n: int, seed: int = 0) -> list[dict]:
    """``n`` arithmetic word questions in ARC's columns, four numeric choices, one right."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        a, b, what = rng.randrange(2, 60), rng.randrange(2, 40), rng.choice(SUBJECTS)
        right = a + b
        choices = [right, *rng.sample([c for c in range(max(right - 15, 0), right + 15) if c != right], 3)]
        rng.shuffle(choices)
        rows.append({"id": f"q{i}", "question": f"Sam has {a} {what} and finds {b} more. How many {what} does "
                                                f"Sam have now?",
                     "choices": {"text": [str(c) for c in choices], "label": list(LABELS)},
                     "answerKey": LABELS[choices.index(right)]})
    return rows


def write_task(folder: Path, rows: list[dict]) -> tuple[Path, Path]:
    """The questions as ``ARC-Easy/test.jsonl`` (the hub's layout) and lm-eval's arc_easy over that file."""
    import json

    data = folder / "ARC-Easy" / "test.jsonl"
    data.parent.mkdir(parents=True)
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    tasks = folder / "tasks"
    tasks.mkdir()
    spec = {"task": "arc_local", "dataset_path": "json", "dataset_kwargs": {"data_files": {"test": str(data)}},
            "output_type": "multiple_choice", "test_split": "test",
            "doc_to_text": "Question: {{question}}\nAnswer:", "doc_to_target": "{{choices.label.index(answerKey)}}",
            "doc_to_choice": "{{choices.text}}",
            "metric_list": [{"metric": m, "aggregation": "mean", "higher_is_better": True}
                            for m in ("acc", "acc_norm")]}
    (tasks / "arc_local.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    return folder, tasks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=500, help="questions (default 500)")
    parser.add_argument("--rounds", type=int, default=3, help="timed calls of each, alternating (default 3)")
    parser.add_argument("--warmup", type=int, default=32, help="questions of the untimed warm-up (default 32)")
    args = parser.parse_args()
    logging.getLogger("lm_eval").setLevel(logging.WARNING)

    model = GPT(GPTConfig(n_embd=64, n_layers=2, n_head=4, block_size=64, activation_dtype="float32"))
    params = jax.jit(model.init)(jax.random.PRNGKey(0), jnp.zeros((1, 64), jnp.int32))["params"]
    tokenizer = get_tokenizer()
    folder, tasks = write_task(Path(tempfile.mkdtemp(prefix="harness-bench-")), questions(args.questions))
    config = OmegaConf.create({"eval": {"length": -1, "arc_easy": {"path": str(folder), "subset": "ARC-Easy",
                                                                   "split": "test"}}})
    lm = TheseusLM(model, params, tokenizer)

    def own(limit: int = -1) -> dict[str, float]:
        settings = OmegaConf.merge(config, {"eval": {"length": limit}})
        return multiple_choice(model, params, tokenizer, ARCEasy.questions(settings)).metrics

    def harness(limit: int = -1) -> dict[str, float]:
        manager = TaskManager(include_path=str(tasks), include_defaults=False)
        results = lm_eval.simple_evaluate(model=lm, tasks=["arc_local"], task_manager=manager, log_samples=False,
                                          limit=None if limit == -1 else limit)
        scores = results["results"]["arc_local"]
        return {"acc": scores["acc,none"], "acc_norm": scores["acc_norm,none"]}

    print(f"jax {jax.__version__}, lm-eval {lm_eval.__version__} on {jax.devices()[0].device_kind} "
          f"({platform.processor() or platform.machine()}), {args.questions} questions x 4 choices")
    runs = {"theseus": own, "lm-eval": harness}
    for name, run in runs.items():
        t0 = time.perf_counter()
        run(args.warmup)
        print(f"  warm-up ({args.warmup} questions, compiles), {name}: {time.perf_counter() - t0:.1f} s", flush=True)
    seconds: dict[str, list[float]] = {name: [] for name in runs}
    metrics = {}
    for r in range(args.rounds):
        for name, run in runs.items():
            t0 = time.perf_counter()
            metrics[name] = run()
            seconds[name].append(time.perf_counter() - t0)
        print(f"  round {r}: theseus {seconds['theseus'][-1]:.2f} s | lm-eval {seconds['lm-eval'][-1]:.2f} s",
              flush=True)
    if any(abs(metrics["theseus"][k] - metrics["lm-eval"][k]) > 1e-9 for k in ("acc", "acc_norm")):
        raise SystemExit(f"the two evaluations disagree: {metrics}")
    median = {name: statistics.median(s) for name, s in seconds.items()}
    ratio = median["lm-eval"] / median["theseus"]
    print(f"  acc {metrics['theseus']['acc']:.3f}, acc_norm {metrics['theseus']['acc_norm']:.3f} (both)")
    print()
    print("| figure | theseus | lm-eval through the adapter | ratio (lm-eval / theseus) | target | pass |")
    print("|---|---|---|---|---|---|")
    print(f"| multiple choice, {args.questions} questions x 4 choices | {median['theseus']:.2f} s | "
          f"{median['lm-eval']:.2f} s | {ratio:.2f}x | >= {TARGET:g}x | {'yes' if ratio >= TARGET else 'NO'} |")


if __name__ == "__main__":
    main()
