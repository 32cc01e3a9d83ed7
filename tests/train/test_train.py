"""Training loop: loss falls, report/validation/checkpoint cadence, restore == straight run, batch/tick."""

from __future__ import annotations

import json
import os

import jax
import numpy as np
import pytest

from tests.train._helpers import ListLog, config, tree_hash

TRAIN_KEYS = {"train/loss", "train/lr", "train/grad_norm", "train/tokens", "train/step", "train/mfu",
              "train/tokens_per_second"}


def test_train_30_steps_loss_falls_with_cadence(make_trainer, tmp_path):
    reports, checkpoints, step_at_report = [], [], []
    trainer = None

    def on_report(step, metrics):
        reports.append((step, dict(metrics)))
        step_at_report.append(trainer.step)

    log = ListLog()
    trainer = make_trainer(
        on_report=on_report,
        on_checkpoint=lambda step, folder: checkpoints.append((step, folder)),
        folder_fn=lambda step: str(tmp_path / "objects" / f"step-{step}"),
        log=log,
    )
    assert trainer.total_steps == 30 and trainer.accumulation == 2
    trainer.train()
    assert trainer.step == 30

    assert [s for s, _ in reports] == [5, 10, 15, 20, 25, 30]
    for step, metrics in reports:
        expected = TRAIN_KEYS | ({"val/loss", "val/fineweb/loss"} if step % 10 == 0 else set())
        assert set(metrics) == expected, (step, sorted(metrics))
        assert metrics["train/tokens"] == step * 8 * 32
        assert metrics["train/tokens_per_second"] > 0 and metrics["train/mfu"] > 0
        assert all(isinstance(v, (int, float)) for v in metrics.values())
    first, last = reports[0][1]["train/loss"], reports[-1][1]["train/loss"]
    assert last < first - 0.5 and last < np.log(256) - 0.8, (first, last)
    assert reports[-1][1]["val/loss"] < reports[0][1]["train/loss"]
    # asynchronous reports: step k's metrics arrive while step k+1 is already enqueued
    assert step_at_report[:-1] == [s + 1 for s, _ in reports[:-1]]
    assert step_at_report[-1] == 30

    assert [s for s, _ in checkpoints] == [10, 20, 30]
    for step, folder in checkpoints:
        assert folder == str(tmp_path / "objects" / f"step-{step}")
        manifest = json.loads(open(os.path.join(folder, "MANIFEST.json")).read())
        names = {f["path"] for f in manifest["files"]}
        assert {"rng.json", "config.yaml"} <= names
        assert json.loads(open(os.path.join(folder, "rng.json")).read())["key"] == [0, 0]

    assert log.messages("BATCHING | 4 batchsize/node * (1 local * 1 prox = 1 dp) * 2 accumulation = 8 batchsize")
    assert log.messages("STEPS | 60 micro batches // 2 accumulation = 30 steps")
    assert log.messages("TOKENS | 30 steps * 8 batchsize * 32 blocksize = 7680 tokens")
    topology = log.messages("TOPOLOGY | ")[0]
    assert json.loads(topology.split("|", 1)[1])["shard"] == {"tp": 1, "fsdp": False, "zero": True}
    assert any(m.startswith("TRAIN | 30/30 | loss ") for m in log.messages())


def test_restore_then_continue_equals_straight_run(make_trainer, tmp_path):
    # dropout > 0 so the per-step random keys matter
    cfg = config(architecture={"dropout": 0.1}, training={"tokens": 8 * 32 * 6},
                 logging={"report_interval": 1, "checkpoint_interval": 3, "validation_interval": 100})
    straight_losses, folders = {}, {}
    straight = make_trainer(cfg, seed=5,
                            on_report=lambda s, m: straight_losses.__setitem__(s, m["train/loss"]),
                            on_checkpoint=lambda s, f: folders.__setitem__(s, f),
                            folder_fn=lambda s: str(tmp_path / "a" / f"step-{s}"))
    straight.train()
    assert sorted(folders) == [3, 6]
    straight_params = tree_hash(straight.state["params"])
    straight_state = tree_hash(straight.state)

    resumed_losses, resumed_ckpts = {}, []
    resumed = make_trainer(cfg, seed=999,  # the seed of a fresh run; the checkpoint's rng.json wins
                           on_report=lambda s, m: resumed_losses.__setitem__(s, m["train/loss"]),
                           on_checkpoint=lambda s, f: resumed_ckpts.append(s),
                           folder_fn=lambda s: str(tmp_path / "b" / f"step-{s}"))
    resumed.restore(folders[3])
    assert resumed.step == 3 and resumed.seed == 5
    probe = make_trainer(cfg)
    probe.step = 3
    for key in ("x", "y", "padding_mask"):
        assert np.array_equal(resumed.batch()[key], probe.batch()[key])
    resumed.train()
    assert resumed_ckpts == [6]
    assert {s: resumed_losses[s] for s in (4, 5, 6)} == {s: straight_losses[s] for s in (4, 5, 6)}
    assert tree_hash(resumed.state["params"]) == straight_params
    assert tree_hash(resumed.state) == straight_state

    # the building block of `theseus verify`: replay from the node, compare with the logged losses
    from theseus.replay.verify import compare, replay

    again = make_trainer(cfg, on_report=lambda s, m: pytest.fail("replay must not report"))
    again.restore(folders[3])
    verdict = compare(straight_losses, replay(again, 3))
    assert verdict.status == "bitwise" and verdict.steps == [4, 5, 6]


def test_train_until_and_resume_in_place(make_trainer, tmp_path):
    cfg = config(logging={"report_interval": 3, "validation_interval": 100})
    reports = []
    trainer = make_trainer(cfg, on_report=lambda s, m: reports.append(s),
                           folder_fn=lambda s: str(tmp_path / f"s{s}"))
    trainer.train(until=2)
    assert trainer.step == 2 and reports == [2]  # the last step of a train() call always reports
    assert os.path.exists(tmp_path / "s2" / "MANIFEST.json")  # and checkpoints
    trainer.train(until=4)
    assert trainer.step == 4 and reports == [2, 3, 4]
    assert os.path.exists(tmp_path / "s4" / "MANIFEST.json") and not os.path.exists(tmp_path / "s3")
    trainer.train(until=4)  # nothing left to do
    assert trainer.step == 4 and reports == [2, 3, 4]


def test_batch_and_tick_semantics(make_trainer):
    reports = []
    trainer = make_trainer(on_report=lambda s, m: reports.append((s, m)))
    first = trainer.batch()
    assert trainer.batch() is first
    assert first["x"].shape == (8, 32) and first["x"].dtype == np.int32
    assert np.array_equal(first["y"][:, :-1], first["x"][:, 1:])
    assert np.array_equal(first["x"], trainer.loader.batch(0)["x"])

    metrics = trainer.tick()
    assert trainer.step == 1 and int(jax.device_get(trainer.state["step"])) == 1
    assert set(metrics) == TRAIN_KEYS and metrics["train/tokens"] == 8 * 32
    assert reports == [(1, metrics)]
    second = trainer.batch()
    assert second is not first and not np.array_equal(second["x"], first["x"])
    assert np.array_equal(second["x"], trainer.loader.batch(1)["x"])
    # a pure function of (data, seed, batch size, block size, step): a fresh trainer agrees
    other = make_trainer()
    other.step = 1
    assert np.array_equal(other.batch()["x"], second["x"])
    trainer.tick()
    assert trainer.step == 2 and [s for s, _ in reports] == [1, 2]


def test_tick_matches_train(make_trainer):
    cfg = config(logging={"report_interval": 1, "validation_interval": 100})
    a_losses = []
    a = make_trainer(cfg, on_report=lambda s, m: a_losses.append(m["train/loss"]))
    a.train(until=3)
    b = make_trainer(cfg)
    b_losses = [b.tick()["train/loss"] for _ in range(3)]
    assert a_losses == b_losses
    assert tree_hash(a.state) == tree_hash(b.state)


def test_validate_and_save_callbacks(make_trainer, tmp_path):
    commits = []
    trainer = make_trainer(on_checkpoint=lambda s, f: commits.append((s, f)),
                           sidecars=lambda step: {"job.json": json.dumps({"step": step})})
    loss = trainer.validate()
    assert np.isfinite(loss) and loss == trainer.validate()  # the same val batches every time
    trainer.tick()
    folder = str(tmp_path / "manual")
    seen = []
    trainer.save(folder, on_commit=seen.append)
    trainer.wait()
    assert seen == [folder] and commits == [(1, folder)]
    assert json.loads(open(os.path.join(folder, "job.json")).read()) == {"step": 1}
    names = {f["path"] for f in json.loads(open(os.path.join(folder, "MANIFEST.json")).read())["files"]}
    assert {"job.json", "rng.json", "config.yaml"} <= names


def test_cpu_peak_cached_once(tmp_path, monkeypatch):
    from theseus.train import mfu

    calls = []
    monkeypatch.setattr(mfu, "measure_cpu_peak", lambda dtype="float32", **k: calls.append(dtype) or 1.5e11)
    path = str(tmp_path / "meta" / "cpu_peak")
    assert mfu.cached_cpu_peak(path, "cpu", "bfloat16") == 1.5e11
    assert mfu.cached_cpu_peak(path, "cpu", "bfloat16") == 1.5e11
    assert mfu.cached_cpu_peak(path, "cpu", "float32") == 1.5e11
    assert calls == ["bfloat16", "float32"]
    assert json.loads(open(f"{path}/cpu-bfloat16.json").read()) == {"cpu/bfloat16": 1.5e11}
    assert json.loads(open(f"{path}/cpu-float32.json").read()) == {"cpu/float32": 1.5e11}


def test_trainer_peak_default_location(make_trainer, data_root, tmp_path, monkeypatch):
    from tests.train._helpers import write_dataset
    from theseus.train import mfu

    monkeypatch.setattr(mfu, "measure_cpu_peak", lambda dtype="float32", **k: 2e11)
    root = tmp_path / "r"
    write_dataset(root, tokens=5000)
    trainer = make_trainer(root=str(root), peak_cache=None)
    assert trainer.peak_cache == f"{root}/meta/cpu_peak"
    assert not os.path.exists(trainer.peak_cache)  # nothing measured before a step
    metrics = trainer.tick()
    assert json.loads(open(f"{trainer.peak_cache}/cpu-bfloat16.json").read()) == {"cpu/bfloat16": 2e11}
    assert metrics["train/mfu"] > 0


def test_validation_only_steps_report_val_loss_and_position(make_trainer):
    reports = []
    trainer = make_trainer(config(logging={"report_interval": 4, "validation_interval": 6}),
                           on_report=lambda s, m: reports.append((s, sorted(m))))
    trainer.train(until=8)
    assert [s for s, _ in reports] == [4, 6, 8]
    assert reports[1][1] == ["train/step", "train/tokens", "val/fineweb/loss", "val/loss"]
    assert set(reports[0][1]) == TRAIN_KEYS and set(reports[2][1]) == TRAIN_KEYS
