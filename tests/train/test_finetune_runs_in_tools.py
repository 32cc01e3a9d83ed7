"""The tools work on fine-tuning runs (issue 30 §5): one root holding an SFT, a LoRA and a DPO run over one tiny GPT
base; `verify` replays the LoRA run bitwise, the UI lists and pages them and serves the DPO metrics, the TensorBoard
export and the live mirror carry ``dpo/*``, and `theseus audit` finds no error."""

from __future__ import annotations

import importlib.util

import pytest
from typer.testing import CliRunner

from tests.train._helpers import config, pretrain, write_padded
from tests.train.test_dpo import dpo_config, write_pairs
from theseus.quick import quick
from theseus.store import Store

pytestmark = pytest.mark.slow

DPO_KEYS = ("dpo/loss", "dpo/accuracy", "dpo/reward_margin")


def _fine_tune(root, key, name, settings):
    with quick(root) as q:
        q.build(key, name).config.merge_with(settings)
        return q.create()()


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A root with a 2-step GPT base and, over it, a 3-step SFT run on padded chat rows, a 4-step LoRA run
    (checkpoints at 2 and 4) and a 3-step DPO run mirrored live to TensorBoard; ``(root, mirror folder, ends)``."""
    if importlib.util.find_spec("tensorboard") is None:
        pytest.skip("tensorboard not installed: the optional `remote` group")
    tmp = tmp_path_factory.mktemp("finetune")
    root, mirror = str(tmp / "root"), tmp / "mirror"
    base = pretrain(root, "base", 2, checkpoint_interval=2)
    write_padded(root)
    write_pairs(root)
    every = {"report_interval": 1, "checkpoint_interval": 2, "validation_interval": 2}
    sft = config(data={"dataset": "chat"}, training={"tokens": 8 * 32 * 3, "init_from": base.nonce}, logging=every)
    sft["optimization"] = {"lr": 3e-3}  # its cosine schedule has no decay_pct
    ends = {"sft": _fine_tune(root, "gpt/train/sft", "sft", sft)}
    lora = config(training={"tokens": 8 * 32 * 4, "init_from": base.nonce}, logging=every)
    lora["lora"] = {"rank": 4, "alpha": 8.0}
    ends["lora"] = _fine_tune(root, "gpt/train/lora", "lora", lora)
    dpo = dpo_config(base.nonce, 3)
    dpo["logging"].update(remote=True, remote_backend="tensorboard", remote_dir=str(mirror))
    ends["dpo"] = _fine_tune(root, "gpt/train/dpo", "dpo", dpo)
    return root, mirror, ends


def test_verify_replays_a_lora_node_bitwise(runs):
    from theseus.replay.verify import verify

    root, _, ends = runs
    node = Store(root).find().nonce(ends["lora"].nonce).seq(2).first()
    assert verify(root, node.id, steps=2).verdict.status == "bitwise"


def test_the_ui_lists_pages_and_plots_the_fine_tuning_runs(runs):
    from starlette.testclient import TestClient

    from theseus.ui import create_app

    root, _, ends = runs
    client = TestClient(create_app(root), base_url="http://127.0.0.1")
    listed = {r["nonce"] for r in client.get("/api/runs").json()["rows"]}
    assert {end.nonce for end in ends.values()} <= listed
    for kind in ("lora", "dpo"):
        page = client.get(f"/api/run/{ends[kind].nonce}")
        assert page.status_code == 200, page.text
        assert page.json()["row"]["nodes"] >= 3
    got = client.get("/api/series", params={"runs": ends["dpo"].nonce, "keys": "dpo/accuracy,dpo/reward_margin"})
    assert got.status_code == 200, got.text
    series = got.json()["series"]
    assert [len(s["y"]) for s in series] == [3, 3]  # one value a step
    assert series[1]["y"][0] == 0.0  # the policy starts as its reference: no margin


def test_the_dpo_run_is_exported_and_mirrored_live_with_its_metrics(runs, tmp_path):
    from tests.mirror._mirror_helpers import reports, tensorboard_scalars
    from theseus.mirror.export import export_tensorboard

    root, mirror, ends = runs
    nonce, name = ends["dpo"].nonce, "general.default.dpo"
    export_tensorboard(root, [nonce], str(tmp_path / "out"))
    exported = tensorboard_scalars(tmp_path / "out" / name / nonce)
    live = tensorboard_scalars(mirror / name / nonce)
    stored = reports(root, nonce)
    for step in (1, 2, 3):
        for key in DPO_KEYS:
            assert exported[step][key] == live[step][key] == pytest.approx(stored[step][key], rel=1e-6), (step, key)


def test_audit_finds_no_error_in_the_root(runs):
    from theseus.cli import app

    root, _, _ = runs
    result = CliRunner().invoke(app, ["audit", root])
    assert result.exit_code == 0, result.output
