"""`theseus jobs` and `theseus run` through typer's CliRunner."""

import os

import pytest
from typer.testing import CliRunner

from theseus.cli import app
from theseus.data.store import open_dataset
from theseus.store import Store

runner = CliRunner()


def test_jobs_table():
    result = runner.invoke(app, ["jobs"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert "Job" in lines[1] and "Description" in lines[1]
    for key in ["data/tokenize/fineweb", "data/tokenize/text", "data/tokenize/pydoc", "data/tokenize/addition",
                "data/tokenize/alpaca"]:
        assert key in result.output


def test_jobs_prefix():
    result = runner.invoke(app, ["jobs", "data/tokenize/a"])
    assert result.exit_code == 0
    assert "data/tokenize/addition" in result.output and "data/tokenize/alpaca" in result.output
    assert "data/tokenize/fineweb" not in result.output
    result = runner.invoke(app, ["jobs", "nope/"])
    assert result.exit_code == 2 and "no job key starts with 'nope/'" in result.output


def test_run_pydoc(tmp_path):
    root = str(tmp_path / "root")
    result = runner.invoke(app, ["run", "data/tokenize/pydoc", "cli-pydoc", root, "data.max_samples=7",
                                 "data.suffix=-cli"])
    assert result.exit_code == 0, result.output
    assert open_dataset(root, "pydoc-cli").meta["summary"]["samples"] == 7
    node = Store(root).find().job("data/tokenize/pydoc").finished().last()
    assert node.name == "general.default.cli-pydoc"


def test_run_fineweb_from_local_parquet(tmp_path, fineweb_file):
    root = str(tmp_path / "root")
    result = runner.invoke(app, ["run", "data/tokenize/fineweb", "lm.data.cli-fineweb", root,
                                 f"data.fineweb.data_files=[{fineweb_file}]", "data.max_samples=1500",
                                 "--log-level", "INFO"])
    assert result.exit_code == 0, result.output
    store = Store(root)
    samples = store.find().spec(project="lm").job("data/tokenize/fineweb").has("data/samples")
    assert [r["data/samples"] for r in samples.select(keys=["data/samples"])] == [1000, 1500]


@pytest.mark.parametrize("args, message", [
    (["data/tokenize/finweb", "r"], "unknown job 'data/tokenize/finweb'; did you mean data/tokenize/fineweb?"),
    (["data/tokenize/pydoc", "r", "data.max_tokenz=5"], "unknown config key 'data.max_tokenz'; did you mean"),
    (["data/tokenize/pydoc", "r", "data.max_tokens=lots"], "bad value for config key 'data.max_tokens'"),
    (["data/tokenize/pydoc", "r", "data.max_tokens=2.5e-1"],
     "bad value for config key 'data.max_tokens': 2.5e-1 is not a whole number (the key takes an int)"),
    (["data/tokenize/pydoc", "r", "max_samples"], "override 'max_samples' is not of the form"),
    (["data/tokenize/pydoc", "r", "tokenizer.name=nope_base"], "unknown tiktoken encoding 'nope_base'"),
    (["data/tokenize/text", "r", "data.text.paths=/nonexistent/c.txt"], "corpus file not found: '/nonexistent/c"),
    (["data/tokenize/text", "r"], "data.text.paths is empty: set it to your corpus files, e.g. data.text.paths=[co"),
    (["data/tokenize/pydoc", "bad/name"], "run name 'bad/name'"),
])
def test_run_bad_input_exits_2_and_writes_nothing(tmp_path, args, message):
    root = str(tmp_path / "root")
    argv = ["run", args[0], args[1], root, *args[2:]]
    result = runner.invoke(app, argv)
    assert result.exit_code == 2, result.output
    assert "error: " + message in " ".join(result.output.split())
    assert "Traceback" not in result.output
    assert not os.path.exists(root)


@pytest.mark.slow
def test_run_on_a_misspelt_dataset_exits_2_naming_the_close_dataset_and_jobs(tmp_path):
    root = str(tmp_path)
    assert runner.invoke(app, ["run", "data/tokenize/pydoc", "tok", root, "data.max_samples=3"]).exit_code == 0
    result = runner.invoke(app, ["run", "gpt/train/pretrain", "t", root, "data.dataset=pydocs"])
    out = " ".join(result.output.split())
    assert result.exit_code == 2, result.output
    assert "(available: pydoc; did you mean 'pydoc'?)" in out and "Traceback" not in out
    assert "no tokenize job is registered as 'data/tokenize/pydocs' (did you mean data/tokenize/pydoc?)" in out
    assert Store(root).find().job("gpt/train/pretrain").all() == []  # refused before anything is written


def test_run_into_existing_dataset(tmp_path, log_files):
    root = str(tmp_path)
    assert runner.invoke(app, ["run", "data/tokenize/pydoc", "one", root, "data.max_samples=3"]).exit_code == 0
    before = log_files(root)
    result = runner.invoke(app, ["run", "data/tokenize/pydoc", "two", root, "data.max_samples=3"])
    assert result.exit_code == 2 and "dataset 'pydoc' already exists" in result.output
    assert "data.overwrite=True" in result.output and log_files(root) == before
    result = runner.invoke(app, ["run", "data/tokenize/pydoc", "two", root, "data.max_samples=4",
                                 "data.overwrite=true"])
    assert result.exit_code == 0


def test_run_failure_exits_1_and_is_recorded(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"body": 1}\n')
    root = str(tmp_path / "root")
    result = runner.invoke(app, ["run", "data/tokenize/text", "broken", root, f"data.text.paths={bad}"])
    assert result.exit_code == 1 and "has no 'text' field" in result.output and "recorded at node" in result.output
    store = Store(root)
    assert store.record(store.find().job("data/tokenize/text").last())["_status"] == "failed"


def test_no_args_shows_help():
    result = runner.invoke(app, [])
    assert "jobs" in result.output and "run" in result.output
