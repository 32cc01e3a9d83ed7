"""`gpt/train/pretrain` through the quick API: nodes per step, checkpoints, resume, branch, the seed's replay."""

from __future__ import annotations

import os

import pytest

from tests.train._helpers import config, write_dataset
from theseus.model.layers.mlp import MLP
from theseus.quick import quick
from theseus.store import EmptyResult, Store


def create(q, run_name, steps, **logging):
    """A pretrain job of ``steps`` tiny steps built in the session ``q``."""
    cfg = config(training={"tokens": 8 * 32 * steps}, logging={"report_interval": 1, "checkpoint_interval": 4,
                                                               "validation_interval": 4, **logging})
    q.build("gpt/train/pretrain", run_name).config.merge_with(cfg)
    return q.create()


def train(root, steps=8, **logging):
    with quick(root) as q:
        job = create(q, "train-gpt", steps, **logging)
        first = job.node
        last = job()
    return first, last


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("jobroot"))
    write_dataset(root)
    first, last = train(root)
    return root, first, last


def test_every_step_is_a_node_and_checkpoints_commit_after_their_files(run):
    root, first, last = run
    store = Store(root)
    assert last.seq == 8 and last.nonce == first.nonce
    rows = store.find().nonce(first.nonce).has("train/loss").select(keys=["train/loss", "train/tokens"])
    assert [r["train/tokens"] for r in rows] == [8 * 32 * k for k in range(1, 9)]
    ckpts = store.find().nonce(first.nonce).checkpoint().all()
    assert [n.seq for n in ckpts] == [4, 8]
    for node in ckpts:
        assert os.path.exists(os.path.join(store.objects(node), "MANIFEST.json"))
    assert store.find().job("gpt/train/pretrain").finished().all()
    assert store.find().nonce(first.nonce).has("val/loss").all()


def test_resume_a_middle_checkpoint_replays_the_same_losses_on_a_branch(run):
    root, first, _ = run
    store = Store(root)
    straight = {r["seq"]: r["train/loss"]
                for r in store.find().nonce(first.nonce).has("train/loss").frame().collect().iter_rows(named=True)}
    with quick(root) as q:
        (q.find().nonce(first.nonce).checkpoint().where("train/tokens", "<=", 8 * 32 * 4)
         .sort("train/loss", ascending=False).resume())
        assert q.config.training.tokens == 8 * 32 * 8  # the run's recorded config
        job = q.build().create()
        batch = job.batch()
        assert batch["x"].shape == (8, 32) and (job.batch()["x"] == batch["x"]).all()
        assert job.find(MLP) == [("blocks_0", "mlp"), ("blocks_1", "mlp")]
        layer, inputs = job.debug(("blocks_1", "mlp"))
        assert layer.c_fc(inputs.x).shape[-1] == 4 * 32
        layer.close()
        branch_first = job.node
        job()
    assert branch_first.nonce != first.nonce and branch_first.parent == first.next().next().next().next().id
    resumed = store.find().nonce(branch_first.nonce).has("train/loss").select(keys=["train/loss"])
    assert [r["train/loss"] for r in resumed] == [straight[s] for s in range(5, 9)]  # bitwise: same topology


def test_resume_needs_a_checkpoint(run):
    root, first, _ = run
    with quick(root) as q:
        with pytest.raises(ValueError, match="no committed checkpoint"):
            q.find().nonce(first.nonce).seq(3).resume()
            q.build().create()
        with pytest.raises(EmptyResult):
            q.find().nonce("abcdef").resume()


def test_bad_config_fails_before_anything_is_written(tmp_path):
    write_dataset(tmp_path)
    store = Store(tmp_path)
    with quick(str(tmp_path)) as q:
        q.build("gpt/train/pretrain", "bad")
        q.config.architecture.n_embd = 30
        q.config.architecture.n_head = 4
        with pytest.raises(ValueError, match="n_embd"):
            q.create()
        q.build("gpt/train/pretrain", "bad")
        q.config.data.dataset = "nothere"
        with pytest.raises(FileNotFoundError, match="data/tokenize/nothere"):
            q.create()
        with pytest.raises(Exception, match="batch_sise"):
            q.config.training.batch_sise = 3
    assert store.find().all() == []


def test_ticking_a_created_job_starts_its_lineage_with_the_job_record(run, tmp_path):
    root, _, _ = run
    with quick(root) as q:
        job = create(q, "ticked", 4)
        assert job.tick().seq == 1 and job.tick().seq == 2
        job.close()
    store = Store(root)
    nodes = store.find().nonce(job.node.nonce).all()
    assert [n.seq for n in nodes] == [0, 1, 2]
    assert store.find().nonce(job.node.nonce).job("gpt/train/pretrain").all()  # the job record at seq 0
    assert [n.seq for n in store.find().nonce(job.node.nonce).has("train/loss").all()] == [1, 2]
