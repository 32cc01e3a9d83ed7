"""The analyses: attention maps, norms and the logit lens, their numbers, their published files and their audit."""

from __future__ import annotations

import hashlib
import io
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import polars as pl
import pytest
from omegaconf import OmegaConf

from tests.train._analysis_context import context_of
from tests.train._helpers import VOCAB, config, write_dataset
from theseus.audit import audit
from theseus.jobs import job
from theseus.model import GPT, GPTConfig
from theseus.model.debug import capture
from theseus.quick import quick
from theseus.store import Store
from theseus.train.analyses import Attention, LogitLens, Norms
from theseus.train.analyses.attention import probabilities
from theseus.train.analyses.logit_lens import read_out
from theseus.train.analyses.norms import token_norms
from theseus.train.analyses.trace import record
from theseus.train.config import NotImplementedSetting
from theseus.train.jobs import Pretrain

NAMES = ("attention", "norms", "logit-lens")


@job("tests/train/analyses", "Pretrain with every built-in analysis.")
class Analysed(Pretrain):
    ANALYSIS = [Attention, Norms, LogitLens]


def tiny(rope=True, activation="float32", layers=2):
    cfg = GPTConfig(n_embd=32, n_head=4, n_layers=layers, vocab_size=64, block_size=16, rope=rope,
                    activation_dtype=activation)
    model = GPT(cfg)
    tokens = jnp.asarray(np.random.default_rng(0).integers(0, 64, (2, 16)), jnp.int32)
    params = model.init(jax.random.PRNGKey(1), tokens)["params"]
    return model, params, tokens


@pytest.mark.parametrize("rope", [True, False])
def test_attention_rows_sum_to_one_are_causal_and_reproduce_the_attention_output(rope):
    model, params, tokens = tiny(rope=rope)
    trace = record(model, params, tokens)
    maps = np.asarray(probabilities(trace))
    assert maps.shape == (2, 2, 4, 16, 16)
    assert np.allclose(maps.sum(-1), 1.0, atol=1e-6)
    assert (maps[..., np.triu_indices(16, k=1)[0], np.triu_indices(16, k=1)[1]] == 0).all()
    # the maps times the values are what the attention handed its output projection
    values = np.asarray(trace.values)
    mixed = np.einsum("lbnts,lbsnh->lbtnh", maps, values).reshape(2, 2, 16, 32)
    assert np.allclose(mixed, np.asarray(trace.mixed), atol=1e-5)


def test_attention_options_pick_one_map_and_refuse_what_is_out_of_range():
    model, params, tokens = tiny()
    written = {}
    context = context_of(model, params, tokens, written=written)
    one = Attention.compute(context, layer=1, head=2, sample=1)
    whole = np.asarray(probabilities(record(model, params, tokens)))
    assert one.arrays["attention"].shape == (1, 1, 1, 16, 16)
    assert np.allclose(one.arrays["attention"][0, 0, 0], whole[1, 1, 2], atol=1e-3)  # stored as float16
    assert one.picture.startswith(b"\x89PNG")
    for options, message in [({"layer": 2}, "--layer 2 is out of range: the model has 2 layers"),
                             ({"head": 4}, "--head 4 is out of range"), ({"sample": 5}, "--sample 5 is out of range"),
                             ({"layer": -1}, "must be a non-negative integer")]:
        with pytest.raises(ValueError, match=message):
            Attention.compute(context, **options)
    with pytest.raises(ValueError, match="analysis 'norms' takes no option head"):
        Norms.compute(context, head=0)


@pytest.mark.parametrize("activation", ["float32", "bfloat16"])
def test_logit_lens_of_the_last_layer_is_the_models_own_top_tokens(activation):
    model, params, tokens = tiny(activation=activation)
    logits = np.asarray(model.apply({"params": params}, tokens))
    lens = read_out(record(model, params, tokens), np.roll(np.asarray(tokens), -1, axis=1))
    assert lens["top_ids"].shape == (3, 2, 16, 5)
    assert (lens["top_ids"][-1] == np.argsort(-logits, axis=-1, kind="stable")[..., :5]).all()
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    assert np.allclose(lens["top_probs"][-1, ..., 0], probs.max(-1), atol=1e-2 if activation == "bfloat16" else 1e-5)
    targets = np.roll(np.asarray(tokens), -1, axis=1)
    nll = -np.log(np.take_along_axis(probs, targets[..., None], -1)[..., 0])
    assert lens["loss"][-1] == pytest.approx(nll.mean(), rel=1e-2 if activation == "bfloat16" else 1e-4)


def test_logit_lens_part_reports_agreement_that_ends_with_the_model():
    model, params, tokens = tiny()
    result = LogitLens.compute(context_of(model, params, tokens))
    assert result.arrays["agreement"][-1] == 1.0 and 0 <= result.scalars["agreement"] <= 1
    assert 0 <= result.scalars["settled"] <= 2
    assert "top_text" not in result.arrays  # no tokenizer recorded: ids only


def test_norms_match_numpy():
    model, params, tokens = tiny()
    result = Norms.compute(context_of(model, params, tokens))
    names = list(result.arrays["weight_names"])
    kernel = np.asarray(params["blocks_1"]["attn"]["c_attn"]["kernel"], np.float64)
    assert result.arrays["weights"][names.index("blocks_1/attn/c_attn/kernel")] == pytest.approx(np.linalg.norm(kernel))
    every = np.concatenate([np.asarray(a, np.float64).ravel() for a in jax.tree.leaves(params)])
    assert result.scalars["weights"] == pytest.approx(np.linalg.norm(every))
    block = np.concatenate([np.asarray(a, np.float64).ravel() for a in jax.tree.leaves(params["blocks_0"])])
    assert result.arrays["layer_weights"][0] == pytest.approx(np.linalg.norm(block))
    # activations: the mean token norm of each block's output, captured independently
    variables = {"params": params}
    for i in range(2):
        out = np.asarray(capture(model, variables, f"blocks_{i}", tokens).output, np.float64)
        assert result.arrays["activations"][i + 1] == pytest.approx(np.linalg.norm(out, axis=-1).mean(), rel=1e-5)
    assert set(result.scalars) == {"weights", "activations", "growth"}  # instrumentation off: no more


def test_instrumentation_adds_residual_and_component_norms():
    model, params, tokens = tiny()
    cfg = OmegaConf.create({"architecture": {"instrumentation": {"residual": True, "components": True}}})
    result = Norms.compute(context_of(model, params, tokens, cfg))
    assert result.arrays["residual"].shape == (5, 2, 16)  # embeddings, then after each attention and each MLP
    assert result.arrays["components"].shape == (2, 2)
    mlp = np.asarray(capture(model, {"params": params}, "blocks_1/mlp", tokens).output, np.float64)
    assert result.arrays["components"][1, 1] == pytest.approx(np.linalg.norm(mlp, axis=-1).mean(), rel=1e-5)
    last = np.asarray(capture(model, {"params": params}, "blocks_1", tokens).output, np.float64)
    assert np.allclose(result.arrays["residual"][-1], token_norms(last), rtol=1e-5)
    assert {"residual_max", "attn", "mlp"} <= set(result.scalars)


def test_a_published_folder_is_sealed_by_a_manifest_written_last():
    model, params, tokens = tiny()
    written = {}
    keys = Norms.run(context_of(model, params, tokens, written=written))
    assert set(keys) == {"analysis/norms/weights", "analysis/norms/activations", "analysis/norms/growth"}
    assert list(written)[-1] == "norms/MANIFEST.json"
    manifest = json.loads(written["norms/MANIFEST.json"])
    listed = {f["path"]: f for f in manifest["files"]}
    assert set(listed) == {"weights.npy", "weight_names.npy", "layer_weights.npy", "activations.npy", "norms.png"}
    for path, entry in listed.items():
        data = written[f"norms/{path}"]
        assert entry["size"] == len(data) and entry["sha256"] == hashlib.sha256(data).hexdigest()
    assert np.load(io.BytesIO(written["norms/weight_names.npy"])).dtype.kind == "U"  # text without pickles


def test_a_model_without_a_gpt_is_a_clear_error():
    import flax.linen as nn

    class Linear(nn.Module):
        @nn.compact
        def __call__(self, idx, deterministic=True):
            return nn.Dense(4)(jax.nn.one_hot(idx, 4))

    tokens = jnp.zeros((1, 4), jnp.int32)
    params = Linear().init(jax.random.PRNGKey(0), tokens)["params"]
    with pytest.raises(ValueError, match="this job's model Linear calls none"):
        record(Linear(), params, tokens)


# ---------------------------------------------------------------------------------------- in a training job


def small(**sections):
    """4 steps, validating (and analysing) at steps 2 and 4, one checkpoint at the last step."""
    cfg = config(training={"tokens": 8 * 32 * 4},
                 logging={"report_interval": 1, "checkpoint_interval": 100, "validation_interval": 2})
    for section, values in sections.items():
        cfg.setdefault(section, {}).update(values)
    return cfg


def train(root, key, cfg):
    with quick(root) as q:
        q.build(key, "run")
        q.config.merge_with(OmegaConf.create(cfg))
        created = q.create()
        created()
    return created.node.nonce


@pytest.mark.slow
def test_analyses_publish_at_validation_steps_and_audit_checks_their_files(tmp_path):
    write_dataset(tmp_path)
    root = str(tmp_path)
    nonce = train(root, "tests/train/analyses",
                  small(architecture={"instrumentation": {"residual": True, "components": True}}))
    store = Store(root)
    nodes = {n.seq: n for n in store.find().nonce(nonce).all()}
    for seq in (1, 3):
        assert not any(k.startswith("analysis/") for k in store.record(nodes[seq]))
        assert not os.path.exists(os.path.join(root, "objects", nodes[seq].id, "analysis"))
    for seq in (2, 4):
        got = store.record(nodes[seq])
        assert 0 < got["analysis/attention/entropy"] <= np.log(32)
        assert got["analysis/norms/weights"] > 0 and got["analysis/norms/residual_max"] > 0
        assert 0 <= got["analysis/logit-lens/agreement"] <= 1
        for name in NAMES:
            folder = os.path.join(root, "objects", nodes[seq].id, "analysis", name)
            manifest = json.load(open(os.path.join(folder, "MANIFEST.json")))
            assert sorted(f["path"] for f in manifest["files"]) == sorted(set(os.listdir(folder)) - {"MANIFEST.json"})
            assert f"{name}.png" in os.listdir(folder)
    attention = np.load(os.path.join(root, "objects", nodes[2].id, "analysis", "attention", "attention.npy"))
    assert attention.shape == (2, 2, 4, 32, 32)  # layer, sample, head, query, key
    log = pl.scan_parquet(f"{root}/log/**/*.parquet", hive_partitioning=True).collect()
    assert log.filter(pl.col("key") == "_artifacts").height == 2  # one record per node, not one per file
    key = "analysis/logit-lens/agreement"
    assert store.find().nonce(nonce).has(key).sort(key).last().seq in (2, 4)

    report = audit(root)
    assert report.ok, [p.message for p in report.errors]  # the checkpoint at step 4 leaves its analyses alone
    tampered = os.path.join(root, "objects", nodes[4].id, "analysis", "norms", "activations.npy")
    with open(tampered, "r+b") as f:
        f.seek(-1, 2)
        last = f.read(1)
        f.seek(-1, 2)
        f.write(bytes([last[0] ^ 1]))
    os.remove(os.path.join(root, "objects", nodes[2].id, "analysis", "attention", "entropy.npy"))
    errors = {(p.kind, p.path) for p in audit(root).errors}
    assert errors == {("corrupt-file", f"objects/{nodes[4].id}/analysis/norms/activations.npy"),
                      ("missing-file", f"objects/{nodes[2].id}/analysis/attention/entropy.npy")}


@pytest.mark.slow
def test_training_analyze_false_runs_no_analysis(tmp_path):
    write_dataset(tmp_path)
    root = str(tmp_path)
    nonce = train(root, "tests/train/analyses", small(training={"analyze": False}))
    store = Store(root)
    for node in store.find().nonce(nonce).all():
        assert not any(k.startswith("analysis/") for k in store.record(node))
        assert not os.path.exists(os.path.join(root, "objects", node.id, "analysis"))


@pytest.mark.parametrize("key, cfg, message", [
    ("gpt/train/pretrain", {"architecture": {"instrumentation": {"residual": True}}},
     "architecture.instrumentation.residual=True does nothing here: Pretrain.ANALYSIS lists no analysis that reads "
     "it (read by: norms)"),
    ("tests/train/analyses",
     {"architecture": {"instrumentation": {"components": True}}, "training": {"analyze": False}},
     "architecture.instrumentation.components=True does nothing here: training.analyze is false"),
])
def test_instrumentation_without_an_analysis_reading_it_is_refused(tmp_path, key, cfg, message):
    write_dataset(tmp_path, tokens=5000)
    with pytest.raises(NotImplementedSetting, match=message.replace("(", r"\(").replace(")", r"\)")):
        train(str(tmp_path), key, config(**cfg))
    assert Store(str(tmp_path)).find().all() == []  # refused before anything was written


def test_artifact_names_are_a_file_or_one_folder_and_a_file(make_trainer):
    trainer = make_trainer(config(), write_artifact=lambda step, name, data: name)
    trainer.init()
    context = trainer.context(0)
    assert context.write("norms/a.npy", b"x") == "norms/a.npy" and context.write("a.npy", b"x") == "a.npy"
    for bad in ("a/b/c.npy", "../a.npy", "norms/", "/a.npy", "norms/.hidden"):
        with pytest.raises(ValueError, match="must be a file name or <folder>/<file>"):
            context.write(bad, b"x")
    assert context.batch(None)["x"].shape == (trainer.micro_rows, trainer.block_size)
    assert VOCAB == 256  # the tiny datasets record no tokenizer: the analyses label tokens by id
    assert context.tokenizer is None
