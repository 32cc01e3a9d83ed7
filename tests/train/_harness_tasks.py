"""lm-eval tasks of the harness tests, offline: YAML files over local jsonl, in the public formats.

Multiple-choice questions are rows of ARC's Hugging Face columns (``question``,
``choices: {text, label}``, ``answerKey``) and their task is lm-eval's own ``arc_easy``
with the dataset swapped for the local file; documents for perplexity are rows with a
``text`` column, scored as lm-eval's ``wikitext`` scores its pages. Only metrics in
lm-eval's own registry (acc, acc_norm, bits_per_byte, ...): others load from the hub.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import yaml

LABELS = "ABCD"


def sums(n: int, seed: int = 0) -> list[dict]:
    """``n`` questions "a+b" (one digit each) in ARC's columns: four choices, one of them the sum."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        a, b = rng.randrange(10), rng.randrange(10)
        wrong = rng.sample([c for c in range(19) if c != a + b], 3)
        choices = [str(c) for c in [a + b, *wrong]]
        rng.shuffle(choices)
        rows.append({"id": f"sum-{i}", "question": f"{a}+{b}", "choices": {"text": choices, "label": list(LABELS)},
                     "answerKey": LABELS[choices.index(str(a + b))]})
    return rows


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def _task(folder: Path, name: str, rows: list[dict], settings: dict) -> Path:
    data = write_jsonl(folder / f"{name}.jsonl", rows)
    spec = {"task": name, "dataset_path": "json", "dataset_kwargs": {"data_files": {"test": str(data)}},
            "test_split": "test", **settings, "metadata": {"version": 1.0}}
    (folder / f"{name}.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    return folder


def multiple_choice_task(folder: Path, name: str, rows: list[dict]) -> Path:
    """``folder`` (an include path) holding task ``name``: lm-eval's ``arc_easy`` over ``rows`` in a local jsonl."""
    return _task(folder, name, rows, {
        "output_type": "multiple_choice",
        "doc_to_text": "Question: {{question}}\nAnswer:",
        "doc_to_target": "{{choices.label.index(answerKey)}}",
        "doc_to_choice": "{{choices.text}}",
        "metric_list": [{"metric": m, "aggregation": "mean", "higher_is_better": True} for m in ("acc", "acc_norm")],
    })


def addition_questions(n: int, seed: int = 0) -> list[dict]:
    """``n`` questions "a+b=" (one digit each) in the columns of theseus's ``multiple-choice`` part (``context``,
    ``choices``, ``label``): the sum and three near misses, as the addition dataset writes sums."""
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        a, b = rng.randrange(10), rng.randrange(10)
        choices = [str(c) for c in [a + b, *rng.sample([c for c in range(a + b - 3, a + b + 4) if c >= 0
                                                          and c != a + b], 3)]]
        rng.shuffle(choices)
        rows.append({"context": f"{a}+{b}=", "choices": choices, "label": choices.index(str(a + b))})
    return rows


def choice_task(folder: Path, name: str, rows: list[dict]) -> Path:
    """``folder`` holding task ``name`` over rows of theseus's ``multiple-choice`` columns (the choices follow the
    context directly: no delimiter)."""
    return _task(folder, name, rows, {
        "output_type": "multiple_choice",
        "doc_to_text": "{{context}}",
        "doc_to_target": "{{label}}",
        "doc_to_choice": "{{choices}}",
        "target_delimiter": "",
        "metric_list": [{"metric": m, "aggregation": "mean", "higher_is_better": True} for m in ("acc", "acc_norm")],
    })


def perplexity_task(folder: Path, name: str, texts: list[str]) -> Path:
    """``folder`` holding task ``name``: the rolling log-likelihood of each text (lm-eval's ``wikitext`` metrics)."""
    return _task(folder, name, [{"text": t} for t in texts], {
        "output_type": "loglikelihood_rolling",
        "doc_to_text": "",
        "doc_to_target": "{{text}}",
        "metric_list": [{"metric": m} for m in ("word_perplexity", "byte_perplexity", "bits_per_byte")],
    })


def offline(monkeypatch, cache: Path) -> None:
    """No hub for Hugging Face ``datasets`` / ``huggingface_hub`` (lm-eval loads its data through them), and their
    caches under ``cache``: set in the environment and in the already imported libraries' settings."""
    import datasets.config
    import huggingface_hub.constants

    for name in ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE"):
        monkeypatch.setenv(name, "1")
    monkeypatch.setenv("HF_HOME", str(cache))
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", cache / "datasets")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
