"""Text sources on local files: fineweb (FineWeb-format parquet), text_files, addition, alpaca, pydoc."""

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from theseus.data import sources


def fineweb_parquet(path, texts):
    n = len(texts)
    table = pa.table({
        "text": texts,
        "id": [f"<urn:uuid:{i}>" for i in range(n)],
        "dump": ["CC-MAIN-2022-21"] * n,
        "url": [f"https://example.com/{i}" for i in range(n)],
        "date": ["2022-05-16T00:00:00Z"] * n,
        "file_path": ["s3://commoncrawl/crawl-data/x.warc.gz"] * n,
        "language": ["en"] * n,
        "language_score": [0.9] * n,
        "token_count": [len(t.split()) for t in texts],
    })
    pq.write_table(table, path)
    return str(path)


def test_fineweb_local_parquet(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    a = fineweb_parquet(tmp_path / "a.parquet", ["first doc", "second doc"])
    fineweb_parquet(tmp_path / "b.parquet", ["third doc"])
    assert list(sources.fineweb(data_files=[a])) == ["first doc", "second doc"]
    assert list(sources.fineweb(data_files=str(tmp_path / "*.parquet"))) == ["first doc", "second doc", "third doc"]


def test_fineweb_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="missing.parquet"):
        sources.fineweb(data_files=[str(tmp_path / "missing.parquet")])


def test_text_files_all_formats(tmp_path):
    (tmp_path / "a.txt").write_text("one whole\n\ndocument")
    (tmp_path / "b.jsonl").write_text(json.dumps({"text": "j1"}) + "\n\n" + json.dumps({"text": "j2", "x": 1}) + "\n")
    pq.write_table(pa.table({"text": ["p1", "p2"], "other": [1, 2]}), tmp_path / "c.parquet")
    docs = list(sources.text_files([str(tmp_path / "a.txt"), str(tmp_path / "b.jsonl"), str(tmp_path / "c.parquet")]))
    assert docs == ["one whole\n\ndocument", "j1", "j2", "p1", "p2"]
    assert list(sources.text_files(str(tmp_path / "*.jsonl"))) == ["j1", "j2"]


def test_text_files_nonexistent_path_is_named(tmp_path):
    (tmp_path / "a.txt").write_text("x")
    missing = str(tmp_path / "nope.txt")
    with pytest.raises(FileNotFoundError, match="nope.txt"):
        sources.text_files([str(tmp_path / "a.txt"), missing])  # raised before iterating
    with pytest.raises(FileNotFoundError, match=r"no file matches"):
        sources.text_files(str(tmp_path / "*.parquet"))


def test_text_files_bad_inputs(tmp_path):
    (tmp_path / "a.csv").write_text("x")
    with pytest.raises(ValueError, match="unsupported corpus file"):
        sources.text_files(str(tmp_path / "a.csv"))
    (tmp_path / "b.jsonl").write_text(json.dumps({"body": "x"}) + "\n")
    with pytest.raises(ValueError, match="no 'text' field"):
        list(sources.text_files(str(tmp_path / "b.jsonl")))
    pq.write_table(pa.table({"body": ["x"]}), tmp_path / "c.parquet")
    with pytest.raises(ValueError, match="no 'text' column"):
        list(sources.text_files(str(tmp_path / "c.parquet")))


def test_addition_is_deterministic_and_correct():
    pairs = list(sources.addition(200, seed=3, max_digits=4))
    assert pairs == list(sources.addition(200, seed=3, max_digits=4))
    assert pairs != list(sources.addition(200, seed=4, max_digits=4))
    for prompt, answer in pairs:
        a, b = prompt.rstrip("=").split("+")
        assert int(a) + int(b) == int(answer)
        assert len(a) <= 4 and len(b) <= 4
    assert max(len(p.split("+")[0]) for p, _ in pairs) == 4
    with pytest.raises(ValueError, match="max_digits"):
        sources.addition(3, seed=0, max_digits=0)


def test_alpaca_local_json_and_jsonl(tmp_path):
    records = [
        {"instruction": "Add the numbers.", "input": "2 and 3", "output": "5"},
        {"instruction": "Say hi.", "input": "", "output": "hi"},
    ]
    (tmp_path / "a.json").write_text(json.dumps(records))
    (tmp_path / "b.jsonl").write_text("\n".join(json.dumps(r) for r in records))
    pairs = list(sources.alpaca(str(tmp_path / "a.json")))
    assert pairs == list(sources.alpaca(str(tmp_path / "b.jsonl")))
    (p1, r1), (p2, r2) = pairs
    assert (r1, r2) == ("5", "hi")
    assert "### Instruction:\nAdd the numbers.\n\n### Input:\n2 and 3\n\n### Response:\n" in p1
    assert "### Input:" not in p2 and p2.endswith("### Instruction:\nSay hi.\n\n### Response:\n")


def test_alpaca_bad_record(tmp_path):
    (tmp_path / "a.json").write_text(json.dumps([{"instruction": "x"}]))
    with pytest.raises(ValueError, match="lacks output"):
        list(sources.alpaca(str(tmp_path / "a.json")))
    with pytest.raises(FileNotFoundError, match="nope.json"):
        sources.alpaca(str(tmp_path / "nope.json"))


def test_pydoc_corpus():
    docs = list(sources.pydoc_corpus())
    assert len(docs) > 50 and all(isinstance(d, str) and d for d in docs)
    assert sum(map(len, docs)) > 300_000
    assert docs == list(sources.pydoc_corpus())
