"""kill -9 a training job mid-run: every referenced checkpoint is complete, and the run resumes from it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from tests.train._helpers import write_dataset
from theseus.quick import quick
from theseus.store import Store
from theseus.train import checkpoint as ckpt

TRAIN = r"""
import sys
from tests.train._helpers import config
from theseus.quick import quick
root = sys.argv[1]
cfg = config(training={"tokens": 8 * 32 * 400}, logging={"report_interval": 1, "checkpoint_interval": 3,
                                                         "validation_interval": 1000})
with quick(root) as q:
    q.build("gpt/train/pretrain", "crashy")
    for section, values in cfg.items():
        for key, value in values.items():
            setattr(q.config[section], key, value)
    q()
"""


@pytest.mark.slow
def test_kill_dash_nine_then_resume(tmp_path):
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    write_dataset(tmp_path)
    store = Store(tmp_path)
    for trial, extra in enumerate((0.0, 0.7, 1.9)):
        proc = subprocess.Popen([sys.executable, "-c", TRAIN, str(tmp_path)], cwd=repo,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 240
        while time.time() < deadline and len(store.find().spec(run="crashy").checkpoint().all()) <= trial:
            time.sleep(0.2)
        time.sleep(extra)  # kill at different moments: between saves, during one
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert store.find().spec(run="crashy").checkpoint().all(), "no checkpoint was committed before the kill"

    # no node points at a partial checkpoint
    for node in store.find().spec(run="crashy").checkpoint().all():
        assert ckpt.is_complete(store.objects(node)), node
    # no run finished; the last committed checkpoint resumes and the run completes
    assert store.find().spec(run="crashy").finished().all() == []
    with quick(str(tmp_path)) as q:
        q.find().spec(run="crashy").checkpoint().sort("train/tokens").resume()
        q.config.training.tokens = 8 * 32 * (
            q.find().spec(run="crashy").checkpoint().sort("train/tokens").last().seq + 3)
        job = q.build().create()
        start = job.trainer.step
        last = job()
    assert last.seq - (0 if last.nonce != job.base.nonce else start) >= 1
    assert store.find().nonce(last.nonce).finished().all()
