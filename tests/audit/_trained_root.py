"""A root with real training runs for the audit and ui tests, built once per session.

Runs in it: ``main`` (6 steps, checkpoints at seq 3 and 6, then resumed at its tip
with a longer token budget: seq 7-8, checkpoint at 8), ``branch`` (from main's
seq 3 with another learning rate) and ``failed`` (a job that raises). Tests copy
it with :func:`copy_root` before changing anything. The fixtures live in this module, not in a
conftest, so that one import registers the ``test/audit/fail`` job whichever folders a run collects.
"""

from __future__ import annotations

import dataclasses
import json
import shutil

import pytest

from tests.train._helpers import VOCAB, write_dataset
from tests.train.conftest import _compilation_cache  # noqa: F401  (a session fixture: compiled once)
from theseus.jobs import Job, job
from theseus.quick import quick
from theseus.store.fs import write_atomic

STEP_TOKENS = 8 * 16
TINY = {
    "architecture": {"n_embd": 16, "n_layers": 1, "n_head": 2, "block_size": 16, "vocab_size": VOCAB},
    "training": {"batch_size": 8, "per_device_batch_size": 8, "tokens": STEP_TOKENS * 6, "validation_steps": 1},
    "logging": {"report_interval": 1, "checkpoint_interval": 3, "validation_interval": 3},
}


@dataclasses.dataclass
class FailConfig:
    message: str = "boom"


@job("test/audit/fail", "Writes one node, then raises (audit tests).")
class AlwaysFails(Job):
    Config = FailConfig

    def run(self):
        self.writer.write(self.node, {"fail/step": 1})
        self.tick()
        raise RuntimeError(self.config.message)


@dataclasses.dataclass(frozen=True)
class Built:
    root: str
    main: str  # nonces
    branch: str
    failed: str


def _train(root: str) -> str:
    with quick(root) as q:
        q.build("gpt/train/pretrain", "train-gpt")
        for section, values in TINY.items():
            for key, value in values.items():
                q.config[section][key] = value
        job = q.create()
        job()
    return job.node.nonce


@pytest.fixture(scope="session")
def built(tmp_path_factory, _compilation_cache) -> Built:  # noqa: F811
    root = str(tmp_path_factory.mktemp("audit") / "root")
    write_dataset(root, tokens=5000)
    for dtype in ("float32", "bfloat16"):  # the trainer's CPU peak cache: skip measuring it (MFU is not audited)
        write_atomic(f"{root}/meta/cpu_peak/cpu-{dtype}.json", json.dumps({f"cpu/{dtype}": 1e11}).encode())
    main = _train(root)
    with quick(root) as q:  # resume the tip with an edited config: same lineage, seq 7..8
        q.find().nonce(main).checkpoint().resume()
        q.config.training.tokens = STEP_TOKENS * 8
        q.create()()
    with quick(root) as q:  # branch from seq 3 with another learning rate
        q.find().nonce(main).seq(3).branch()
        q.config.optimization.lr = 1e-3
        job = q.create()
        job()
        branch = job.node.nonce
    failing = AlwaysFails.create(root, "broken-run")
    with pytest.raises(RuntimeError, match="boom"):
        failing()
    return Built(root, main, branch, failing.node.nonce)


@pytest.fixture
def copy_root(built, tmp_path):
    """A private copy of the built root (tests corrupt it)."""
    def copy() -> str:
        target = str(tmp_path / "copy")
        shutil.copytree(built.root, target)
        return target

    return copy
