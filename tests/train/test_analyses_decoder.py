"""The analyses on the open-model decoder families: attention maps per query head (grouped key/value heads,
sliding windows, q/k norms), norms of sequential and parallel (GPT-NeoX) blocks, and a logit lens whose last
point is the model's own logits through each family's final norm and tied or untied unembedding."""

from __future__ import annotations

import json
import os

import jax
import numpy as np
import pytest
from omegaconf import OmegaConf

from tests.train._analysis_context import context_of
from tests.train._helpers import config, write_dataset
from theseus.jobs import job
from theseus.model.debug import capture
from theseus.model.decoder import Decoder
from theseus.model.decoder_config import FAMILIES, DecoderConfig
from theseus.quick import quick
from theseus.replay.analyze import analyze
from theseus.store import Store
from theseus.train.analyses import Attention, LogitLens, Norms
from theseus.train.analyses.attention import probabilities
from theseus.train.analyses.logit_lens import read_out
from theseus.train.analyses.trace import record
from theseus.train.jobs import PretrainGptNeox, PretrainLlama

SHAPE = dict(n_embd=32, n_head=4, n_layers=2, vocab_size=64, intermediate_size=48, block_size=16,
             activation_dtype="float32")
# family -> its test model's switches: grouped heads, a window, q/k norms, tied and untied heads all appear
SETTINGS = {
    "llama": dict(n_kv_head=2),
    "mistral": dict(n_kv_head=1, sliding_window=5),
    "qwen2": dict(n_kv_head=2),
    "qwen3": dict(n_kv_head=2, head_dim=16, tie_embeddings=True),
    "gemma": dict(n_kv_head=1),
    "gpt_neox": dict(),
}
INSTRUMENTED = OmegaConf.create({"architecture": {"instrumentation": {"residual": True, "components": True}}})


@job("tests/train/analyses-llama", "A Llama pretrained with every built-in analysis.")
class AnalysedLlama(PretrainLlama):
    ANALYSIS = [Attention, Norms, LogitLens]


@job("tests/train/analyses-neox", "A GPT-NeoX pretrained with every built-in analysis.")
class AnalysedNeox(PretrainGptNeox):
    ANALYSIS = [Attention, Norms, LogitLens]


def family_model(family: str, activation: str = "float32"):
    cfg = DecoderConfig.for_family(family, **{**SHAPE, **SETTINGS[family], "activation_dtype": activation})
    tokens = np.random.default_rng(0).integers(0, cfg.vocab_size, (2, 16)).astype(np.int32)
    model = Decoder(cfg)
    return model, model.init(jax.random.PRNGKey(1), tokens)["params"], tokens


def test_every_family_is_analysed():
    assert set(SETTINGS) == set(FAMILIES)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_attention_maps_are_per_query_head_causal_and_reproduce_the_heads_output(family):
    model, params, tokens = family_model(family)
    cfg = model.config
    trace = record(model, params, tokens)
    maps = np.asarray(probabilities(trace))
    assert maps.shape == (2, 2, cfg.n_head, 16, 16)
    assert np.allclose(maps.sum(-1), 1.0, atol=1e-6)
    rows, cols = np.indices((16, 16))
    hidden = (cols > rows) | ((cols <= rows - cfg.sliding_window) if cfg.sliding_window else False)
    assert (maps[..., hidden] == 0).all()
    # the maps times each query head's values are what the attention handed its output projection
    mixed = np.einsum("lbnts,lbsnh->lbtnh", maps, np.asarray(trace.values)).reshape(trace.mixed.shape)
    np.testing.assert_allclose(mixed, np.asarray(trace.mixed), atol=1e-5)
    result = Attention.compute(context_of(model, params, tokens), head=cfg.n_head - 1)
    assert result.arrays["attention"].shape == (2, 2, 1, 16, 16)
    with pytest.raises(ValueError, match=f"--head {cfg.n_head} is out of range"):
        Attention.compute(context_of(model, params, tokens), head=cfg.n_head)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_logit_lens_of_the_last_layer_is_the_models_own_logits(family):
    model, params, tokens = family_model(family)
    logits = np.asarray(model.apply({"params": params}, tokens))
    trace = record(model, params, tokens)
    np.testing.assert_allclose(np.asarray(trace.read_out(trace.blocks[-1])), logits, atol=1e-5)
    lens = read_out(trace, np.roll(tokens, -1, axis=1))
    assert lens["top_ids"].shape == (3, 2, 16, 5) and lens["loss"].shape == (3,)
    assert (lens["top_ids"][-1, ..., 0] == logits.argmax(-1)).all()
    result = LogitLens.compute(context_of(model, params, tokens))
    assert result.arrays["agreement"][-1] == 1.0


def test_the_logit_lens_reads_a_bf16_gemma_as_the_model_does():
    model, params, tokens = family_model("gemma", activation="bfloat16")
    logits = np.asarray(model.apply({"params": params}, tokens))
    trace = record(model, params, tokens)
    assert np.array_equal(np.asarray(trace.read_out(trace.blocks[-1])), logits)  # same ops, same dtype


@pytest.mark.parametrize("family", ["llama", "gpt_neox"])
def test_norms_of_sequential_and_parallel_blocks(family):
    model, params, tokens = family_model(family)
    result = Norms.compute(context_of(model, params, tokens, INSTRUMENTED))
    assert result.arrays["residual"].shape == (5, 2, 16) and result.arrays["components"].shape == (2, 2)
    assert result.arrays["activations"].shape == (3,) and result.arrays["layer_weights"].shape == (2,)
    block = np.concatenate([np.asarray(a, np.float64).ravel() for a in jax.tree.leaves(params["blocks_1"])])
    assert result.arrays["layer_weights"][1] == pytest.approx(np.linalg.norm(block))
    for i in range(2):
        out = np.asarray(capture(model, {"params": params}, f"blocks_{i}", tokens).output, np.float64)
        assert result.arrays["activations"][i + 1] == pytest.approx(np.linalg.norm(out, axis=-1).mean(), rel=1e-5)
    # a block's output is its input plus what its attention and MLP add, in parallel (NeoX) or in turn
    trace = record(model, params, tokens)
    entering = np.concatenate([np.asarray(trace.embeddings)[None], np.asarray(trace.blocks)[:-1]])
    np.testing.assert_allclose(entering + np.asarray(trace.attn) + np.asarray(trace.mlp), np.asarray(trace.blocks),
                               atol=1e-5)


# ---------------------------------------------------------------------------------------- in a training job


@pytest.mark.slow
@pytest.mark.parametrize("key, heads", [("tests/train/analyses-llama", 4), ("tests/train/analyses-neox", 4)])
def test_a_family_job_publishes_every_analysis(tmp_path, key, heads):
    root = str(tmp_path)
    write_dataset(root)
    cfg = config(training={"tokens": 8 * 32 * 2}, logging={"report_interval": 1, "checkpoint_interval": 100,
                                                           "validation_interval": 2})
    cfg["architecture"] = {"n_embd": 32, "n_layers": 2, "n_head": 4, "n_kv_head": 2 if "llama" in key else -1,
                           "intermediate_size": 64, "block_size": 32, "vocab_size": 256,
                           "dtype": {"activation": "float32"},
                           "instrumentation": {"residual": True, "components": True}}  # the norms' detail
    with quick(root) as q:
        q.build(key, "run")
        q.config.merge_with(OmegaConf.create(cfg))
        created = q.create()
        created()
    node = Store(root).find().nonce(created.node.nonce).seq(2).last()
    got = Store(root).record(node)
    assert 0 < got["analysis/attention/entropy"] <= np.log(32) and got["analysis/norms/weights"] > 0
    folder = os.path.join(root, "objects", node.id, "analysis")
    attention = np.load(os.path.join(folder, "attention", "attention.npy"))
    assert attention.shape == (2, 2, heads, 32, 32)  # layer, sample, query head, query, key
    assert np.allclose(attention.astype(np.float32).sum(-1), 1.0, atol=1e-2)  # stored as float16
    assert np.load(os.path.join(folder, "logit-lens", "agreement.npy"))[-1] == 1.0
    assert np.load(os.path.join(folder, "norms", "activations.npy")).shape == (3,)
    assert np.load(os.path.join(folder, "norms", "components.npy")).shape == (2, 2)  # layer, attention / MLP
    for name in ("attention", "norms", "logit-lens"):
        manifest = json.load(open(os.path.join(folder, name, "MANIFEST.json")))
        assert f"{name}.png" in {f["path"] for f in manifest["files"]}
    # `theseus analyze` on the checkpoint restores the same parameters: the last head's maps again
    again = analyze(root, node.id, "attention", head=heads - 1)
    np.testing.assert_allclose(again.arrays["attention"][:, :, 0], attention[:, :, heads - 1], atol=1e-3)
