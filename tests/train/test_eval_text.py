"""Perplexity and bits per byte (theseus.train.evals.text): equal to exp of the mean token cross-entropy and to
nats / ln 2 / bytes computed by hand on a toy with known byte counts; the val split of a job's dataset; eval.length."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.train._helpers import char_tokenizer
from theseus.data.tokenizer import get_tokenizer
from theseus.model.config import GPTConfig
from theseus.model.gpt import GPT, cross_entropy
from theseus.train.evals.text import BitsPerByte, split_documents, text_score
from theseus.train.example import tiny_example
from theseus.train.trainer import Trainer


def test_perplexity_and_bits_per_byte_by_hand_on_a_character_toy(tmp_path):
    tokenizer = get_tokenizer("huggingface", char_tokenizer(tmp_path))  # one token per ASCII byte, eot = 0
    model = GPT(GPTConfig(n_embd=32, n_head=4, n_layers=1, vocab_size=16, block_size=8,
                          activation_dtype="float32"))
    params = model.init(jax.random.PRNGKey(0), jnp.zeros((1, 8), jnp.int32))["params"]
    texts = ["12+34=46\n", "7+8=15"]  # 9 and 6 bytes: 15 bytes, 15 tokens
    result = text_score(model, params, tokenizer, texts)

    losses = []
    for text in texts:  # each document after eot, in windows of 8 predicted tokens
        sequence = [0, *tokenizer.encode(text)]
        for start in range(0, len(sequence) - 1, 8):
            x = (sequence[:start + 1] + sequence[start + 1:start + 9])[-9:]  # the last 9: 8 in, 8 targets
            logits = model.apply({"params": params}, jnp.array([x[:-1]]))
            ce = np.asarray(cross_entropy(logits, jnp.array([x[1:]])))[0]
            losses += ce[-len(sequence[start + 1:start + 9]):].tolist()
    assert result.tokens == len(losses) == 15 and result.bytes == 15
    assert result.metrics["perplexity"] == pytest.approx(math.exp(np.mean(losses)), rel=1e-5)
    assert result.metrics["bpb"] == pytest.approx(np.sum(losses) / math.log(2) / 15, rel=1e-5)

    capped = text_score(model, params, tokenizer, texts, limit=1)  # one window: the first 8 tokens of the first
    assert capped.windows == 1 and capped.tokens == 8 and capped.bytes == 8


def test_documents_of_a_split_are_cut_at_end_of_text():
    stream = np.array([9, 0, 5, 6, 0, 0, 7])
    assert [d.tolist() for d in split_documents(stream, eot=0)] == [[9], [5, 6], [7]]


def test_the_val_split_part_equals_the_mean_cross_entropy_of_its_windows(tmp_path):
    root, config = tiny_example(str(tmp_path))  # vocab 128 < the tokenizer's eot: the first token is context
    config["eval"] = {"length": 3}
    config["architecture"]["dtype"] = {"activation": "float32"}  # bfloat16 rounds differently per batch shape
    trainer = Trainer(config, root, peak_flops=1e12, progress=False)
    metrics = trainer.evaluate(parts=[BitsPerByte])
    assert sorted(metrics) == ["eval/fineweb-val/bpb", "eval/fineweb-val/perplexity"]
    from theseus.data.store import open_dataset

    val = np.asarray(open_dataset(root, "fineweb").tokens("val")[: 3 * 16 + 1], np.int32)
    x, y = val[:-1].reshape(3, 16), val[1:].reshape(3, 16)  # three windows of 16 predicted tokens
    ce = np.asarray(cross_entropy(trainer.model.apply({"params": trainer.params}, jnp.asarray(x)), jnp.asarray(y)))
    assert metrics["eval/fineweb-val/perplexity"] == pytest.approx(math.exp(ce.mean()), rel=1e-5)
    nbytes = len(trainer.tokenizer.decode(y.reshape(-1).tolist()).encode("utf-8"))
    assert metrics["eval/fineweb-val/bpb"] == pytest.approx(ce.sum() / math.log(2) / nbytes, rel=1e-5)
