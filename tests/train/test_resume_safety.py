"""Issue 15, items 6, 7, 11 and 15 on the training side: what a resume of `gpt/train/pretrain`
refuses (checkpoints outside the root, corrupt chunks), the crash leftover it replaces, and
two resumes of one tip. Each test copies one tiny trained root (2 steps, checkpoint at seq 2)."""

from __future__ import annotations

import glob
import os
import shutil

import pytest

from tests.train._helpers import config, tree_hash, write_dataset
from theseus.audit import audit
from theseus.quick import quick
from theseus.store import Node, Store
from theseus.store import writer as writer_module
from theseus.store.claim import ResumeConflict
from theseus.train import checkpoint as ckpt

STEP_TOKENS = 8 * 32


def _tiny(steps: int) -> dict:
    return config(training={"tokens": STEP_TOKENS * steps},
                  logging={"report_interval": 1, "checkpoint_interval": 2, "validation_interval": 100})


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> tuple[str, str]:
    """(root, nonce) of a run trained 2 steps, its checkpoint at seq 2 the lineage's tip."""
    root = str(tmp_path_factory.mktemp("trained") / "root")
    write_dataset(root)
    with quick(root) as q:
        q.build("gpt/train/pretrain", "safe").config.merge_with(_tiny(2))
        job = q.create()
        job()
    return root, job.node.nonce


@pytest.fixture
def copy(trained, tmp_path) -> tuple[str, str, Node]:
    """A fresh copy of the trained root under tmp_path/root: (root, nonce, tip with its checkpoint)."""
    root = str(tmp_path / "root")
    shutil.copytree(trained[0], root)
    tip = Store(root).find().nonce(trained[1]).checkpoint().last()
    assert tip.seq == 2
    return root, trained[1], tip


def _resume(root: str, nonce: str, steps: int | None = None, **kwargs):
    """A created (not run) job resumed from the run's last checkpoint."""
    q = quick(root)
    q.find().nonce(nonce).checkpoint().resume(**kwargs)
    if steps is not None:
        q.config.training.tokens = STEP_TOKENS * steps
    return q.create()


# -- item 6: a checkpoint outside the root ---------------------------------------------


@pytest.mark.parametrize("path", ["../outside_ckpt", "objects/../../outside_ckpt"])
def test_resume_refuses_a_checkpoint_path_outside_the_root(copy, tmp_path, path):
    root, nonce, tip = copy
    shutil.copytree(f"{root}/objects/{tip.id}", tmp_path / "outside_ckpt")  # a real checkpoint, outside
    with Store(root).writer() as w:  # a record a stranger's root may hold (the public writer refuses it)
        w._commit(tip, writer_module._CHECKPOINT, (path,))
    with pytest.raises(ValueError) as e:
        _resume(root, nonce)
    assert f"checkpoint path {path!r} is not a plain path inside the root" in str(e.value)
    assert tip.id in str(e.value) and "not followed" in str(e.value)


def test_resume_refuses_a_linked_checkpoint_folder(copy, tmp_path):
    root, nonce, tip = copy
    folder = f"{root}/objects/{tip.id}"
    shutil.move(folder, tmp_path / "outside_ckpt")
    os.symlink(tmp_path / "outside_ckpt", folder)  # the record is the genuine one
    with pytest.raises(ValueError, match="leads outside the root through a link"):
        _resume(root, nonce)
    assert any(p.kind == "bad-checkpoint-path" for p in audit(root, verify_checksums=False).errors)


# -- item 11: checksums verified on resume ----------------------------------------------


def test_resume_verifies_checksums_unless_told_not_to(copy):
    root, nonce, tip = copy
    chunk = sorted(glob.glob(f"{root}/objects/{tip.id}/checkpoint/params/**/c/**/*", recursive=True))
    chunk = [c for c in chunk if os.path.isfile(c)][0]
    data = bytearray(open(chunk, "rb").read())
    data[0] ^= 0x01
    with open(chunk, "wb") as f:
        f.write(data)
    with pytest.raises(ValueError, match=f"corrupt file .*{os.path.basename(chunk)}.*sha256"):
        _resume(root, nonce)
    job = _resume(root, nonce, verify=False)  # the opt-out restores what is there
    assert job.trainer.step == 2


# -- item 7: a complete checkpoint left by a crash before its record ----------------------


def test_resume_replaces_a_complete_checkpoint_no_record_references(copy):
    root, nonce, tip = copy
    store = Store(root)
    crashed = Node(tip.name, nonce, 4)  # the next checkpoint of the lineage: its files and MANIFEST, no record
    import jax.numpy as jnp

    ckpt.save(store.objects(crashed), {"left": jnp.zeros(3)})
    assert ckpt.is_complete(store.objects(crashed))

    job = _resume(root, nonce, steps=4)
    job()
    assert store.record(crashed).get("_checkpoint") == f"objects/{crashed.id}"
    restored, _ = ckpt.restore(store.objects(crashed), job.trainer.abstract_state)
    assert tree_hash(restored) == tree_hash(job.trainer.state)  # the folder now holds this run's state
    assert audit(root).ok


# -- item 15: two resumes of one tip --------------------------------------------------------


def test_two_resumes_of_the_same_tip_only_one_continues(copy):
    root, nonce, tip = copy
    store = Store(root)
    first, second = _resume(root, nonce, steps=4), _resume(root, nonce, steps=4)  # both see the tip
    first()
    written = len(store.find().nonce(nonce).all())
    with pytest.raises(ResumeConflict, match=f"cannot continue {tip.name}:{nonce} at seq 3"):
        second()
    assert len(store.find().nonce(nonce).all()) == written  # the refused one wrote nothing new
    run = store.run_record(nonce)
    assert run["_status"] == "finished" and run.get("_error") is None
    assert [n.seq for n in store.find().nonce(nonce).checkpoint().all()] == [2, 4]
    assert audit(root).ok
