"""The data/tokenize/* jobs: each corpus kind, progress records, failures, bad input writing nothing."""

import json
import os

import pytest

from theseus.data.store import open_dataset
from theseus.jobs import get_job
from theseus.quick import quick
from theseus.store import Store


def run_job(root, key, name="r", **values):
    return get_job(key).create(root, name, values or None)()


def test_text_job_reads_txt_jsonl_and_parquet(tmp_path, fineweb_file):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.txt").write_text("the first document")
    (corpus / "b.jsonl").write_text("\n".join(json.dumps({"text": f"line {i}"}) for i in range(3)))
    root = str(tmp_path / "root")
    summary = run_job(root, "data/tokenize/text",
                      data={"text": {"paths": [str(corpus / "*.txt"), str(corpus / "b.jsonl"), fineweb_file],
                                     "dataset": "mine"}, "max_samples": 10, "val_pct": 0.0})
    assert summary["dataset"] == "mine" and summary["samples"] == 10
    ds = open_dataset(root, "mine")
    from theseus.data.tokenizer import get_tokenizer

    text = get_tokenizer().decode(ds.tokens("train"))
    assert text.startswith("the first document<|endoftext|>line 0<|endoftext|>")


def test_padded_addition_job(tmp_path):
    root = str(tmp_path)
    summary = run_job(root, "data/tokenize/addition", data={"addition": {"n": 50}, "block_size": 16})
    ds = open_dataset(root, "addition")
    assert ds.kind == "padded" and ds.block_size == 16 and summary["samples"] == 50
    assert ds.tokens("train").shape[0] + ds.tokens("val").shape[0] == 50
    assert ds.mask("train").any(axis=1).all()  # every row has loss on its answer
    rec = Store(root).find().job("data/tokenize/addition").has("data/samples").select(keys=["data/samples"])
    assert rec == [{"data/samples": 50}]


def test_padded_alpaca_job(tmp_path, alpaca_file):
    root = str(tmp_path)
    with quick(root) as q:
        q.build("data/tokenize/alpaca", "alpaca")
        q.config.data.alpaca.data_files = [alpaca_file]
        q.config.data.block_size = 128
        summary = q.create()()
    ds = open_dataset(root, "alpaca")
    assert summary["samples"] == 40 and ds.block_size == 128 and summary["truncated"] == 0
    row, mask = ds.tokens("train")[0], ds.mask("train")[0]
    from theseus.data.tokenizer import get_tokenizer

    tok = get_tokenizer()
    assert "### Response:" in tok.decode(row[~mask][:60]) and tok.decode(row[mask]).endswith("<|endoftext|>")


def test_failure_during_run_is_recorded_and_no_dataset_appears(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"text": "ok"}) + "\n" + json.dumps({"body": "no text field"}) + "\n")
    root = str(tmp_path / "root")
    job = get_job("data/tokenize/text").create(root, "broken", {"data": {"text": {"paths": [str(bad)]}}})
    with pytest.raises(ValueError, match="has no 'text' field"):
        job()
    store = Store(root)
    rec = store.record(store.find().job("data/tokenize/text").last())
    assert rec["_status"] == "failed" and "has no 'text' field" in rec["_error"]
    assert not os.path.exists(os.path.join(root, "data", "text"))
    assert [n for n in os.listdir(os.path.join(root, "data")) if not n.startswith(".")] == []


def test_empty_corpus_is_a_clear_error(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(ValueError, match="corpus is empty"):
        run_job(str(tmp_path / "root"), "data/tokenize/text", data={"text": {"paths": [str(empty)]}})


@pytest.mark.parametrize("key, values, error, match", [
    ("data/tokenize/pydoc", {"tokenizer": {"name": "nope_base"}}, ValueError, "unknown tiktoken encoding 'nope_base'"),
    ("data/tokenize/pydoc", {"tokenizer": {"backend": "sentencepiece"}}, ValueError, "unknown tokenizer backend"),
    ("data/tokenize/pydoc", {"tokenizer": {"backend": "huggingface", "name": "/nonexistent/tok"}}, FileNotFoundError,
     "no tokenizer.json"),
    ("data/tokenize/text", {"data": {"text": {"paths": ["/nonexistent/corpus.txt"]}}}, FileNotFoundError,
     "corpus file not found: '/nonexistent/corpus.txt'"),
    ("data/tokenize/text", {"data": {"text": {"paths": ["/nonexistent/*.txt"]}}}, FileNotFoundError, "no file matches"),
    ("data/tokenize/text", {}, ValueError, "data.text.paths is empty"),
    ("data/tokenize/fineweb", {"data": {"fineweb": {"data_files": ["/nonexistent/x.parquet"]}}}, FileNotFoundError,
     "corpus file not found"),
    ("data/tokenize/alpaca", {"data": {"alpaca": {"data_files": ["/nonexistent/a.json"]}}}, FileNotFoundError,
     "corpus file not found"),
    ("data/tokenize/pydoc", {"data": {"suffix": "/x"}}, ValueError, "invalid dataset name"),
    ("data/tokenize/pydoc", {"data": {"val_pct": 1.5}}, ValueError, "data.val_pct must be in"),
    ("data/tokenize/pydoc", {"data": {"max_tokens": 0}}, ValueError, "data.max_tokens must be -1"),
    ("data/tokenize/addition", {"data": {"block_size": 1}}, ValueError, "data.block_size must be >= 2"),
    ("data/tokenize/pydoc", {"data": {"max_tokenz": 5}}, ValueError, "data.max_tokenz"),
    ("data/tokenize/pydoc", {"data": {"max_tokens": "lots"}}, ValueError, "data.max_tokens"),
])
def test_bad_input_writes_nothing(tmp_path, log_files, key, values, error, match):
    root = str(tmp_path / "root")
    with pytest.raises(error, match=match):
        get_job(key).create(root, "bad", values)()  # create() raises: job() never runs
    assert log_files(root) == [] and not os.path.exists(root)


def test_existing_dataset_needs_overwrite(tmp_path, log_files):
    root = str(tmp_path)
    first = run_job(root, "data/tokenize/pydoc", data={"max_samples": 5})
    logs_before = log_files(root)
    with pytest.raises(FileExistsError, match="dataset 'pydoc' already exists.*data.overwrite=True"):
        run_job(root, "data/tokenize/pydoc", data={"max_samples": 6})
    assert log_files(root) == logs_before  # the refused run wrote nothing
    assert open_dataset(root, "pydoc").meta["summary"]["samples"] == 5
    second = run_job(root, "data/tokenize/pydoc", data={"max_samples": 6, "overwrite": True})
    assert second["content_hash"] != first["content_hash"]
    assert open_dataset(root, "pydoc").meta["summary"]["samples"] == 6
    run_job(root, "data/tokenize/pydoc", data={"max_samples": 5, "suffix": "-b"})  # a suffix is another dataset
    assert open_dataset(root, "pydoc-b").meta["summary"]["samples"] == 5
