"""Helpers of the trainer tests: tiny contiguous and padded datasets, tiny configs, a list logger."""

from __future__ import annotations

import copy
import hashlib
import json

import numpy as np

from theseus.data.store import DatasetWriter

VOCAB = 256


class ListLog:
    """A loguru-like logger that keeps (level, message) pairs."""

    def __init__(self):
        self.records: list[tuple[str, str]] = []

    def _add(self, level):
        return lambda message, *a, **k: self.records.append((level, str(message)))

    def __getattr__(self, level):
        if level in ("debug", "info", "warning", "error", "success", "trace"):
            return self._add(level)
        raise AttributeError(level)

    def messages(self, prefix: str = "") -> list[str]:
        return [m for _, m in self.records if m.startswith(prefix)]


def write_dataset(root, name="fineweb", tokens=40_000, vocab=VOCAB, seed=0):
    """A learnable token stream: next = (prev * 5 + 3 + noise) mod vocab."""
    rng = np.random.default_rng(seed)
    out = np.empty(tokens, np.int64)
    out[0] = 1
    noise = rng.integers(0, 2, tokens)
    for i in range(1, tokens):
        out[i] = (out[i - 1] * 5 + 3 + noise[i]) % vocab
    with DatasetWriter(str(root), name, "contiguous") as w:
        w.append("train", out[: tokens * 9 // 10])
        w.append("val", out[tokens * 9 // 10:])


def write_padded(root, name="chat", rows=200, width=32, vocab=VOCAB, seed=1):
    """A padded dataset: each row a short learnable sequence, then eot; only the second half counts."""
    rng = np.random.default_rng(seed)
    eot = vocab - 1
    tokens = np.full((rows, width), eot, dtype=np.uint32)
    mask = np.zeros((rows, width), dtype=bool)
    for i in range(rows):
        n = int(rng.integers(8, width))
        tokens[i, :n] = (np.arange(n) * 3 + i) % (vocab - 1)
        mask[i, n // 2:n] = True
    with DatasetWriter(str(root), name, "padded") as w:
        w.set_tokenizer({"backend": "tiktoken", "name": "toy", "vocab_size": vocab, "eot": eot})
        w.append("train", tokens[: rows * 9 // 10], mask[: rows * 9 // 10])
        w.append("val", tokens[rows * 9 // 10:], mask[rows * 9 // 10:])


BASE = {
    "architecture": {"n_embd": 32, "n_layers": 2, "n_head": 4, "block_size": 32, "vocab_size": VOCAB},
    "optimization": {"lr": 3e-3, "warmup_pct": 0.0, "decay_pct": 0.0},
    "training": {"batch_size": 8, "per_device_batch_size": 4, "tokens": 8 * 32 * 30, "validation_steps": 2},
    "logging": {"report_interval": 5, "checkpoint_interval": 10, "validation_interval": 10},
}


def config(**sections):
    """BASE with sections updated, e.g. config(training={"batch_size": 4})."""
    cfg = copy.deepcopy(BASE)
    for section, values in sections.items():
        cfg.setdefault(section, {}).update(values)
    return cfg


def pretrain(root, run_name, steps, **logging):
    """Write the test dataset into ``root`` and train a fresh ``gpt/train/pretrain`` run of ``steps``
    tiny steps there (``logging``: its logging section); the run's last node."""
    from theseus.quick import quick

    write_dataset(root)
    with quick(root) as q:
        q.build("gpt/train/pretrain", run_name).config.merge_with(
            config(training={"tokens": 8 * 32 * steps}, logging=logging))
        return q()


def tree_hash(tree) -> str:
    import jax

    h = hashlib.sha256()
    for leaf in jax.tree.leaves(tree):
        a = np.asarray(leaf)
        h.update(f"{a.dtype}{a.shape}".encode())
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


def char_tokenizer(folder) -> str:
    """A Hugging Face tokenizer of single characters (digits, '+', '=', newline) in ``folder``."""
    import tokenizers

    vocab = {"<|endoftext|>": 0, "[UNK]": 1, "+": 2, "=": 3, "\n": 4, **{str(d): 5 + d for d in range(10)}}
    hf = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="[UNK]"))
    hf.pre_tokenizer = tokenizers.pre_tokenizers.Split(tokenizers.Regex("."), behavior="isolated")
    hf.decoder = tokenizers.decoders.Fuse()
    hf.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<|endoftext|>"}))
    return str(folder)


def addition_run(tmp_path, steps: int) -> tuple[str, dict]:
    """A root holding the addition dataset (one-digit sums, character tokens, block 8) and a config training a
    small GPT on it for ``steps`` steps, its exact match scoring 100 one-digit sums with 3 new tokens."""
    from theseus.quick import quick

    root = str(tmp_path / "root")
    tokenizer = {"backend": "huggingface", "name": char_tokenizer(tmp_path)}
    with quick(root) as q:
        q.build("data/tokenize/addition", "sums")
        q.config.tokenizer.merge_with(tokenizer)
        q.config.data.addition.merge_with({"n": 2000, "max_digits": 1})
        q.config.data.block_size = 8
        q()
    config = {
        "architecture": {"n_embd": 64, "n_layers": 2, "n_head": 4, "block_size": 8, "vocab_size": 16,
                         "dtype": {"activation": "float32"}},
        "tokenizer": tokenizer, "data": {"dataset": "addition"},
        "optimization": {"lr": 1e-2, "warmup_pct": 0.05, "decay_pct": 0.3},
        "training": {"batch_size": 64, "per_device_batch_size": 64, "tokens": steps * 64 * 8, "validation_steps": 1},
        "logging": {"report_interval": steps, "validation_interval": steps, "checkpoint_interval": steps},
        "eval": {"length": 100, "exact_match": {"max_new_tokens": 3, "addition": {"max_digits": 1}}},
    }
    return root, config
