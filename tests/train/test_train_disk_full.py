"""Training on a root whose disk fills up: the run fails clearly, no node references a partial
checkpoint, and once space is freed it resumes from its last committed checkpoint and completes."""

from __future__ import annotations

import json
import os

import pytest
from typer.testing import CliRunner

from tests.tmpfs import resize, small_tmpfs
from tests.train._helpers import config, write_dataset
from theseus.cli import app
from theseus.quick import quick
from theseus.store import Store
from theseus.train import checkpoint as ckpt

# measured on this tiny model (tmpfs counts whole pages): the dataset takes 168 KiB, one
# checkpoint 1044 KiB, the log and meta/ under 32 KiB. 1.75 MiB holds the dataset and the
# step-5 checkpoint but not the step-10 one.
SIZE, BIGGER = 1792 << 10, 16 << 20
CFG = config(training={"tokens": 8 * 32 * 10, "validation": False},
             logging={"report_interval": 5, "checkpoint_interval": 5, "validation_interval": 1000})
NO_SPACE = ("No space left", "ENOSPC", "errno 28", "error 28")


def _configure(q) -> None:
    for section, values in CFG.items():
        for key, value in values.items():
            setattr(q.config[section], key, value)


def _names_no_space(text: str) -> bool:
    return any(words.lower() in text.lower() for words in NO_SPACE)


@pytest.mark.slow
def test_disk_full_fails_clearly_then_resumes_from_the_last_checkpoint(tmp_path):
    with small_tmpfs(tmp_path / "disk", SIZE) as root:
        write_dataset(root)
        # the CPU's matmul peak (for train/mfu), as a first run caches it: not measured again (seconds)
        os.makedirs(f"{root}/meta/cpu_peak")
        with open(f"{root}/meta/cpu_peak/cpu-bfloat16.json", "w") as f:
            json.dump({"cpu/bfloat16": 1e11}, f)
        store = Store(root)
        with quick(root) as q:
            q.build("gpt/train/pretrain", "diskfull")
            _configure(q)
            job = q.create()
            with pytest.raises(Exception) as failure:
                job()
        error = failure.value
        chain = []
        while error is not None:
            chain.append(f"{type(error).__name__}: {error}")
            error = error.__cause__ or error.__context__
        assert _names_no_space(" | ".join(chain)), chain

        # only the step-5 checkpoint was committed; no node references a partial one
        committed = store.find().spec(run="diskfull").checkpoint().all()
        assert [n.seq for n in committed] == [5]
        for node in committed:
            assert ckpt.is_complete(store.objects(node)), node
        assert store.find().spec(run="diskfull").finished().all() == []
        status = store.run_record(committed[0].nonce)
        if status.get("_status") == "failed":  # recorded when the disk had room for the record
            assert _names_no_space(status["_error"]), status["_error"]

        # space freed: the last committed checkpoint resumes (its lineage goes on, or a branch starts
        # when records past it were published) and the run completes
        resize(root, BIGGER)
        with quick(root) as q:
            q.find().spec(run="diskfull").checkpoint().sort("train/tokens").resume()
            job = q.build().create()
            assert job.trainer.step == 5
            last = job()
            assert job.trainer.step == 10
        assert store.record(last)["train/tokens"] == CFG["training"]["tokens"]
        assert store.find().nonce(last.nonce).finished().all()
        assert store.find().spec(run="diskfull").checkpoint().sort("train/tokens").last() == last
        for node in store.find().checkpoint().all():
            assert ckpt.is_complete(store.objects(node)), node
        audit = CliRunner().invoke(app, ["audit", root])  # the partial checkpoint is a warning at most
        assert audit.exit_code == 0, audit.output


@pytest.mark.slow
def test_a_checkpoint_is_recorded_before_the_next_save_starts(make_trainer, tmp_path):
    """The ordering the test above needs, made deterministic: checkpoint k's commit notification (the
    job writes its record there) is delivered before checkpoint k+1 starts taking space, even when k
    commits after k+1 is due. It used to come after, so a disk that k+1 filled refused the record of
    k and left no committed checkpoint to resume from."""
    events = []
    pad = bytes(32 << 20)  # a large sidecar: the first save takes far longer than starting the second
    trainer = make_trainer(
        CFG, peak_flops=1e12,
        sidecars=lambda step: events.append("save") or ({"pad.bin": pad} if len(events) == 1 else {}),
        on_checkpoint=lambda step, folder: events.append(f"committed {os.path.basename(folder)}"))
    trainer.save(str(tmp_path / "first"))
    trainer.save(str(tmp_path / "second"))
    trainer.wait()
    assert events == ["save", "committed first", "save", "committed second"]
