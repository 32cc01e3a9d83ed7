"""The seeds' quick-session snippets (root = tmp_path), plus the session's rules."""

import os

import numpy as np
import pytest
from omegaconf import OmegaConf

from theseus.data.store import open_dataset
from theseus.quick import QuickJob, init, quick


def test_seed_build_and_print(tmp_path, capsys):
    with quick(str(tmp_path)) as q:
        q.build("data/tokenize/fineweb", "tokenize-fineweb")
        print(q)
    assert capsys.readouterr().out.startswith("<theseus.quick.QuickJob object at 0x")


def test_seed_print_config_and_yaml(tmp_path, capsys):
    with quick(str(tmp_path)) as q:
        q.build("data/tokenize/fineweb", "tokenize-fineweb")
        print(q.config)
        print(OmegaConf.to_yaml(q.config))
    out = capsys.readouterr().out
    assert out.startswith("{'data': {'val_pct': 0.05, 'seed': 2357, 'max_samples': -1, 'max_tokens': -1, 'suffix': ''")
    assert "tokenizer:\n  backend: tiktoken\n  name: cl100k_base\n" in out


def test_seed_tokenize_fineweb(tmp_path, fineweb_file, logs):
    """running-experiments: q.build / q.config.data.max_tokens / q.create() / job(), on local FineWeb parquet."""
    root = str(tmp_path)
    with quick(root) as q:
        q.build("data/tokenize/fineweb", "tokenize-fineweb")
        q.config.data.max_tokens = int(1e7)
        q.config.data.fineweb.data_files = [fineweb_file]  # the hub is out of reach here

        job = q.create()
        assert q.find().all() == []  # created, not run
        summary = job()

        run = q.find().job("data/tokenize/fineweb")
        nodes = run.all()
        assert nodes[0].seq == 0 and nodes[0] == job.node.__class__.from_id(nodes[0].id)
        progress = run.has("data/samples").select(keys=["data/samples", "data/train_tokens", "data/val_tokens"])
        last = q.store.record(run.last())
    assert summary["samples"] == 2500 and summary["dataset"] == "fineweb"
    assert [p["data/samples"] for p in progress] == [1000, 2000, 2500]  # every 1,000 samples, and at the end
    assert [n.seq for n in nodes] == [0, 1, 2, 3]
    assert progress[-1]["data/train_tokens"] == summary["train_tokens"]
    assert progress[-1]["data/val_tokens"] == summary["val_tokens"]
    assert last["_finished"] is True and last["_status"] == "finished"
    assert last["data/dataset"] == "fineweb" and last["data/content_hash"] == summary["content_hash"]

    ds = open_dataset(root, "fineweb")
    assert ds.kind == "contiguous" and len(ds.tokens("train")) == summary["train_tokens"]
    assert ds.meta["job"]["key"] == "data/tokenize/fineweb" and ds.meta["job"]["node"] == nodes[0].id

    run_name = "tokenize-fineweb"
    assert f"JOB {run_name} | starting" in logs and f"JOB {run_name} | finished" in logs
    assert f"JOB {run_name} | synchronized and starting with nodeid={nodes[0].id}" in logs
    data_lines = [m for m in logs if m.startswith("DATA | ")]
    assert data_lines[0].startswith("DATA | 1000 samples | ") and " train tokens | " in data_lines[0]
    assert data_lines[0].endswith("s") and " val tokens | " in data_lines[0]


def test_fineweb_max_tokens_is_exact(tmp_path, fineweb_file):
    with quick(tmp_path) as q:
        q.build("data/tokenize/fineweb", "small")
        q.config.data.fineweb.data_files = [fineweb_file]
        q.config.data.max_tokens = 1234
        q.config.data.suffix = "-1k"
        summary = q.create()()
    assert summary["dataset"] == "fineweb-1k" and summary["train_tokens"] == 1234
    assert len(open_dataset(tmp_path, "fineweb-1k").tokens("train")) == 1234


def test_overview_quickstart_with_pydoc(tmp_path):
    """overview: tokenize into a root with q.build / q.create / job(), using the offline corpus."""
    with quick(str(tmp_path)) as q:
        q.build("data/tokenize/pydoc", "my-tokenize-job")
        q.config.data.max_samples = 30
        job = q.create()
        summary = job()
        found = q.find().job("data/tokenize/pydoc").finished().last()
    assert summary["samples"] == 30 and found.name == "general.default.my-tokenize-job"
    ds = open_dataset(tmp_path, "pydoc")
    assert ds.meta["summary"]["samples"] == 30 and ds.tokens("train").dtype == np.uint32


def test_build_again_replaces_the_pending_job(tmp_path):
    with quick(tmp_path) as q:
        q.build("data/tokenize/fineweb", "a")
        q.config.data.max_tokens = 5
        assert q.build("data/tokenize/pydoc", "b") is q
        assert (q.job_key, q.run_name) == ("data/tokenize/pydoc", "b")
        assert "fineweb" not in q.config.data
        q.build("data/tokenize/fineweb", "a")
        assert q.config.data.max_tokens == -1  # a new build starts from the defaults
        assert type(q.create()).__name__ == "TokenizeFineweb"


def test_each_create_is_a_new_run_from_the_pending_config(tmp_path):
    with quick(tmp_path) as q:
        q.build("data/tokenize/pydoc", "p")
        q.config.data.max_samples = 3
        a = q.create()
        q.config.data.max_samples = 4
        b = q.create()
    assert a.node.nonce != b.node.nonce
    assert (a.config.data.max_samples, b.config.data.max_samples) == (3, 4)


def test_session_errors(tmp_path):
    q = init(tmp_path)
    with pytest.raises(ValueError, match="no job built yet"):
        _ = q.config
    with pytest.raises(ValueError, match="no job built yet"):
        q.create()
    with pytest.raises(ValueError, match=r"nothing to rebuild: call q.find\(\)...resume\(\)"):
        q.build()
    with pytest.raises(ValueError, match="needs both"):
        q.build("data/tokenize/pydoc")
    with pytest.raises(KeyError, match="did you mean data/tokenize/pydoc"):
        q.build("data/tokenize/pydco", "x")
    with pytest.raises(ValueError, match="run name"):
        q.build("data/tokenize/pydoc", "no spaces allowed")
    q.close()
    q.close()
    with pytest.raises(RuntimeError, match="closed"):
        q.find()
    assert not os.path.exists(tmp_path / "log")


def test_resume_hook_restores_job_and_config(tmp_path):
    with quick(tmp_path) as q:
        q.build("data/tokenize/pydoc", "resumable")
        q.config.data.max_samples = 2
        first = q.create()
        first()
        assert q.find().job("data/tokenize/pydoc").resume() is q
        assert (q.job_key, q.config.data.max_samples, q.base) == ("data/tokenize/pydoc", 2, first.node)
        assert q.build() is q and q.config.data.max_samples == 2
        q.config.data.max_samples = 5  # edits on top of the restored config survive q.build()...
        assert q.build() is q and q.config.data.max_samples == 5
        q.find().job("data/tokenize/pydoc").resume()  # ...and a new resume() starts from the saved config
        assert q.config.data.max_samples == 2
        with pytest.raises(NotImplementedError, match="cannot be restored"):
            q.create()  # tokenize jobs do not restore; the trainer will
        q.find().job("data/tokenize/pydoc").branch()
        assert q.branched and q.run_name == first.name


def test_quick_job_is_the_session_class():
    assert QuickJob.__module__ == "theseus.quick"


@pytest.mark.slow
def test_create_on_a_misspelt_dataset_names_the_close_dataset_and_jobs(tmp_path):
    from theseus.data.store import DatasetNotFound

    with quick(str(tmp_path)) as q:
        q.build("data/tokenize/pydoc", "tok").config.data.max_samples = 3
        q()
        q.build("gpt/train/pretrain", "t").config.data.dataset = "pydocs"
        with pytest.raises(DatasetNotFound, match=r"did you mean 'pydoc'\?.*did you mean data/tokenize/pydoc\?"):
            q.create()
