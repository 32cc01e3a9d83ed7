"""tokenize_contiguous / tokenize_padded through DatasetWriter."""

import os

import pytest

from theseus.data import sources
from theseus.data.store import DatasetWriter, list_datasets, open_dataset
from theseus.data.tokenize import Reading, tokenize_contiguous, tokenize_padded
from theseus.data.tokenizer import get_tokenizer
from theseus.errors import BadInput


@pytest.fixture(scope="module")
def tok():
    return get_tokenizer()


def docs(n):
    return [f"document number {i} says {'hello ' * (i % 5)}world." for i in range(n)]


def split_docs(tokens, eot):
    """Token stream -> list of documents' token lists (eot-terminated)."""
    out, cur = [], []
    for t in tokens.tolist():
        if t == eot:
            out.append(cur)
            cur = []
        else:
            cur.append(t)
    assert cur == []
    return out


def test_contiguous_roundtrip(tmp_path, tok):
    corpus = docs(300)
    s = tokenize_contiguous(corpus, tok, DatasetWriter(tmp_path, "d", "contiguous"),
                            reading=Reading(val_pct=0.2, seed=1))
    ds = open_dataset(tmp_path, "d")
    assert ds.meta["tokenizer"] == tok.describe() and ds.meta["summary"]["samples"] == 300
    train = [tok.decode(d) for d in split_docs(ds.tokens("train"), tok.eot)]
    val = [tok.decode(d) for d in split_docs(ds.tokens("val"), tok.eot)]
    assert sorted(train + val) == sorted(corpus)
    assert 30 < len(val) < 90  # ~20% of 300
    assert [d for d in corpus if d in set(val)] == val  # order kept within each split
    assert s["samples"] == 300 and s["train_tokens"] == len(ds.tokens("train"))
    assert s["val_tokens"] == len(ds.tokens("val")) and s["content_hash"] == ds.meta["content_hash"]


def test_contiguous_independent_of_batching_and_threads(tmp_path, tok):
    corpus = docs(120)
    hashes = set()
    for i, (batch_docs, threads) in enumerate([(1, 1), (7, 2), (256, 2), (50, 1)]):
        s = tokenize_contiguous(iter(corpus), tok, DatasetWriter(tmp_path, f"d{i}", "contiguous"),
                                Reading(val_pct=0.3, seed=5, num_threads=threads), batch_docs=batch_docs)
        hashes.add(s["content_hash"])
    assert len(hashes) == 1
    other = tokenize_contiguous(corpus, tok, DatasetWriter(tmp_path, "seed6", "contiguous"),
                                reading=Reading(val_pct=0.3, seed=6))
    assert other["content_hash"] not in hashes


def test_limits_are_exact_and_batch_independent(tmp_path, tok):
    corpus = docs(500)
    s = tokenize_contiguous(corpus, tok, DatasetWriter(tmp_path, "ms", "contiguous"), reading=Reading(max_samples=123))
    assert s["samples"] == 123
    results = []
    for i, batch_docs in enumerate([3, 64, 1000]):
        s = tokenize_contiguous(corpus, tok, DatasetWriter(tmp_path, f"mt{i}", "contiguous"), Reading(val_pct=0.1),
                                max_tokens=1001, batch_docs=batch_docs)
        assert s["train_tokens"] == 1001 == len(open_dataset(tmp_path, f"mt{i}").tokens("train"))
        results.append((s["samples"], s["val_tokens"], s["content_hash"]))
    assert len(set(results)) == 1 and results[0][0] < 500
    with pytest.raises(ValueError, match="max_tokens must be -1"):
        tokenize_contiguous(corpus, tok, DatasetWriter(tmp_path, "zero", "contiguous"), max_tokens=0)


def test_progress_every_1000_and_at_end(tmp_path, tok):
    calls = []
    s = tokenize_contiguous(docs(2500), tok, DatasetWriter(tmp_path, "p", "contiguous"), batch_docs=300,
                            reading=Reading(on_progress=lambda *a: calls.append(a)))
    assert [c[0] for c in calls] == [1000, 2000, 2500]
    assert calls[-1] == (2500, s["train_tokens"], s["val_tokens"])
    assert all(a[1] <= b[1] and a[2] <= b[2] for a, b in zip(calls, calls[1:]))
    # the counts at 1000 are those of the first 1000 documents, whatever the batching
    first = tokenize_contiguous(docs(1000), tok, DatasetWriter(tmp_path, "p1000", "contiguous"))
    assert calls[0] == (1000, first["train_tokens"], first["val_tokens"])
    calls.clear()
    tokenize_contiguous(docs(2000), tok, DatasetWriter(tmp_path, "p2", "contiguous"),
                        reading=Reading(on_progress=lambda *a: calls.append(a)))
    assert [c[0] for c in calls] == [1000, 2000]


def test_empty_corpus(tmp_path, tok):
    for i, corpus in enumerate([[], ["", ""]]):
        with pytest.raises(ValueError, match="corpus is empty"):
            tokenize_contiguous(corpus, tok, DatasetWriter(tmp_path, f"e{i}", "contiguous"))
    with pytest.raises(ValueError, match="corpus is empty"):
        tokenize_padded([], tok, DatasetWriter(tmp_path, "ep", "padded"), block_size=8)
    assert list_datasets(tmp_path) == [] and os.listdir(tmp_path / "data") == []


def test_failing_source_publishes_nothing(tmp_path, tok):
    def broken():
        yield from docs(600)
        raise OSError("connection reset")

    with pytest.raises(OSError, match="connection reset"):
        tokenize_contiguous(broken(), tok, DatasetWriter(tmp_path, "b", "contiguous"), batch_docs=100)
    assert os.listdir(tmp_path / "data") == []


def test_wrong_writer_kind(tmp_path, tok):
    with pytest.raises(ValueError, match="needs a 'contiguous' DatasetWriter"):
        tokenize_contiguous(docs(3), tok, DatasetWriter(tmp_path, "x", "padded"))
    with pytest.raises(ValueError, match="needs a 'padded' DatasetWriter"):
        tokenize_padded([("a", "b")], tok, DatasetWriter(tmp_path, "y", "contiguous"), block_size=8)
    assert os.listdir(tmp_path / "data") == []  # the writers' staging folders are gone


def test_bad_settings_leave_no_staging_folder(tmp_path, tok):
    from theseus.data.preference import tokenize_pairs

    calls = {"max_tokens must be -1": lambda w: tokenize_contiguous(docs(3), tok, w("contiguous"), max_tokens=0),
             "batch_docs must be >= 1": lambda w: tokenize_contiguous(docs(3), tok, w("contiguous"), batch_docs=0),
             "block_size must be >= 2": lambda w: tokenize_padded([("a", "b")], tok, w("padded"), block_size=1),
             "need a 'padded' DatasetWriter": lambda w: tokenize_pairs([("a", "b", "c")], tok, w("contiguous"), 8),
             "data.overlong must be one of": lambda w: tokenize_pairs([("a", "b", "c")], tok, w("padded"), 8, "x")}
    for i, (message, call) in enumerate(calls.items()):
        with pytest.raises(BadInput, match=message):
            call(lambda kind: DatasetWriter(tmp_path, f"d{i}", kind))
    assert os.listdir(tmp_path / "data") == []


def test_padded_rows_and_masks(tmp_path, tok):
    pairs = list(sources.addition(200, seed=0, max_digits=3)) + [("a long prompt " * 10, "and answer")]
    s = tokenize_padded(pairs, tok, DatasetWriter(tmp_path, "add", "padded"), block_size=12,
                        reading=Reading(val_pct=0.0))
    ds = open_dataset(tmp_path, "add")
    assert s["samples"] == 201 and s["truncated"] == 1 and s["train_rows"] == 201 and s["val_rows"] == 0
    rows, masks = ds.tokens("train"), ds.mask("train")
    assert rows.shape == masks.shape == (201, 12) and masks.dtype == bool and ds.block_size == 12
    for (prompt, answer), row, mask in zip(pairs[:200], rows.tolist(), masks.tolist()):
        p, r = tok.encode(prompt), tok.encode(answer)
        n = len(p) + len(r) + 1
        assert row == p + r + [tok.eot] * (12 - len(p) - len(r))  # eot, then eot padding
        assert mask == [False] * len(p) + [True] * (len(r) + 1) + [False] * (12 - n)
    p = tok.encode(pairs[-1][0])
    assert rows[-1].tolist() == p[:12] and not masks[-1].any()  # truncated inside the prompt
    assert s["train_tokens"] == sum(min(12, len(tok.encode(a)) + len(tok.encode(b)) + 1) for a, b in pairs)


def test_padded_val_split_and_limits(tmp_path, tok):
    pairs = list(sources.addition(1500, seed=1, max_digits=2))
    calls = []
    s = tokenize_padded(pairs, tok, DatasetWriter(tmp_path, "v", "padded"), block_size=8,
                        reading=Reading(val_pct=0.2, seed=3, on_progress=lambda *a: calls.append(a)))
    assert 200 < s["val_rows"] < 400 and s["train_rows"] + s["val_rows"] == 1500
    assert [c[0] for c in calls] == [1000, 1500] and calls[-1] == (1500, s["train_tokens"], s["val_tokens"])
    again = tokenize_padded(pairs, tok, DatasetWriter(tmp_path, "v2", "padded"), block_size=8, batch_pairs=17,
                            reading=Reading(val_pct=0.2, seed=3, num_threads=1))
    assert again["content_hash"] == s["content_hash"]
    small = tokenize_padded(pairs, tok, DatasetWriter(tmp_path, "v3", "padded"), block_size=8,
                            reading=Reading(max_samples=10))
    assert small["samples"] == 10
    with pytest.raises(ValueError, match="block_size must be >= 2"):
        tokenize_padded(pairs, tok, DatasetWriter(tmp_path, "v4", "padded"), block_size=1)


def test_pydoc_end_to_end(tmp_path, tok):
    s = tokenize_contiguous(sources.pydoc_corpus(), tok, DatasetWriter(tmp_path, "pydoc", "contiguous"),
                            reading=Reading(val_pct=0.0, max_samples=10))
    assert s["samples"] == 10 and s["val_tokens"] == 0 and s["train_tokens"] > 1000


class ListOnly:
    """A tokenizer with only encode_batch (like the huggingface backend): the generic path."""

    def __init__(self, tok):
        self.tok, self.eot = tok, tok.eot

    def encode_batch(self, texts, num_threads=2):
        return self.tok.encode_batch(texts, num_threads=num_threads)

    def describe(self):
        return self.tok.describe()


def test_fast_and_generic_paths_agree(tmp_path, tok):
    corpus = docs(50) + ["special <|endoftext|> as text", "lone surrogate \ud800 here", "é ü 漢字 🙂"]
    assert [a.tolist() for a in tok.encode_arrays(corpus)] == tok.encode_batch(corpus)
    fast = tokenize_contiguous(corpus, tok, DatasetWriter(tmp_path, "fast", "contiguous"), reading=Reading(val_pct=0.2))
    slow = tokenize_contiguous(corpus, ListOnly(tok), DatasetWriter(tmp_path, "slow", "contiguous"),
                               reading=Reading(val_pct=0.2))
    assert fast["content_hash"] == slow["content_hash"]


def test_reading_refuses_bad_settings():
    with pytest.raises(BadInput, match="val_pct must be in"):
        Reading(val_pct=1.0)
    with pytest.raises(BadInput, match="max_samples must be -1"):
        Reading(max_samples=-2)
    with pytest.raises(BadInput, match="num_threads must be >= 1"):
        Reading(num_threads=0)


def test_reading_is_one_split_for_every_tokenizer(tmp_path, tok):
    """Documents and pairs at the same indexes go to the same split under the same Reading."""
    reading = Reading(val_pct=0.5, seed=9)
    texts = [f"doc {i}" for i in range(40)]
    s = tokenize_contiguous(texts, tok, DatasetWriter(tmp_path, "c", "contiguous"), reading)
    p = tokenize_padded([(t, "x") for t in texts], tok, DatasetWriter(tmp_path, "p", "padded"), 8, reading)
    in_val = int(reading.is_val(0, 40).sum())
    assert p["val_rows"] == in_val and s["val_tokens"] == sum(len(tok.encode(t)) + 1 for t, v in
                                                               zip(texts, reading.is_val(0, 40)) if v)
