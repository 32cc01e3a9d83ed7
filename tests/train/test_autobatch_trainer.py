"""per_device_batch_size=-1: the trainer compiles its real step per candidate and keeps the largest that fits."""

from __future__ import annotations

from tests.train._helpers import ListLog, config


def test_autobatch_picks_smaller_size_under_tight_budget(make_trainer, monkeypatch):
    monkeypatch.setenv("THESEUS_AUTOBATCH_SIZE_CANDIDATES", "8 4")
    cfg = config(training={"per_device_batch_size": -1})

    roomy = make_trainer(cfg, memory_budget_bytes=1 << 40)
    assert roomy.per_device_batch_size == 8 and roomy.accumulation == 1
    ((size, big, fits),) = roomy.autobatch_trials
    assert size == 8 and fits and big > 0

    log = ListLog()
    tight = make_trainer(cfg, memory_budget_bytes=big - 1, log=log)
    sizes = [s for s, _, _ in tight.autobatch_trials]
    assert sizes == [8, 4] and tight.per_device_batch_size == 4
    assert [f for _, _, f in tight.autobatch_trials] == [False, True]
    assert tight.autobatch_trials[1][1] < big
    assert tight.accumulation == 2
    assert log.messages(f"AUTOBATCH | per_device_batch_size={tight.per_device_batch_size}")
    assert log.messages(f"BATCHING | {tight.per_device_batch_size} batchsize/node")
    # the chosen compiled step is the one that runs
    metrics = tight.tick()
    assert metrics["train/loss"] > 0 and tight.step == 1


def test_autobatch_skips_candidates_that_do_not_split_the_batch(make_trainer, monkeypatch):
    monkeypatch.setenv("THESEUS_AUTOBATCH_SIZE_CANDIDATES", "16 12 4")
    trainer = make_trainer(config(training={"per_device_batch_size": -1}), memory_budget_bytes=1 << 40)
    assert trainer.per_device_batch_size == 4 and trainer.accumulation == 2
    assert [s for s, _, _ in trainer.autobatch_trials] == [4]
