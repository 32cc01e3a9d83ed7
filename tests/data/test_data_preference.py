"""``data/tokenize/preference`` and `PairLoader`: prompt/chosen/rejected records as padded row pairs, the
mask on the responses only, both rows of a pair in one split and in one batch, the batch of step k a pure
function of the data and k."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.docstrings import examples_fail, names_without_examples
from theseus.data.loader import Loader
from theseus.data.preference import PairLoader
from theseus.data.store import DatasetWriter, list_datasets, open_dataset
from theseus.data.tokenizer import get_tokenizer
from theseus.errors import BadInput
from theseus.quick import quick


def _write(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return str(path)


def _tokenize(root, paths, **data):
    with quick(str(root)) as q:
        q.build("data/tokenize/preference", "prefs")
        q.config.data.preference.paths = paths
        q.config.data.block_size = data.pop("block_size", 16)
        for key, value in data.items():
            q.config.data[key] = value
        return q.create()()


RECORDS = [{"prompt": f"{i}+1=", "chosen": str(i + 1), "rejected": f"{i + 2} maybe"} for i in range(60)]


@pytest.fixture(scope="module")
def prefs(tmp_path_factory):
    root = tmp_path_factory.mktemp("prefs")
    summary = _tokenize(root, [_write(root / "p.jsonl", RECORDS)], val_pct=0.2)
    return root, summary


def test_each_record_is_a_chosen_row_then_its_rejected_row_masked_on_the_responses(prefs):
    root, summary = prefs
    ds = open_dataset(str(root), "preference")
    assert ds.meta["pairs"] is True and summary["pairs"] == 60 and summary["val_rows"] > 0
    tok = get_tokenizer()
    texts = {(r["prompt"], r["chosen"], r["rejected"]) for r in RECORDS}
    for split in ("train", "val"):
        tokens, mask = ds.tokens(split), ds.mask(split)
        assert len(tokens) % 2 == 0  # both rows of a pair in the same split
        for c in range(0, len(tokens), 2):
            start = int(np.argmax(mask[c]))
            assert start == int(np.argmax(mask[c + 1]))  # the same prompt
            assert (tokens[c, :start] == tokens[c + 1, :start]).all()
            chosen = tok.decode(tokens[c][mask[c]][:-1])  # the response, then the eot
            rejected = tok.decode(tokens[c + 1][mask[c + 1]][:-1])
            assert (tok.decode(tokens[c, :start]), chosen, rejected) in texts
    assert summary["train_rows"] + summary["val_rows"] == 120


def test_chat_pairs_are_rendered_with_the_template_and_masked_on_the_last_assistant_turn(tmp_path):
    history = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "1+1?"},
               {"role": "assistant", "content": "2"}, {"role": "user", "content": "and 2+2?"}]
    pair = {"chosen": history + [{"role": "assistant", "content": "4"}],
            "rejected": history + [{"role": "assistant", "content": "five"}]}
    summary = _tokenize(tmp_path, [_write(tmp_path / "c.jsonl", [pair])], val_pct=0.0, block_size=128)
    assert summary["pairs"] == 1
    ds, tok = open_dataset(str(tmp_path), "preference"), get_tokenizer()
    tokens, mask = ds.tokens("train"), ds.mask("train")
    assert [tok.decode(tokens[i][mask[i]]) for i in (0, 1)] == ["4<|im_end|>", "five<|im_end|>"]  # no eot added
    assert tok.decode(tokens[0][:int(np.argmax(mask[0]))]).endswith("and 2+2?<|im_end|>\n<|im_start|>assistant\n")
    other = {**pair, "rejected": [{"role": "user", "content": "3+3?"}, {"role": "assistant", "content": "6"}]}
    with pytest.raises(BadInput, match=r"c2\.jsonl record 1: the chosen and rejected conversations must be the same"):
        _tokenize(tmp_path / "b", [_write(tmp_path / "c2.jsonl", [other])])
    unanswered = {**pair, "chosen": history}
    with pytest.raises(BadInput, match="the chosen conversation must end with an assistant turn, not 'user'"):
        _tokenize(tmp_path / "c", [_write(tmp_path / "c3.jsonl", [unanswered])])


def test_overlong_pairs_are_truncated_or_dropped_and_counted(tmp_path):
    long = {"prompt": "1+1=", "chosen": "2", "rejected": " no" * 30}
    paths = [_write(tmp_path / "p.jsonl", RECORDS[:4] + [long])]
    cut = _tokenize(tmp_path / "a", paths, val_pct=0.0)
    assert (cut["pairs"], cut["truncated"], cut["dropped"]) == (5, 1, 0)
    dropped = _tokenize(tmp_path / "b", paths, val_pct=0.0, overlong="drop")
    assert (dropped["pairs"], dropped["truncated"], dropped["dropped"]) == (4, 0, 1)
    with pytest.raises(BadInput, match="data.overlong must be one of truncate, drop"):
        _tokenize(tmp_path / "c", paths, overlong="wrap")


def test_a_bad_record_is_an_error_naming_it_and_writes_nothing(tmp_path):
    paths = [_write(tmp_path / "p.jsonl", RECORDS[:3] + [{"prompt": "x", "chosen": "y"}])]
    with pytest.raises(BadInput, match=r"p\.jsonl record 4: needs string fields prompt, chosen, rejected, or "
                                       r"chosen and rejected conversations \(missing rejected\)"):
        _tokenize(tmp_path, paths)
    assert list_datasets(str(tmp_path)) == []
    (tmp_path / "bad.jsonl").write_text('{"prompt": "x", \n')
    with pytest.raises(BadInput, match=r"bad\.jsonl record 1: not valid JSON"):
        _tokenize(tmp_path, [str(tmp_path / "bad.jsonl")])
    with pytest.raises(BadInput, match="data.preference.paths is empty"):
        _tokenize(tmp_path, [])


def test_batches_hold_whole_pairs_and_are_a_pure_function_of_the_step(prefs):
    root, _ = prefs
    ds = open_dataset(str(root), "preference")
    loader = PairLoader(ds, seed=3, batch_size=8, block_size=16)
    again = PairLoader(open_dataset(str(root), "preference"), seed=3, batch_size=8, block_size=16)
    pairs = ds.tokens("train").shape[0] // 2
    seen = []
    for k in range(pairs // 4):  # one epoch
        rows = loader.row_indices(k)
        assert (rows[:4] % 2 == 0).all() and (rows[4:] == rows[:4] + 1).all()
        seen += (rows[:4] // 2).tolist()
        for key, value in loader.batch(k).items():
            assert np.array_equal(value, again.batch(k)[key])
            assert np.array_equal(loader.batch(k, rows=slice(2, 6))[key], value[2:6])
    assert len(set(seen)) == len(seen) == pairs // 4 * 4  # no pair twice in an epoch
    assert not np.array_equal(loader.row_indices(0), PairLoader(ds, seed=4, batch_size=8, block_size=16)
                              .row_indices(0))


def test_the_pair_loader_refuses_odd_batches_and_datasets_without_pairs(prefs, tmp_path):
    root, _ = prefs
    with pytest.raises(BadInput, match="batch_size must be even"):
        PairLoader(open_dataset(str(root), "preference"), batch_size=3, block_size=16)
    with DatasetWriter(str(tmp_path), "rows", "padded") as w:
        w.append("train", np.zeros((4, 8)), np.ones((4, 8), bool))
        w.append("val", np.zeros((2, 8)), np.ones((2, 8), bool))
    with pytest.raises(BadInput, match="holds no preference pairs: make it with data/tokenize/preference"):
        PairLoader(open_dataset(str(tmp_path), "rows"), batch_size=2, block_size=8)
    assert Loader(open_dataset(str(tmp_path), "rows"), batch_size=2, block_size=8).batch(0)["x"].shape == (2, 8)


def test_docstring_examples():
    assert examples_fail("theseus.data.preference")[0] == 0
    assert names_without_examples("theseus.data.preference") == []
