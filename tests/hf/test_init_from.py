"""``training.init_from``: a training job started from another checkpoint's parameters, on a new lineage
whose first node's parent is that node, step 0 and a fresh optimizer; the architecture comes from the source,
and an override that changes a parameter's shape is an error naming the key."""

from __future__ import annotations

import numpy as np
import pytest

from tests.train._helpers import config, pretrain
from theseus.quick import quick
from theseus.store import Store


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("init-from"))
    last = pretrain(root, "base", 3, checkpoint_interval=3, report_interval=1)
    return root, last


def _restored_params(root, node):
    from theseus.replay.restore import restored_trainer

    trainer = restored_trainer(root, node)
    try:
        return {k: np.asarray(v) for k, v in trainer.params["blocks_0"]["mlp"]["c_fc"].items()}, trainer.step
    finally:
        trainer.close()


def test_init_from_starts_a_new_lineage_under_the_source_from_its_parameters(source):
    root, last = source
    with quick(root) as q:
        q.build("gpt/train/pretrain", "continued").config.merge_with(config(
            architecture={"n_embd": 2048, "n_layers": 32, "n_head": 16},  # the defaults: taken from the source
            training={"tokens": 8 * 32 * 2, "init_from": last.nonce}, logging={"report_interval": 1}))
        job = q.create()
        assert job.node.seq == 0 and job.node.parent == last.id and job.node.nonce != last.nonce
        assert job.trainer.step == 0
        assert int(job.config.architecture.n_embd) == 32  # the source's architecture
        source_params, _ = _restored_params(root, last)
        started = np.asarray(job.trainer.params["blocks_0"]["mlp"]["c_fc"]["kernel"])
        assert np.array_equal(started, source_params["kernel"])
        mu = job.trainer.state["opt_state"]
        assert all(float(np.abs(np.asarray(leaf)).max()) == 0.0 for leaf in __import__("jax").tree.leaves(mu)
                   if np.asarray(leaf).dtype.kind == "f")  # a fresh optimizer
        end = job()
    store = Store(root)
    first = store.find().nonce(end.nonce).seq(0).first()
    assert first.parent == last.id
    assert store.record(end)["train/step"] == 2


def test_an_override_that_changes_a_parameter_shape_is_an_error_naming_the_key(source):
    root, last = source
    with quick(root) as q:
        q.build("gpt/train/pretrain", "wider").config.merge_with(config(
            training={"init_from": last.id}, architecture={"n_embd": 64}))
        with pytest.raises(ValueError, match=r"architecture\.n_embd=64 changes the shape"):
            q.create()
    assert Store(root).find().name("general.default.wider").all() == []


def test_an_override_that_keeps_the_shapes_is_kept(source):
    root, last = source
    with quick(root) as q:
        q.build("gpt/train/pretrain", "dropout").config.merge_with(config(
            training={"init_from": last.nonce}, architecture={"dropout": 0.1}))
        job = q.create()
        assert job.config.architecture.dropout == 0.1 and job.node.parent == last.id
        job.close()


def test_an_unknown_source_is_an_error_naming_the_setting(source):
    root, _ = source
    with quick(root) as q:
        q.build("gpt/train/pretrain", "nowhere").config.merge_with(config(training={"init_from": "abcdef"}))
        with pytest.raises(ValueError, match="training.init_from=abcdef"):
            q.create()
