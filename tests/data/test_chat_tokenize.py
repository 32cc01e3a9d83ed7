"""data/tokenize/chat: conversations into padded or packed rows, overlong ones counted, and the loaders' segment ids."""

import json
import random

import numpy as np
import pytest

from theseus.data.loader import Loader
from theseus.data.mixture import Sampling, open_mixture
from theseus.data.packing import positions
from theseus.data.store import list_datasets, open_dataset
from theseus.errors import BadInput
from theseus.jobs import get_job
from theseus.store import Store

WORDS = "the quick brown fox jumps over lazy dog and cat sat on a mat with its hat".split()


def chats(n: int, seed: int = 0, long_every: int = 0) -> list[dict]:
    rng = random.Random(seed)

    def line(k):
        return " ".join(rng.choice(WORDS) for _ in range(k))

    out = []
    for i in range(n):
        turns = [{"role": "system", "content": "Be brief."}] if i % 3 == 0 else []
        for _ in range(1 + i % 2):
            turns += [{"role": "user", "content": line(rng.randint(3, 12))},
                      {"role": "assistant", "content": line(200 if long_every and i % long_every == 0 else
                                                            rng.randint(2, 20))}]
        out.append({"messages": turns})
    return out


def write_jsonl(path, records) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return str(path)


def run_chat(root, paths, **data):
    return get_job("data/tokenize/chat").create(str(root), "chat", {"data": {"chat": {"paths": paths}, **data}})()


def test_packed_rows_fill_the_block_and_hold_the_same_tokens_as_unpacked(tmp_path):
    corpus = write_jsonl(tmp_path / "c.jsonl", chats(300))
    plain = run_chat(tmp_path / "root", [corpus], block_size=256, val_pct=0.1)
    packed = run_chat(tmp_path / "root", [corpus], block_size=256, val_pct=0.1, pack=True,
                      chat={"paths": [corpus], "dataset": "packed"})
    assert packed["real_token_share"] >= 0.9 > plain["real_token_share"]
    assert packed["train_rows"] < plain["train_rows"] / 3 and packed["train_tokens"] == plain["train_tokens"]
    store = Store(str(tmp_path / "root"))
    shares = store.find().job("data/tokenize/chat").has("data/real_token_share").select(keys=["data/real_token_share"])
    assert sorted(r["data/real_token_share"] for r in shares) == sorted([plain["real_token_share"],
                                                                        packed["real_token_share"]])
    ds, pds = open_dataset(tmp_path / "root", "chat"), open_dataset(tmp_path / "root", "packed")
    assert pds.packed and not ds.packed and ds.segments("train") is None
    for split in ("train", "val"):
        one = Loader(ds, split, batch_size=len(ds.tokens(split)), block_size=256).batch(0)
        many = Loader(pds, split, batch_size=len(pds.tokens(split)), block_size=256).batch(0)
        assert one.keys() == {"x", "y", "padding_mask"}
        # the same targets are trained on, whatever the rows they sit in
        assert sorted(one["y"][one["padding_mask"]].tolist()) == sorted(many["y"][many["padding_mask"]].tolist())
        assert many["segment_ids"].dtype == many["positions"].dtype == np.int32
        seg, pos = many["segment_ids"], many["positions"]
        first = np.concatenate([np.ones((len(seg), 1), bool), seg[:, 1:] != seg[:, :-1]], axis=1)
        assert (pos[first] == 0).all() and (pos[~first] > 0).all()
        assert not many["padding_mask"][:, :-1][first[:, 1:]].any()  # no target across a segment boundary
        assert not many["padding_mask"][seg == 0].any()


def test_packing_plan_is_a_pure_function_of_the_data(tmp_path):
    corpus = write_jsonl(tmp_path / "c.jsonl", chats(120, seed=3))
    hashes = {run_chat(tmp_path / f"r{i}", [corpus], block_size=128, pack=True)["content_hash"] for i in range(2)}
    assert len(hashes) == 1


def test_mixture_of_packed_and_contiguous_data_gives_segment_ids(tmp_path):
    from theseus.data.store import DatasetWriter

    root = tmp_path / "root"
    run_chat(root, [write_jsonl(tmp_path / "c.jsonl", chats(60))], block_size=128, pack=True, val_pct=0)
    with DatasetWriter(str(root), "text", "contiguous") as w:
        w.append("train", np.arange(1000)), w.append("val", np.arange(100))
    mix = open_mixture(str(root), [Sampling("chat", 1), Sampling("text", 1)], batch_size=8, block_size=64)
    b = mix.batch(0)
    from_text = mix.source(0) == 1
    assert (b["segment_ids"][from_text] == 1).all() and (b["positions"][from_text] == np.arange(64)).all()
    chat_segments = b["segment_ids"][~from_text]
    assert (chat_segments > 1).any() and (b["positions"][~from_text] == positions(chat_segments)).all()


def test_overlong_conversations_are_truncated_or_dropped_and_counted(tmp_path):
    corpus = write_jsonl(tmp_path / "c.jsonl", chats(40, long_every=10))
    cut = run_chat(tmp_path / "root", [corpus], block_size=128, val_pct=0)
    dropped = run_chat(tmp_path / "root", [corpus], block_size=128, val_pct=0, overlong="drop",
                       chat={"paths": [corpus], "dataset": "dropped"})
    assert (cut["truncated"], cut["dropped"], cut["train_rows"]) == (4, 0, 40)
    assert (dropped["truncated"], dropped["dropped"], dropped["train_rows"]) == (0, 4, 36)
    records = Store(str(tmp_path / "root")).find().job("data/tokenize/chat").has("data/dropped")
    assert sorted(r["data/dropped"] for r in records.select(keys=["data/dropped"])) == [0, 4]


def test_saved_dataset_folders_and_prompt_response_rows(tmp_path):
    import datasets

    datasets.Dataset.from_list(chats(10)).save_to_disk(str(tmp_path / "saved"))
    pairs = write_jsonl(tmp_path / "pairs.jsonl", [{"prompt": "1+1?", "response": "2"}] * 5)
    summary = run_chat(tmp_path / "root", [str(tmp_path / "saved"), pairs], block_size=256, val_pct=0)
    assert summary["samples"] == 15 and summary["train_rows"] == 15


def test_bad_input_names_the_problem_and_writes_nothing(tmp_path):
    root = tmp_path / "root"
    good = write_jsonl(tmp_path / "good.jsonl", chats(5))
    with pytest.raises(BadInput, match="data.overlong must be one of truncate, drop"):
        run_chat(root, [good], overlong="cut")
    with pytest.raises(BadInput, match="data.chat.paths is empty"):
        run_chat(root, [])
    no_answer = write_jsonl(tmp_path / "bad.jsonl", chats(3) + [{"messages": [{"role": "user", "content": "hi"}]}])
    with pytest.raises(BadInput, match=r"bad.jsonl:4: the conversation has no assistant tokens"):
        run_chat(root, [no_answer])
    (tmp_path / "notjson.jsonl").write_text("{oops\n")
    with pytest.raises(BadInput, match=r"notjson.jsonl:1: not a JSON line"):
        run_chat(root, [str(tmp_path / "notjson.jsonl")])
    with pytest.raises(BadInput, match=r"wrong.jsonl:1: a chat record has 'messages'"):
        run_chat(root, [write_jsonl(tmp_path / "wrong.jsonl", [{"text": "x"}])])
    assert list_datasets(str(root)) == []
