"""Parity with transformers, the contract of the decoder families: tiny random HF models, saved with a tokenizer
trained offline, imported through theseus.hf.convert, give the same logits (1e-4 fp32, short and 512-token
prompts), export back to a folder transformers loads with the same logits (1e-5) and that re-imports bit for
bit, and generate the same 32 greedy tokens; bf16 activations stay close (per-token KL, printed)."""

from __future__ import annotations

import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")
safetensors_numpy = pytest.importorskip("safetensors.numpy")
tokenizers = pytest.importorskip("tokenizers")

from theseus.hf.convert import config_from_hf, config_to_hf, dump_params, load_params  # noqa: E402
from theseus.model.decode import Sampler, generate_tokens  # noqa: E402
from theseus.model.decoder import Decoder  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
SHAPE = dict(vocab_size=1000, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
             max_position_embeddings=1024)
LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 64, "rope_theta": 10000.0}
LINEAR = {"rope_type": "linear", "factor": 4.0, "rope_theta": 10000.0}
# (id, HF config class name, its settings): every family, every rope variant, kv heads 1 / 2 / 4, tied and untied
CASES = [
    ("llama-kv4-untied", "LlamaConfig", dict(num_key_value_heads=4)),
    ("llama-kv2-tied-linear", "LlamaConfig", dict(num_key_value_heads=2, tie_word_embeddings=True,
                                                  rope_parameters=LINEAR)),
    ("llama-kv1-llama3", "LlamaConfig", dict(num_key_value_heads=1, rope_parameters=LLAMA3)),
    ("mistral-kv1-window16", "MistralConfig", dict(num_key_value_heads=1, sliding_window=16)),
    ("qwen2-kv2", "Qwen2Config", dict(num_key_value_heads=2)),
    ("qwen3-kv2-head16-tied", "Qwen3Config", dict(num_key_value_heads=2, head_dim=16, tie_word_embeddings=True)),
    ("gemma-kv1", "GemmaConfig", dict(num_key_value_heads=1, head_dim=8)),
    ("gpt_neox-parallel", "GPTNeoXConfig", dict()),
    ("gpt_neox-sequential-half", "GPTNeoXConfig", dict(use_parallel_residual=False, rotary_pct=0.5)),
]


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    """A byte-level BPE of ~1,000 tokens trained offline on the repository's README."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator([(REPO / "README.md").read_text()],
                            trainers.BpeTrainer(vocab_size=1000, special_tokens=["<eos>"],
                                                initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    return transformers.PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<eos>")


def prompts(tokenizer) -> tuple[list[int], list[int]]:
    """A short prompt and a 512-token one, from the README's text."""
    ids = tokenizer((REPO / "README.md").read_text())["input_ids"]
    while len(ids) < 512:
        ids = ids + ids
    return ids[:12], ids[:512]


def hf_model(config_class: str, settings: dict, folder: Path, tokenizer, initializer_range: float = 0.02):
    """A random fp32 HF model of ``settings``, saved with the tokenizer into ``folder``."""
    torch.manual_seed(0)
    config = getattr(transformers, config_class)(**SHAPE, **settings, initializer_range=initializer_range)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return model


def hf_logits(model, ids: list[int]) -> np.ndarray:
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].numpy()


def load(folder: Path, **overrides):
    """The theseus Decoder and params of an HF folder."""
    cfg = config_from_hf(json.loads((folder / "config.json").read_text()), **overrides)
    tensors = safetensors_numpy.load_file(str(folder / "model.safetensors"))
    return Decoder(cfg), load_params(cfg, tensors)


def theseus_logits(model, params, ids: list[int]) -> np.ndarray:
    return np.asarray(jax.jit(model.apply)({"params": params}, jnp.asarray([ids]))[0], np.float32)


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_import_export_generate_match_transformers(case, tokenizer, tmp_path):
    name, config_class, settings = case
    short, long = prompts(tokenizer)
    reference = hf_model(config_class, settings, tmp_path / "hf", tokenizer)
    model, params = load(tmp_path / "hf", activation_dtype="float32")

    for ids in (short, long):  # import: logits within 1e-4 of transformers
        gap = np.abs(theseus_logits(model, params, ids) - hf_logits(reference, ids)).max()
        assert gap < 1e-4, f"{name}: imported logits differ by {gap} on {len(ids)} tokens"

    exported = tmp_path / "export"  # export: transformers loads it and agrees within 1e-5
    exported.mkdir()
    (exported / "config.json").write_text(json.dumps(config_to_hf(model.config, eos_token_id=None)))
    safetensors_numpy.save_file(dump_params(model.config, params), str(exported / "model.safetensors"))
    reloaded = transformers.AutoModelForCausalLM.from_pretrained(exported, dtype=torch.float32).eval()
    ours = theseus_logits(model, params, long)
    gap = np.abs(hf_logits(reloaded, long) - ours).max()
    assert gap < 1e-5, f"{name}: the export's logits differ by {gap}"
    again_model, again = load(exported, activation_dtype="float32")  # a second import is bit for bit the first
    assert again_model.config == model.config
    assert jax.tree.all(jax.tree.map(lambda a, b: a.dtype == b.dtype and np.array_equal(a, b), params, again))

    reference.generation_config.eos_token_id = None  # greedy: 32 tokens, identical ids
    reference.generation_config.pad_token_id = 0
    with torch.no_grad():
        expected = reference.generate(torch.tensor([short]), do_sample=False, max_new_tokens=32)[0, len(short):]
    got = generate_tokens(model, params, [short], 32, Sampler(temperature=0.0)).row(0)
    assert got == expected.tolist(), f"{name}: greedy tokens differ"

    # bf16 activations: per-token KL against transformers' fp32, stated; on weights 10x the usual init, so the
    # next-token distributions are far from uniform and rounding shows
    sharp = hf_model(config_class, settings, tmp_path / "sharp", tokenizer, initializer_range=0.2)
    bf16_model, bf16_params = load(tmp_path / "sharp", activation_dtype="bfloat16")
    p = jax.nn.log_softmax(hf_logits(sharp, long), axis=-1)
    q = jax.nn.log_softmax(theseus_logits(bf16_model, bf16_params, long), axis=-1)
    kl = np.asarray(jnp.sum(jnp.exp(p) * (p - q), axis=-1))
    entropy = float(-jnp.sum(jnp.exp(p) * p, axis=-1).mean())
    print(f"\n{name}: bf16 activations, per-token KL(transformers fp32 || theseus bf16) over 512 tokens: "
          f"mean {kl.mean():.2e}, max {kl.max():.2e} (fp32 entropy {entropy:.2f} nats)")
    assert kl.mean() < 1e-3 and kl.max() < 1e-2


def test_an_unsupported_rope_type_is_refused_by_name():
    config = transformers.LlamaConfig(**SHAPE, rope_parameters={"rope_type": "yarn", "factor": 2.0,
                                                               "rope_theta": 10000.0}).to_dict()
    with pytest.raises(ValueError, match="rope type 'yarn' is not supported"):
        config_from_hf(config)


def test_a_model_type_that_is_no_decoder_family_is_refused():
    with pytest.raises(ValueError, match="model_type 'gpt2' is not a decoder family"):
        config_from_hf(transformers.GPT2Config().to_dict())
