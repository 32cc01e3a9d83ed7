"""DatasetWriter / open_dataset / list_datasets: format, atomic publish, overwrite, errors, remote roots."""

import json
import os
import uuid

import fsspec
import numpy as np
import pytest

from theseus.data.store import DatasetNotFound, DatasetWriter, list_datasets, open_dataset
from theseus.store.fs import NotPlainFile

TOK = {"backend": "tiktoken", "name": "cl100k_base", "vocab_size": 100277, "eot": 100257}


def write_contiguous(root, name, train, val, overwrite=False, chunks=1):
    with DatasetWriter(root, name, "contiguous", overwrite=overwrite, source="test") as w:
        w.set_tokenizer(TOK)
        for part in np.array_split(np.asarray(train), chunks):
            w.append("train", part)
        w.append("val", val)
    return w


def snapshot(folder):
    """{relative path: bytes} of every file under folder."""
    out = {}
    for dirpath, _, files in os.walk(folder):
        for f in files:
            p = os.path.join(dirpath, f)
            out[os.path.relpath(p, folder)] = open(p, "rb").read()
    return out


def test_contiguous_roundtrip_and_meta(tmp_path):
    train = np.arange(1000, dtype=np.uint32) * 7
    write_contiguous(tmp_path, "toy", train, np.arange(10), chunks=5)
    folder = tmp_path / "data" / "toy"
    assert sorted(os.listdir(folder)) == ["meta.json", "train.npy", "val.npy"]
    raw = np.load(folder / "train.npy", mmap_mode="r")  # plain NumPy can read it
    assert raw.dtype == np.uint32 and raw.shape == (1000,)
    np.testing.assert_array_equal(raw, train)
    meta = json.loads((folder / "meta.json").read_text())
    assert meta["kind"] == "contiguous" and meta["tokenizer"] == TOK and meta["dtype"] == "uint32"
    assert meta["counts"] == {"train": 1000, "val": 10}
    assert meta["source"] == "test" and meta["created"] and len(meta["content_hash"]) == 64
    ds = open_dataset(tmp_path, "toy")
    assert isinstance(ds.tokens("train"), np.memmap)
    np.testing.assert_array_equal(ds.tokens("val"), np.arange(10))
    assert ds.mask("train") is None
    # same content, different chunking -> same content hash
    write_contiguous(tmp_path, "toy2", train, np.arange(10), chunks=1)
    assert open_dataset(tmp_path, "toy2").meta["content_hash"] == meta["content_hash"]
    assert list_datasets(tmp_path) == ["toy", "toy2"]


def test_padded_roundtrip(tmp_path):
    tokens = np.arange(24).reshape(6, 4)
    mask = tokens % 3 == 0
    with DatasetWriter(tmp_path, "pad", "padded") as w:
        w.append("train", tokens[:4], mask[:4])
        w.append("val", tokens[4:], mask[4:])
    ds = open_dataset(tmp_path, "pad")
    assert ds.kind == "padded" and ds.block_size == 4
    np.testing.assert_array_equal(ds.tokens("train"), tokens[:4])
    assert ds.mask("val").dtype == bool
    np.testing.assert_array_equal(ds.mask("val"), mask[4:])
    assert sorted(os.listdir(tmp_path / "data" / "pad")) == [
        "meta.json", "train.npy", "train_mask.npy", "val.npy", "val_mask.npy"]


def test_empty_split_is_readable(tmp_path):
    write_contiguous(tmp_path, "noval", np.arange(5), np.zeros(0))
    assert open_dataset(tmp_path, "noval").tokens("val").shape == (0,)


def test_existing_dataset_without_overwrite_changes_nothing(tmp_path):
    write_contiguous(tmp_path, "toy", np.arange(100), np.arange(5))
    before = snapshot(tmp_path)
    with pytest.raises(FileExistsError, match=r"dataset 'toy' exists at .*data/toy; pass overwrite=True"):
        DatasetWriter(tmp_path, "toy", "contiguous")
    assert snapshot(tmp_path) == before
    assert os.listdir(tmp_path / "data") == ["toy"]  # no staging folder left


def test_overwrite_replaces(tmp_path):
    write_contiguous(tmp_path, "toy", np.arange(100), np.arange(5))
    write_contiguous(tmp_path, "toy", np.arange(50), np.arange(2), overwrite=True)
    assert open_dataset(tmp_path, "toy").meta["counts"] == {"train": 50, "val": 2}
    assert os.listdir(tmp_path / "data") == ["toy"]


def test_error_leaves_nothing_visible(tmp_path):
    write_contiguous(tmp_path, "toy", np.arange(100), np.arange(5))
    before = snapshot(tmp_path)
    with pytest.raises(RuntimeError, match="boom"):
        with DatasetWriter(tmp_path, "toy", "contiguous", overwrite=True) as w:
            w.append("train", np.arange(10))
            raise RuntimeError("boom")
    with pytest.raises(RuntimeError, match="boom"):
        with DatasetWriter(tmp_path, "fresh", "contiguous") as w:
            w.append("train", np.arange(10))
            raise RuntimeError("boom")
    assert snapshot(tmp_path) == before
    assert list_datasets(tmp_path) == ["toy"]


def test_missing_dataset_names_the_job(tmp_path):
    write_contiguous(tmp_path, "other", np.arange(10), np.arange(2))
    with pytest.raises(DatasetNotFound) as e:
        open_dataset(tmp_path, "fineweb")
    assert isinstance(e.value, FileNotFoundError)
    msg = str(e.value)
    assert "dataset 'fineweb' not found under" in msg and "available: other" in msg
    assert f"run the tokenize job first: theseus run data/tokenize/fineweb <run-name> {tmp_path}" in msg
    with pytest.raises(DatasetNotFound, match="theseus run data/tokenize/alpaca <run-name>"):
        open_dataset(tmp_path, "alpaca-sft", hint="data/tokenize/alpaca")


def test_missing_dataset_names_close_datasets_and_the_tokenize_jobs_that_exist(tmp_path):
    write_contiguous(tmp_path, "pydoc", np.arange(10), np.arange(2))
    with pytest.raises(DatasetNotFound) as e:
        open_dataset(tmp_path, "pydocs")
    msg = str(e.value)
    assert "(available: pydoc; did you mean 'pydoc'?)" in msg
    assert "no tokenize job is registered as 'data/tokenize/pydocs' (did you mean data/tokenize/pydoc?)" in msg
    assert ("the tokenize jobs are data/tokenize/addition, data/tokenize/alpaca, data/tokenize/chat, "
            "data/tokenize/fineweb") in msg
    assert "theseus run data/tokenize/pydocs" not in msg  # never a command that cannot run
    with pytest.raises(DatasetNotFound) as e:  # a registered job: the command to run, no list
        open_dataset(tmp_path, "fineweb")
    assert "did you mean" not in str(e.value) and "theseus run data/tokenize/fineweb <run-name>" in str(e.value)


def test_list_ignores_incomplete_and_hidden(tmp_path):
    write_contiguous(tmp_path, "good", np.arange(10), np.arange(2))
    (tmp_path / "data" / "half").mkdir()
    (tmp_path / "data" / "half" / "train.npy").write_bytes(b"partial")
    (tmp_path / "data" / ".good.tmp-abc").mkdir()
    assert list_datasets(tmp_path) == ["good"]
    with pytest.raises(DatasetNotFound):
        open_dataset(tmp_path, "half")
    write_contiguous(tmp_path, "half", np.arange(10), np.arange(2))  # garbage without meta.json is replaced
    assert list_datasets(tmp_path) == ["good", "half"]
    assert list_datasets(tmp_path / "nowhere") == []


def test_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="unknown dataset kind 'chunked'"):
        DatasetWriter(tmp_path, "x", "chunked")
    for bad in ["", ".hidden", "a/b", "../x"]:
        with pytest.raises(ValueError, match="invalid dataset name"):
            DatasetWriter(tmp_path, bad, "contiguous")
    with DatasetWriter(tmp_path, "x", "contiguous") as w:
        with pytest.raises(ValueError, match="1-D token arrays"):
            w.append("train", np.zeros((2, 2)))
        with pytest.raises(ValueError, match="unknown split 'test'"):
            w.append("test", np.zeros(2))
        w.abort()
    with DatasetWriter(tmp_path, "p", "padded") as w:
        with pytest.raises(ValueError, match="mask of the same shape"):
            w.append("train", np.zeros((2, 4)))
        w.append("train", np.zeros((2, 4)), np.ones((2, 4), bool))
        with pytest.raises(ValueError, match=r"rows of shape \(4,\)"):
            w.append("train", np.zeros((2, 5)), np.ones((2, 5), bool))
        w.abort()
    assert list_datasets(tmp_path) == [] and os.listdir(tmp_path / "data") == []


@pytest.fixture
def memory_root():
    root = f"memory://theseus-test-{uuid.uuid4().hex[:8]}"
    yield root
    fs = fsspec.filesystem("memory")
    if fs.exists(root):
        fs.rm(root, recursive=True)


def test_remote_root_uploads_meta_last(memory_root, tmp_path, monkeypatch):
    fs = fsspec.filesystem("memory")
    uploaded = []
    real_put = type(fs).put_file
    monkeypatch.setattr(type(fs), "put_file", lambda self, lpath, rpath, **kw: (
        uploaded.append(rpath.rsplit("/", 1)[-1]), real_put(self, lpath, rpath, **kw))[1])
    write_contiguous(memory_root, "remote", np.arange(300), np.arange(7))
    assert uploaded[-1] == "meta.json" and sorted(uploaded[:-1]) == ["train.npy", "val.npy"]
    assert list_datasets(memory_root) == ["remote"]
    ds = open_dataset(memory_root, "remote", cache_dir=str(tmp_path / "cache"))
    np.testing.assert_array_equal(ds.tokens("train"), np.arange(300))
    np.testing.assert_array_equal(ds.tokens("val"), np.arange(7))
    with pytest.raises(FileExistsError, match="pass overwrite=True"):
        DatasetWriter(memory_root, "remote", "contiguous")
    write_contiguous(memory_root, "remote", np.arange(20), np.arange(3), overwrite=True)
    ds = open_dataset(memory_root, "remote", cache_dir=str(tmp_path / "cache"))
    assert ds.meta["counts"] == {"train": 20, "val": 3}
    assert fs.ls(f"{memory_root}/data", detail=False) == [f"/{memory_root[9:]}/data/remote"]


def test_remote_corrupt_array_is_detected(memory_root, tmp_path):
    write_contiguous(memory_root, "remote", np.arange(300), np.arange(7))
    fs = fsspec.filesystem("memory")
    path = f"{memory_root}/data/remote/train.npy"
    data = bytearray(fs.cat_file(path))
    data[-1] ^= 0xFF
    fs.pipe_file(path, bytes(data))
    with pytest.raises(ValueError, match="sha256 mismatch"):
        open_dataset(memory_root, "remote", cache_dir=str(tmp_path / "cache"))
    with pytest.raises(DatasetNotFound, match="data/tokenize/nope"):
        open_dataset(memory_root, "nope", cache_dir=str(tmp_path / "cache"))


@pytest.mark.timeout(60)
def test_a_fifo_meta_is_refused_not_waited_on(tmp_path):
    folder = tmp_path / "data" / "fifo"
    folder.mkdir(parents=True)
    os.mkfifo(folder / "meta.json")
    with pytest.raises(NotPlainFile, match="meta.json is a FIFO"):
        open_dataset(str(tmp_path), "fifo")
