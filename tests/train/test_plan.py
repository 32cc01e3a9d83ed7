"""The training plan alone: batch split, accumulation, steps, tokens and its log lines, without a device."""

from __future__ import annotations

import pytest

from theseus.train.config import load_config
from theseus.train.plan import TrainingPlan, micro_batch_candidates
from theseus.train.recipe import Recipe


def cfg(**training):
    return load_config({"architecture": {"block_size": 64},
                        "training": {"batch_size": 32, "tokens": 32 * 64 * 100, **training}}, Recipe.Config)


def test_fixed_micro_batch_splits_into_accumulation():
    plan = TrainingPlan.build(cfg(per_device_batch_size=2), data_parallel=4, local_replicas=2)
    assert (plan.micro_rows, plan.accumulation, plan.total_steps, plan.tokens) == (8, 4, 100, 32 * 64 * 100)
    assert plan.lines() == [
        "BATCHING | 2 batchsize/node * (2 local * 2 prox = 4 dp) * 4 accumulation = 32 batchsize",
        "STEPS | 400 micro batches // 4 accumulation = 100 steps",
        "TOKENS | 100 steps * 32 batchsize * 64 blocksize = 204800 tokens",
    ]


def test_probe_chooses_among_the_candidates_that_split_the_batch(monkeypatch):
    monkeypatch.setenv("THESEUS_AUTOBATCH_SIZE_CANDIDATES", "16 12 8 4")
    seen = []
    plan = TrainingPlan.build(cfg(per_device_batch_size=-1), data_parallel=2,
                              probe=lambda candidates: seen.append(candidates) or candidates[-1])
    assert seen == [[16, 8, 4]] and plan.per_device_batch_size == 4 and plan.accumulation == 4
    assert TrainingPlan.build(cfg(per_device_batch_size=-1), data_parallel=2).per_device_batch_size == 16


def test_a_batch_that_does_not_split_is_refused_naming_the_numbers():
    with pytest.raises(ValueError, match=r"per_device_batch_size 3 x 2 data-parallel devices = 6 rows \(32 % 6 = 2\)"):
        TrainingPlan.build(cfg(per_device_batch_size=3), data_parallel=2)
    with pytest.raises(ValueError, match="does not split into micro-batches of any autobatch candidate"):
        micro_batch_candidates(30, 4, candidates=(16, 8, 4))
