"""Commands that do not train, sample or evaluate answer without importing JAX, Flax, Optax or TensorStore.

Each command runs in a fresh interpreter (an in-process run would see what other tests
imported) over a small root written with the store's writer, and reports the heavy
modules loaded when it exits. A command another change has not added yet is skipped.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.experiment_files import KEY, write_experiment
from theseus.store import Node, Store

pytestmark = pytest.mark.slow  # a fresh interpreter per command
HEAVY = ("jax", "jaxlib", "flax", "optax", "tensorstore")

# Runs ``theseus ARGS...`` (argv after the report path) and writes its exit code and the heavy modules
# loaded to the report; ``ui`` is stopped where it would start serving.
PROGRAM = """
import json, sys
import uvicorn
uvicorn.run = lambda app, **options: None
from theseus.cli import app
try:
    app(sys.argv[2:], prog_name="theseus")
    code = 0
except SystemExit as e:
    code = e.code if isinstance(e.code, int) else 1
heavy = sorted({m.split(".")[0] for m in sys.modules} & set(%r))
json.dump({"code": code, "heavy": heavy}, open(sys.argv[1], "w"))
""" % (HEAVY,)

PART_FILE = '''\
"""A user's part: a loss of their own."""
import dataclasses

from theseus.train.parts import Part, part


@dataclasses.dataclass
class HalfConfig:
    factor: float = 0.5


@part("loss", "my-half-loss", "Half of a loss (a part of the user's own).")
class HalfLoss(Part):
    section = "loss"
    Config = HalfConfig
'''

# (argv with {root}, {nonce}, {other}, {node}, {tmp} placeholders, exit code, text the output holds)
CASES = {
    "help": (["--help"], 0, "parts"),
    "ls": (["ls", "{root}"], 0, "{nonce}"),
    "ls-json": (["ls", "{root}", "--json"], 0, "{nonce}"),
    "show-run": (["show", "{root}", "{nonce}"], 0, "finished"),
    "show-node": (["show", "{root}", "{node}"], 0, "train/loss"),
    "jobs": (["jobs"], 0, "gpt/train/pretrain"),
    "jobs-prefix": (["jobs", "data/tokenize/"], 0, "data/tokenize/pydoc"),
    "jobs-imported": (["--import", "{tmp}/lab/my_experiments.py", "jobs", "mylab"], 0, KEY),
    "parts": (["parts"], 0, "cross-entropy"),
    "parts-kind": (["parts", "optimizer"], 0, "adamw"),
    "parts-imported": (["--import", "{tmp}/lab/my_parts.py", "parts", "loss"], 0, "my-half-loss"),
    "compact": (["compact", "{root}"], 0, ""),
    "audit": (["audit", "{root}"], 0, "no integrity failures"),
    "gc": (["gc", "{root}", "--dry-run"], 0, "would delete 0"),
    "plot": (["plot", "{root}", "{nonce}", "train/loss", "-o", "{tmp}/loss.png"], 0, "wrote"),
    "logs": (["logs", "{root}", "{nonce}"], 1, "no published output"),
    "ui": (["ui", "{root}"], 0, "read-only"),
    "tag": (["tag", "{root}", "{other}", "baseline"], 0, "baseline"),
    "untag": (["untag", "{root}", "{other}", "baseline"], 0, ""),
    "note": (["note", "{root}", "{other}", "a note"], 0, "a note"),
    "hide": (["hide", "{root}", "{other}"], 0, "hidden"),
    "unhide": (["unhide", "{root}", "{other}"], 0, ""),
    "unknown-command": (["nope"], 2, "No such command"),
    "no-root": (["ls", "{tmp}/no-such-root"], 2, "no root"),
    "unknown-run": (["show", "{root}", "ffffff"], 2, ""),
    "unknown-kind": (["parts", "optimiser"], 2, "the kinds are"),
    "unknown-job-prefix": (["jobs", "nothing/"], 2, "no job key starts with"),
    "missing-import": (["--import", "{tmp}/nowhere.py", "jobs"], 2, ""),
}


@pytest.fixture(scope="module")
def small_root(tmp_path_factory):
    """Two finished 3-step runs written with the store's writer (no training), a user's job file and part
    file: the placeholders of ``CASES``."""
    tmp = tmp_path_factory.mktemp("imports")
    store, ends = Store(str(tmp / "root")), []
    for name in ("general.default.one", "general.default.two"):
        node = Node.start(name)
        with store.writer() as w:
            w.job(node, "gpt/train/pretrain", "lr: 0.1")
            for step in range(3):
                node = node.next()
                w.write(node, {"train/loss": 3.0 - step, "train/tokens": 100 * step})
            w.finished(node)
        ends.append(node)
    write_experiment(tmp / "lab")
    (tmp / "lab" / "my_parts.py").write_text(PART_FILE)
    return {"root": str(tmp / "root"), "nonce": ends[0].nonce, "node": ends[0].id, "other": ends[1].nonce,
            "tmp": str(tmp)}


def theseus(args: list[str], tmp) -> tuple[dict, str]:
    """Run ``theseus ARGS`` in a fresh interpreter: its report (exit code, heavy modules) and its output."""
    report = tmp / f"report-{len(list(tmp.iterdir()))}.json"
    done = subprocess.run([sys.executable, "-c", PROGRAM, str(report), *args], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "COLUMNS": "200"})
    assert report.exists(), done.stderr
    return json.loads(report.read_text()), " ".join((done.stdout + done.stderr).split())


@pytest.fixture(scope="module")
def commands(small_root, tmp_path_factory) -> str:
    """The help text listing the commands this build has."""
    report, out = theseus(["--help"], tmp_path_factory.mktemp("help"))
    assert report["code"] == 0, out
    return out


@pytest.mark.parametrize("case", list(CASES))
def test_command_imports_no_jax(case, small_root, commands, tmp_path):
    argv, code, expected = CASES[case]
    if argv[0].isalpha() and argv[0] != "nope" and f" {argv[0]} " not in commands:
        pytest.skip(f"theseus has no {argv[0]} command yet")
    args = [a.format(**small_root) for a in argv]
    report, out = theseus(args, tmp_path)
    assert report["code"] == code, out
    assert expected.format(**small_root) in out
    assert report["heavy"] == [], (f"theseus {' '.join(args)} imported {report['heavy']} (jobs, parts: is "
                                   "theseus/catalog.json up to date? python -m theseus.catalog --check)")


def test_the_check_sees_a_heavy_import(small_root, tmp_path):
    """The same harness reports JAX when a command loads it (here through ``--import`` of a module that does)."""
    (tmp_path / "heavy.py").write_text("import jax\n")
    report, out = theseus(["--import", str(tmp_path / "heavy.py"), "jobs"], tmp_path)
    assert report["code"] == 0, out
    assert "jax" in report["heavy"]
