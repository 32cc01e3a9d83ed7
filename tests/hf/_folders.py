"""Tiny Hugging Face model folders made offline: a random model of each family saved by transformers, with a
byte-level BPE tokenizer trained by `tokenizers` on local text (Python's own docs), as the tests import them."""

from __future__ import annotations

import os

VOCAB = 300  # the byte alphabet (256), <|endoftext|> and merges
TEXT = ("The quick brown fox jumps over the lazy dog. def add(a, b):\n    return a + b\n" * 20 +
        "import os\nprint(os.path.join('a', 'b'))\n" * 20)


def train_tokenizer(path: str) -> None:
    """A byte-level BPE tokenizer of VOCAB tokens (``<|endoftext|>`` its end of text) saved in ``path``."""
    import tokenizers
    import transformers

    tok = tokenizers.Tokenizer(tokenizers.models.BPE())
    tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tokenizers.decoders.ByteLevel()
    trainer = tokenizers.trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=["<|endoftext|>"],
                                             initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([TEXT], trainer)
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>",
                                                bos_token="<|endoftext|>")
    fast.save_pretrained(path)


def config_of(family: str, **overrides):
    """A tiny transformers config of ``family`` (2 layers, 4 heads, 2 kv heads where the family has them)."""
    import transformers

    common = dict(vocab_size=320, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                  intermediate_size=64, max_position_embeddings=64, eos_token_id=0, bos_token_id=0)
    if family == "gpt_neox":
        return transformers.GPTNeoXConfig(**common, rotary_pct=0.5, use_parallel_residual=True,
                                          tie_word_embeddings=False, **overrides)
    classes = {"llama": transformers.LlamaConfig, "mistral": transformers.MistralConfig,
               "qwen2": transformers.Qwen2Config, "qwen3": transformers.Qwen3Config,
               "gemma": transformers.GemmaConfig}
    extra = {"head_dim": 8} if family in ("qwen3", "gemma") else {}
    return classes[family](**common, num_key_value_heads=2, **extra, **overrides)


def tiny_folder(path: str, family: str, dtype: str = "float32", **overrides):
    """Save a random tiny ``family`` model (seeded) and the tokenizer in ``path``; returns the model (eval mode)."""
    import torch
    import transformers

    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config_of(family, **overrides))
    with torch.no_grad():  # norms and biases away from their initial ones and zeros, so their mapping is tested
        for name, p in model.named_parameters():
            if "norm" in name or name.endswith("bias"):
                p.add_(0.1 * torch.randn_like(p))
    model = model.to(getattr(torch, dtype)).eval()
    model.save_pretrained(path)
    train_tokenizer(path)
    assert os.path.isfile(os.path.join(path, "tokenizer.json"))
    return model


def imported_tiny(tmp, family: str = "llama"):
    """A tiny ``family`` model saved in ``tmp/base`` and imported (float32) as run ``base`` of the root ``tmp/root``:
    ``(the transformers model, the root, the imported node)``."""
    from theseus.hf.importer import import_hf

    hf_model = tiny_folder(os.path.join(tmp, "base"), family)
    root = os.path.join(tmp, "root")
    return hf_model, root, import_hf(os.path.join(tmp, "base"), root, name="base", dtype="float32")
