"""A composed training job from the user's own file keeps everything the trainer does.

The job (``lab/train/mix``: a 70/30 mixture of a contiguous and a padded dataset, Muon, a
linear schedule) is defined in an experiment file written here and imported with
``import_experiment``, as ``theseus --import FILE`` does. It shards (FSDP, tensor
parallelism), accumulates, autobatches, reports MFU, commits checkpoints, restores across
topologies, trains deterministically, replays (``batch``, ``tick``, ``find``, ``debug``),
verifies with its own parts and launches as two processes.
"""

from __future__ import annotations

import json
import math
import os
import pathlib
import subprocess
import sys
from types import SimpleNamespace

import jax.numpy as jnp
import numpy as np
import pytest
from omegaconf import OmegaConf
from typer.testing import CliRunner

from tests.conftest import scratch_registry
from tests.train._helpers import ListLog, config, write_dataset, write_padded
from tests.train._subproc import run_python
from theseus.cli import app
from theseus.experiments import import_experiment
from theseus.model.layers.mlp import MLP
from theseus.quick import quick
from theseus.store import Store

KEY = "lab/train/mix"
PLUS_ONE = "lab/train/mix-plus-one"
STEPS = 4
REPO = str(pathlib.Path(__file__).resolve().parents[2])

EXPERIMENT = '''\
"""A lab's composed training jobs: contiguous prose and padded chat at 70/30, Muon, a linear schedule."""
from theseus.jobs import job
from theseus.train import optimizers, schedules
from theseus.train.jobs import Pretrain
from theseus.train.recipe import Sampling


@job("lab/train/mix", "A 70/30 mixture of contiguous and padded data with Muon and a linear schedule.")
class Mix(Pretrain):
    DATA = [Sampling("prose", 0.7), Sampling("chat", 0.3)]
    OPTIMIZER = optimizers.Muon
    SCHEDULE = schedules.Linear


@job("lab/train/mix-plus-one", "Mix whose per-token loss is cross-entropy plus one.")
class MixPlusOne(Mix):
    def loss(self, config):
        base = super().loss(config)
        return lambda logits, targets: base(logits, targets) + 1.0
'''


def lab_config(steps: int = STEPS, **sections) -> dict:
    """The tiny GPT of the trainer tests for ``steps`` steps, reporting every step, validating and
    checkpointing every 2; no ``optimization.decay_pct`` (the linear schedule has none)."""
    cfg = config(training={"tokens": 8 * 32 * steps},
                 logging={"report_interval": 1, "checkpoint_interval": 2, "validation_interval": 2})
    cfg["optimization"].pop("decay_pct")
    for section, values in sections.items():
        cfg.setdefault(section, {}).update(values)
    return cfg


def overrides(cfg: dict, prefix: str = "") -> list[str]:
    """``cfg`` as command-line ``key=value`` overrides."""
    out = []
    for key, value in cfg.items():
        if isinstance(value, dict):
            out += overrides(value, f"{prefix}{key}.")
        else:
            out.append(f"{prefix}{key}={value}")
    return out


def make_root(root: pathlib.Path) -> str:
    """A root with the mixture's two datasets and the CPU peak cached (MFU against a given peak, no measurement)."""
    write_dataset(root, name="prose", tokens=20_000, seed=3)
    write_padded(root, name="chat")
    peak = root / "meta" / "cpu_peak" / "cpu-bfloat16.json"
    peak.parent.mkdir(parents=True)
    peak.write_text(json.dumps({"cpu/bfloat16": 5e10}))
    return str(root)


def train(root: str, key: str, name: str, cfg: dict | None = None) -> str:
    """Create and run ``key`` as ``name``; its nonce."""
    with quick(root) as q:
        q.build(key, name).config.merge_with(OmegaConf.create(cfg or lab_config()))
        job = q.create()
        job()
        job.close()
    return job.node.nonce


def column(root: str, nonce: str, key: str) -> dict[int, float]:
    """``{seq: value}`` of ``key`` over the nodes of run ``nonce`` that have it."""
    frame = Store(root).find().nonce(nonce).frame(keys=[key]).collect()
    return dict(zip(frame["seq"].to_list(), frame[key].to_list()))


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """The experiment file imported (its jobs registered for this module only) and a root with its data."""
    folder = tmp_path_factory.mktemp("lab")
    path = folder / "lab_experiments.py"
    path.write_text(EXPERIMENT)
    with scratch_registry():
        module = import_experiment(path)
        yield SimpleNamespace(path=str(path), real=os.path.realpath(path), module=module,
                              root=make_root(folder / "root"))


@pytest.fixture(scope="module")
def runs(lab):
    """Two fresh runs of the mixture job with the same seed and one of its plus-one variant; their nonces."""
    return SimpleNamespace(mix=train(lab.root, KEY, "mix"), again=train(lab.root, KEY, "mix-again"),
                           plus=train(lab.root, PLUS_ONE, "plus-one"))


def test_the_file_composes_the_job(lab):
    with quick(lab.root) as q:
        cfg = q.build(KEY, "look").config
    assert [(s.dataset, s.rate) for s in cfg.data.mixture] == [("prose", 0.7), ("chat", 0.3)]
    assert {"momentum", "ns_steps", "adam_lr", "warmup_pct", "final_lr_frac"} <= set(cfg.optimization)
    assert "decay_pct" not in cfg.optimization and "dataset" not in cfg.data


MULTIDEVICE = r"""
import hashlib, sys
sys.path.insert(0, {repo!r})
import jax
from tests.train._helpers import ListLog, config
from theseus.experiments import import_experiment
from theseus.train.trainer import Trainer

Mix = import_experiment({path!r}).Mix
cfg = config(architecture={{"dtype": {{"activation": "float32"}}}}, training={{"tokens": 8 * 32 * 6}},
             logging={{"report_interval": 1, "validation_interval": 100}})
cfg["optimization"].pop("decay_pct")

def make(devices, per_device, **shard):
    run = {{**cfg, "training": {{**cfg["training"], "per_device_batch_size": per_device}}, "shard": shard}}
    log = ListLog()
    trainer = Trainer(run, {root!r}, recipe=Mix, devices=devices, log=log, peak_flops=1e12, progress=False)
    return trainer, log

def digest(batch):
    h = hashlib.sha256()
    for name in ("x", "y", "padding_mask"):
        h.update(batch[name].tobytes())
    return h.hexdigest()

def walk(trainer, steps):
    batches, losses = [], []
    for _ in range(steps):
        batches.append(digest(trainer.batch()))
        losses.append(trainer.tick()["train/loss"])
    return batches, losses

out = {{}}
one, _ = make(jax.devices()[:1], 8)
out["single_batches"], out["single"] = walk(one, 6)
out["masked"] = int((~one.loader.batch(0)["padding_mask"]).sum())

fsdp, log = make(jax.devices(), 1, fsdp=True)
out["fsdp_batches"], out["fsdp"] = walk(fsdp, 3)
out["fsdp_batching"] = log.messages("BATCHING")[0]
out["fsdp_spec"] = [str(s) for s in fsdp.state["params"]["blocks_0"]["mlp"]["c_fc"]["kernel"].sharding.spec]

tp, log = make(jax.devices(), 2, tp=2)
out["tp_batches"], out["tp"] = walk(tp, 3)
out["tp_batching"] = log.messages("BATCHING")[0]
out["tp_spec"] = [str(s) for s in tp.state["params"]["blocks_0"]["mlp"]["c_fc"]["kernel"].sharding.spec]

accumulated, _ = make(jax.devices()[:2], 1)
whole, _ = make(jax.devices()[:2], 4)
out["accumulation"] = [accumulated.accumulation, whole.accumulation]
out["accumulated_batch"], out["whole_batch"] = digest(accumulated.batch()), digest(whole.batch())
out["accumulated_loss"], out["whole_loss"] = accumulated.tick()["train/loss"], whole.tick()["train/loss"]

# the 8-device FSDP checkpoint of step 3 restored onto 1 device continues like the 1-device run
folder = {folder!r}
fsdp.save(folder); fsdp.wait()
back, _ = make(jax.devices()[:1], 8)
back.restore(folder, partial=False)
out["restored_step"] = back.step
out["restored_batches"], out["restored"] = walk(back, 3)
emit(out)
"""


@pytest.mark.slow
def test_fsdp_tp_accumulation_and_an_8_device_checkpoint_match_one_device(lab, tmp_path):
    code = MULTIDEVICE.format(repo=REPO, path=lab.path, root=lab.root, folder=str(tmp_path / "step-3"))
    out = run_python(code, devices=8, timeout=900)
    single, batches = np.array(out["single"]), out["single_batches"]
    assert out["masked"] > 0  # the mixture's padded rows mask tokens out of the loss
    assert len(set(batches)) == 6
    # the batch of step k is the same for every layout; the losses agree within float tolerance
    assert out["fsdp_batches"] == batches[:3] and out["tp_batches"] == batches[:3]
    np.testing.assert_allclose(out["fsdp"], single[:3], rtol=1e-5)
    np.testing.assert_allclose(out["tp"], single[:3], rtol=1e-5)
    assert out["fsdp_batching"].startswith("BATCHING | 1 batchsize/node * (8 local * 1 prox = 8 dp) * 1 accumulation")
    assert out["tp_batching"].startswith("BATCHING | 2 batchsize/node * (4 local * 1 prox = 4 dp) * 1 accumulation")
    assert "data" in out["fsdp_spec"] and out["tp_spec"][-1] == "model"
    # per-device batch 1 with 4 micro-batches vs 4 at once: one batch, one loss
    assert out["accumulation"] == [4, 1]
    assert out["accumulated_batch"] == out["whole_batch"] == batches[0]
    np.testing.assert_allclose(out["accumulated_loss"], out["whole_loss"], rtol=1e-5)
    np.testing.assert_allclose(out["whole_loss"], single[0], rtol=1e-5)
    # restored on 1 device: the step, the batches and the losses of the 1-device run
    assert out["restored_step"] == 3 and out["restored_batches"] == batches[3:]
    np.testing.assert_allclose(out["restored"], single[3:], rtol=1e-5)


@pytest.mark.slow
def test_autobatch_picks_a_size_for_the_composed_job(lab, monkeypatch):
    from theseus.train.trainer import Trainer

    monkeypatch.setenv("THESEUS_AUTOBATCH_SIZE_CANDIDATES", "16 8 4")  # 16 rows do not split a batch of 8
    cfg = lab_config(training={"per_device_batch_size": -1})
    with quick(lab.root) as q:
        q.build(KEY, "autobatch").config.merge_with(OmegaConf.create(cfg))
        job = q.create()
    try:
        assert job.trainer.per_device_batch_size == 8 and job.trainer.accumulation == 1
        assert job.config.training.per_device_batch_size == 8  # the run records the size it trains with
        ((size, compiled, fits),) = job.trainer.autobatch_trials
        assert size == 8 and fits and compiled > 0
    finally:
        job.close()
    log = ListLog()
    tight = Trainer(cfg, lab.root, recipe=lab.module.Mix, memory_budget_bytes=compiled - 1, peak_flops=1e12,
                    progress=False, log=log)
    assert [(s, f) for s, _, f in tight.autobatch_trials] == [(8, False), (4, True)]
    assert tight.per_device_batch_size == 4 and tight.accumulation == 2
    assert log.messages("AUTOBATCH | per_device_batch_size=4")
    assert math.isfinite(tight.tick()["train/loss"])


@pytest.mark.slow
def test_fresh_runs_are_bitwise_equal_and_report_mfu_checkpoints_and_sources(lab, runs):
    store = Store(lab.root)
    losses = column(lab.root, runs.mix, "train/loss")
    assert sorted(losses) == list(range(1, STEPS + 1)) and all(map(math.isfinite, losses.values()))
    for key in ("train/loss", "train/grad_norm"):  # the same seed: the same run, bit for bit
        assert column(lab.root, runs.again, key) == column(lab.root, runs.mix, key)
    mfu = column(lab.root, runs.mix, "train/mfu")
    assert sorted(mfu) == list(range(1, STEPS + 1)) and all(0 < v < 1 for v in mfu.values())  # against 5e10 FLOP/s
    saved = store.find().nonce(runs.mix).checkpoint().all()
    assert [n.seq for n in saved] == [2, 4]
    for node in saved:
        assert os.path.exists(os.path.join(store.objects(node), "MANIFEST.json"))
        assert {"val/loss", "val/prose/loss", "val/chat/loss"} <= set(store.record(node))
    run = store.run_record(runs.mix)
    assert run["_job"] == KEY and run["_job_source"] == f"{lab.real}:Mix" and run["_status"] == "finished"


def same_batch(a: dict, b: dict) -> bool:
    return all(np.array_equal(a[k], b[k]) for k in ("x", "y", "padding_mask"))


@pytest.mark.slow
def test_a_resumed_job_replays_batch_tick_find_and_debug(lab, runs):
    losses = column(lab.root, runs.mix, "train/loss")
    with quick(lab.root) as q:  # walked: a fresh job ticked to step 2 consumes the run's batches and losses
        q.build(KEY, "walk").config.merge_with(OmegaConf.create(lab_config()))
        walk = q.create()
        walk.tick()
        walk.tick()
        walked = walk.batch()
        walk.tick()
        walked_next = walk.batch()
        walk.close()
    assert column(lab.root, walk.node.nonce, "train/loss") == {k: losses[k] for k in (1, 2, 3)}

    with quick(lab.root) as q:  # fresh at 2: the run's checkpoint of step 2
        q.find().nonce(runs.mix).seq(2).checkpoint().resume()
        job = q.create()
    try:
        assert type(job) is lab.module.Mix and job.trainer.step == 2
        batch = job.batch()
        assert batch is job.batch() and same_batch(batch, walked)
        assert same_batch(batch, job.trainer.loader.batch(2))
        assert job.find(MLP) == [("blocks_0", "mlp"), ("blocks_1", "mlp")]

        layer, inputs = result = job.debug(("blocks_1", "mlp"))
        assert inputs.x.shape == (4, 32, 32) and inputs.x.dtype == jnp.bfloat16  # micro-batch 0 of 2
        assert np.array_equal(np.asarray(layer(**inputs)), np.asarray(result.output))
        assert layer.c_fc(inputs.x).shape == (4, 32, 128)
        layer.close()
        params = job.trainer.state["params"]
        with job.debug(("blocks_0",), micro=1) as (_, inputs):  # the embeddings of rows 1, 3, 5, 7 of batch()
            expected = jnp.asarray(params["wte"]["embedding"]).astype(jnp.bfloat16)[batch["x"][1::2]]
            assert np.array_equal(np.asarray(inputs.x), np.asarray(expected))
        with job.debug() as (layer, inputs):  # no path: the first of the last find
            assert layer.path == ("blocks_0", "mlp")

        node = job.tick()  # seq 2 is not the run's tip: the resumed job goes on as a branch
        assert node.nonce != runs.mix and node.seq == 1 and job.trainer.step == 3
        assert column(lab.root, node.nonce, "train/loss") == {1: losses[3]}  # bitwise, same topology
        assert job.batch() is not batch and same_batch(job.batch(), walked_next)
    finally:
        job.close()


def verify(*args) -> tuple[int, str]:
    result = CliRunner().invoke(app, [str(a) for a in args])
    return result.exit_code, " ".join(result.output.split())


@pytest.mark.slow
def test_verify_replays_the_composed_job_with_its_own_parts(lab, runs):
    from theseus.replay.verify import compare, logged_losses, replay
    from theseus.train.trainer import Trainer

    store = Store(lab.root)
    for nonce in (runs.mix, runs.plus):
        node = store.find().nonce(nonce).seq(2).first()
        code, out = verify("--import", lab.path, "verify", lab.root, node.id, "--steps", 2)
        assert code == 0 and "bitwise: 2 steps compared" in out, out
    # the plus-one run logs cross-entropy + 1 on the same trajectory (a constant has no gradient) ...
    plus, mix = column(lab.root, runs.plus, "train/loss"), column(lab.root, runs.mix, "train/loss")
    assert all(plus[k] == pytest.approx(mix[k] + 1.0, abs=1e-4) for k in mix)
    # ... so a replay with its parent's parts, as a verify that ignored the job's class would do, diverges
    node = store.find().nonce(runs.plus).seq(2).first()
    with Trainer(lab_config(), lab.root, recipe=lab.module.Mix, peak_flops=float("nan"), progress=False,
                 log=ListLog()) as parent:
        parent.restore(store.objects(node), partial=False)
        verdict = compare(logged_losses(store, node), replay(parent, 2))
    assert verdict.status == "diverged" and verdict.max_abs_diff == pytest.approx(1.0, abs=1e-4)


@pytest.mark.slow
def test_verify_without_the_import_names_the_file_to_import(lab, runs):
    node = Store(lab.root).find().nonce(runs.mix).seq(2).first()
    done = subprocess.run([sys.executable, "-m", "theseus.cli", "verify", lab.root, node.id, "--steps", "2"],
                          capture_output=True, text=True, timeout=120)
    said = " ".join((done.stdout + done.stderr).split())
    assert done.returncode == 2, said
    assert f"job '{KEY}' is not registered in this process" in said
    assert f"`theseus --import {lab.real} ...`" in said


@pytest.mark.slow
def test_launch_of_the_imported_file_trains_the_mixture(lab, tmp_path):
    root = make_root(tmp_path / "root")
    cfg = lab_config(training={"per_device_batch_size": 2})  # 2 processes x 2 devices x 2 rows: the batch of 8
    result = CliRunner().invoke(app, ["--import", lab.path, "launch", KEY, "launched", root, *overrides(cfg),
                                      "--processes", "2", "--devices-per-process", "2", "--timeout", "300"])
    assert result.exit_code == 0, result.output
    store = Store(root)
    [nonce] = store.runs()["nonce"].to_list()
    run = store.run_record(nonce)
    assert run["_job"] == KEY and run["_job_source"] == f"{lab.real}:Mix" and run["_status"] == "finished"
    assert sorted(column(root, nonce, "train/loss")) == list(range(1, STEPS + 1))
    assert sorted(column(root, nonce, "val/chat/loss")) == [2, 4]
    saved = store.find().nonce(nonce).checkpoint().all()
    assert [n.seq for n in saved] == [2, 4]
    listed = json.loads(pathlib.Path(store.objects(saved[-1]), "MANIFEST.json").read_text())["files"]
    assert {"checkpoint/process-00000.json", "checkpoint/process-00001.json"} <= {f["path"] for f in listed}
