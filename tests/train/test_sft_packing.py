"""Packed and unpacked rows of the same conversations give the same loss and gradients through the train step."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from theseus.data.loader import Loader
from theseus.data.store import open_dataset
from theseus.jobs import get_job
from theseus.model.config import GPTConfig
from theseus.model.decoder import Decoder
from theseus.model.decoder_config import DecoderConfig
from theseus.model.gpt import GPT
from theseus.train.step import make_grad_fn

CHATS = [[{"role": "user", "content": f"What is {a} plus {b}?"}, {"role": "assistant", "content": f"{a + b}."},
          {"role": "user", "content": "Say it in words."}, {"role": "assistant", "content": "I cannot" * (a % 3)}]
         for a, b in [(1, 2), (3, 4), (10, 20), (7, 8), (5, 6), (11, 13), (2, 2), (9, 1)]]


VOCAB = 128


@pytest.fixture(scope="module")
def batches(tmp_path_factory):
    """The whole of a chat dataset as one batch: unpacked (a conversation a row) and packed (several a row)."""
    tmp = tmp_path_factory.mktemp("sft-packing")
    corpus = tmp / "chat.jsonl"
    corpus.write_text("".join(json.dumps({"messages": [m for m in c if m["content"]]}) + "\n" for c in CHATS))
    out = {}
    for name, pack in (("plain", False), ("packed", True)):
        get_job("data/tokenize/chat").create(str(tmp), name, {"data": {
            "chat": {"paths": [str(corpus)], "dataset": name}, "block_size": 128, "pack": pack, "val_pct": 0}})()
        ds = open_dataset(str(tmp), name)
        out[name] = Loader(ds, batch_size=len(ds.tokens("train")), block_size=128).batch(0)
    assert len(out["packed"]["x"]) < len(out["plain"]["x"])
    ids = np.unique(np.concatenate([out[n][k].ravel() for n in out for k in ("x", "y")]))
    for batch in out.values():  # the ids renumbered densely, so a small vocabulary (a fast test) holds them
        batch["x"], batch["y"] = np.searchsorted(ids, batch["x"]), np.searchsorted(ids, batch["y"])
    assert len(ids) <= VOCAB
    return out


def _model(kind: str):
    if kind == "gpt":  # learned positions: the packed rows' positions must restart per conversation
        return GPT(GPTConfig(n_embd=32, n_head=4, n_layers=2, vocab_size=VOCAB, block_size=128, rope=False,
                             activation_dtype="float32"))
    return Decoder(DecoderConfig.for_family("llama", n_embd=32, n_head=4, n_kv_head=2, n_layers=2, vocab_size=VOCAB,
                                            block_size=128, activation_dtype="float32"))


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["gpt", "llama"])
def test_packed_and_unpacked_rows_give_equal_loss_and_grads(batches, kind):
    model = _model(kind)
    params = model.init(jax.random.PRNGKey(0), jnp.zeros((1, 128), jnp.int32))["params"]
    grad_fn = jax.jit(make_grad_fn(model))
    (plain_loss, plain_grads, plain_n), (packed_loss, packed_grads, packed_n) = (
        grad_fn(params, {k: jnp.asarray(v) for k, v in batches[name].items()}, jax.random.PRNGKey(1))
        for name in ("plain", "packed"))
    assert int(plain_n) == int(packed_n) > 0
    assert abs(float(plain_loss) - float(packed_loss)) < 1e-5
    for a, b in zip(jax.tree.leaves(plain_grads), jax.tree.leaves(packed_grads)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-5)


@pytest.mark.slow
def test_packed_and_unpacked_training_give_equal_losses_through_the_trainer(tmp_path):
    """Two steps of the whole data as one batch, a conversation a row or packed: the same losses (fp32, 1e-5)."""
    from tests.hf._folders import train_tokenizer
    from theseus.quick import quick
    from theseus.store import Store

    train_tokenizer(str(tmp_path / "tok"))  # byte-level: a small vocabulary, and ChatML markers as plain text
    tokenizer = {"backend": "huggingface", "name": str(tmp_path / "tok")}
    corpus = tmp_path / "chat.jsonl"
    corpus.write_text("".join(json.dumps({"messages": [m for m in c if m["content"]]}) + "\n" for c in CHATS))
    root, losses, rows = str(tmp_path / "root"), {}, {}
    for name, pack in (("plain", False), ("packed", True)):
        with quick(root) as q:
            q.build("data/tokenize/chat", f"tokenize-{name}")
            q.config.tokenizer.merge_with(tokenizer)
            q.config.data.merge_with({"chat": {"paths": [str(corpus)], "template": "chatml", "dataset": name},
                                      "block_size": 512, "pack": pack, "val_pct": 0})
            rows[name] = q()["train_rows"]
        with quick(root) as q:
            q.build("gpt/train/pretrain", f"train-{name}").config.merge_with({
                "architecture": {"n_embd": 32, "n_layers": 2, "n_head": 4, "block_size": 512, "vocab_size": 320,
                                 "rope": False, "dtype": {"activation": "float32"}},
                "tokenizer": tokenizer, "data": {"dataset": name},
                "training": {"batch_size": rows[name], "per_device_batch_size": rows[name], "steps": 2,
                             "validation": False, "evaluate": False},
                "logging": {"report_interval": 1, "checkpoint_interval": 2, "validation_interval": 2}})
            last = q()
        found = Store(root).find().nonce(last.nonce).has("train/loss").select(keys=["train/loss"])
        losses[name] = [r["train/loss"] for r in found]
    assert rows["packed"] < rows["plain"]
    assert len(losses["plain"]) == 2 and np.allclose(losses["plain"], losses["packed"], rtol=0, atol=1e-5), losses


MULTIDEVICE = r"""
import json, sys, tempfile
sys.path.insert(0, {repo!r})
import jax
from tests.hf._folders import train_tokenizer
from theseus.jobs import get_job
from theseus.train.sft import SFT
from theseus.train.trainer import Trainer

root = tempfile.mkdtemp()
train_tokenizer(root + "/tok")
corpus = root + "/chat.jsonl"
open(corpus, "w").write("".join(json.dumps({{"messages": [m for m in c if m["content"]]}}) + "\n" for c in {chats!r}))
get_job("data/tokenize/chat").create(root, "tok", {{
    "tokenizer": {{"backend": "huggingface", "name": root + "/tok"}},
    "data": {{"chat": {{"paths": [corpus], "template": "chatml"}}, "block_size": 256, "pack": True,
             "val_pct": 0.25}}}})()

def make(devices, per_device, **shard):
    cfg = {{"architecture": {{"n_embd": 32, "n_layers": 2, "n_head": 4, "block_size": 256, "vocab_size": 320,
                              "dtype": {{"activation": "float32"}}}},
            "tokenizer": {{"backend": "huggingface", "name": root + "/tok"}}, "data": {{"dataset": "chat"}},
            "optimization": {{"lr": 1e-3}}, "shard": shard,
            "training": {{"batch_size": 8, "per_device_batch_size": per_device, "steps": 3, "validation_steps": 1,
                          "init_from": "(the Trainer starts fresh; the job would load this checkpoint)"}},
            "logging": {{"report_interval": 1, "validation_interval": 100}}}}
    return Trainer(cfg, root, devices=devices, recipe=SFT.RECIPE(), peak_flops=1e12, progress=False)

one = make(jax.devices()[:1], 8)
eight = make(jax.devices(), 1, fsdp=True)
batch = eight.batch()
emit({{"single": [one.tick()["train/loss"] for _ in range(3)], "eight": [eight.tick()["train/loss"] for _ in range(3)],
       "keys": sorted(batch), "segments": int(batch["segment_ids"].max())}})
"""


@pytest.mark.slow
def test_packed_sft_on_8_devices_trains_as_on_one():
    import pathlib

    from tests.train._subproc import run_python

    repo = str(pathlib.Path(__file__).resolve().parents[2])
    chats = [[m for m in c if m["content"]] for c in CHATS] * 3
    out = run_python(MULTIDEVICE.format(repo=repo, chats=chats), devices=8, timeout=600)
    assert out["keys"] == ["padding_mask", "positions", "segment_ids", "x", "y"] and out["segments"] > 1
    np.testing.assert_allclose(out["eight"], out["single"], rtol=1e-5)
