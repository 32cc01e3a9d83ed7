"""``logging.remote``: a real training run mirrored live to TensorBoard, wandb (offline) and Comet (offline), each
read back with the backend's own files and compared with what the store holds."""

from __future__ import annotations

import numpy as np
import pytest
from typer.testing import CliRunner

from tests.mirror._mirror_helpers import (
    comet_offline_archive,
    mirrored_run,
    reports,
    tensorboard_scalars,
    tensorboard_texts,
    wandb_offline_run,
)
from theseus.cli import app
from theseus.store import Store

pytestmark = pytest.mark.usefixtures("remote_group")

NAME = "general.default.mirrored"


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("root")


def assert_mirrors(mirrored: dict, stored: dict, as_float32: bool = False) -> None:
    """Every step and key of the store is mirrored with the same value (as float32 where the format stores that)."""
    assert sorted(stored) == [0, 1, 2, 3, 4, 5, 6] and "val/loss" in stored[3] and "train/loss" in stored[1]
    assert stored[0] == {"train/step": 0.0, "train/tokens": 0.0}  # the start node, placed against steps and tokens
    assert sorted(mirrored) == sorted(stored)
    cast = np.float32 if as_float32 else float
    for step, values in stored.items():
        assert sorted(mirrored[step]) == sorted(values), step
        for key, value in values.items():
            assert cast(mirrored[step][key]) == cast(value), (step, key, mirrored[step][key], value)


@pytest.fixture(scope="module")
def tensorboard_run(root, tmp_path_factory):
    folder = tmp_path_factory.mktemp("tb")
    return folder, mirrored_run(root, "tensorboard", folder)


@pytest.mark.slow
def test_tensorboard_mirrors_every_report_as_float32(root, tensorboard_run):
    folder, job = tensorboard_run
    nonce = job.node.nonce
    assert_mirrors(tensorboard_scalars(folder / NAME / nonce), reports(root, nonce), as_float32=True)
    texts = tensorboard_texts(folder / NAME / nonce)
    assert nonce in texts["theseus/run/text_summary"] and NAME in texts["theseus/run/text_summary"]
    assert "remote_backend: tensorboard" in texts["theseus/config/text_summary"]


@pytest.mark.slow
def test_export_writes_what_the_live_mirror_wrote(root, tensorboard_run, tmp_path):
    folder, job = tensorboard_run
    nonce, out = job.node.nonce, tmp_path / "export"
    result = CliRunner().invoke(app, ["export", "tensorboard", str(root), nonce, str(out)])
    assert result.exit_code == 0, result.output
    assert f"wrote {out / NAME / nonce}" in result.output and "1 runs exported" in result.output
    assert tensorboard_scalars(out / NAME / nonce) == tensorboard_scalars(folder / NAME / nonce)
    again = CliRunner().invoke(app, ["export", "tensorboard", str(root), nonce, str(out)])
    assert again.exit_code == 2 and "already holds event files" in again.output


@pytest.mark.slow
def test_wandb_offline_run_holds_every_report(root, tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    job = mirrored_run(root, "wandb", tmp_path, name="mirrored-wandb")
    nonce = job.node.nonce
    history, run = wandb_offline_run(tmp_path)
    assert_mirrors(history, reports(root, nonce))
    assert (run.project, run.run_group, run.display_name) == ("general", "default", f"mirrored-wandb:{nonce}")
    config = {item.key: item.value_json for item in run.config.update}
    assert config["theseus/nonce"] == f'"{nonce}"' and '"remote_backend":"wandb"' in config["logging"]


@pytest.mark.slow
def test_comet_offline_archive_holds_every_report(root, tmp_path):
    job = mirrored_run(root, "comet", tmp_path, name="mirrored-comet", remote_offline=True)
    nonce = job.node.nonce
    metrics, params, others = comet_offline_archive(tmp_path)
    assert_mirrors(metrics, reports(root, nonce))
    assert params["logging|remote_backend"] == "comet" and params["training|batch_size"] == 8
    assert others["theseus/nonce"] == nonce and others["theseus/name"] == "general.default.mirrored-comet"
    assert others["Name"] == f"mirrored-comet:{nonce}"


@pytest.mark.slow
def test_a_mirror_that_fails_costs_one_warning_and_no_report(root, tmp_path):
    from loguru import logger

    blocked = tmp_path / "a-file"
    blocked.write_text("a file where the event folder should go")
    warnings: list[str] = []
    sink = logger.add(lambda m: warnings.append(m.record["message"]), level="WARNING")
    try:
        job = mirrored_run(root, "tensorboard", blocked, name="mirror-fails")
    finally:
        logger.remove(sink)
    stored = reports(root, job.node.nonce)
    assert sorted(stored) == [0, 1, 2, 3, 4, 5, 6]  # the run went on, the store holds every report
    assert Store(str(root)).run_record(job.node.nonce)["_status"] == "finished"
    mirror_lines = [w for w in warnings if w.startswith("MIRROR")]
    assert len(mirror_lines) == 2, mirror_lines  # the failure, once, and the summary at the end
    assert "failed" in mirror_lines[0] and "training goes on" in mirror_lines[0]
    assert "0 of 7 reports mirrored, 0 dropped (queue full), 7 not mirrored" in mirror_lines[1]
