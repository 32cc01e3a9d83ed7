"""The open-model decoder families on CPU: each family's forward pass, activation checkpointing that changes
nothing, attention equal to a reference einsum, cached decoding equal to the full pass, bad configs refused, the
8-device layouts, and a Llama trained through the normal job: checkpoints, a bitwise resume, find/debug,
`theseus sample` and `theseus eval`."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from theseus.model.decode import cached_logits
from theseus.model.decoder import Decoder
from theseus.model.decoder_config import FAMILIES, DecoderConfig
from theseus.model.gpt import loss_fn
from theseus.model.layers.feedforward import DecoderMLP
from theseus.model.layers.gqa import GroupedQueryAttention

SHAPE = dict(n_embd=32, n_head=4, n_layers=2, vocab_size=64, intermediate_size=48, block_size=32,
             activation_dtype="float32")
# family -> the extra settings its test model uses: every switch is on somewhere
SETTINGS = {
    "llama": dict(n_kv_head=2, rope_scaling="llama3", rope_factor=8.0, rope_original_max_position=16),
    "mistral": dict(n_kv_head=1, sliding_window=5),
    "qwen2": dict(n_kv_head=2, rope_scaling="linear", rope_factor=2.0),
    "qwen3": dict(n_kv_head=2, head_dim=16, tie_embeddings=True),
    "gemma": dict(n_kv_head=1),
    "gpt_neox": dict(),
}


def family_model(family: str, **overrides) -> tuple[Decoder, dict, jax.Array]:
    cfg = DecoderConfig.for_family(family, **{**SHAPE, **SETTINGS[family], **overrides})
    idx = jax.random.randint(jax.random.PRNGKey(1), (2, 24), 0, cfg.vocab_size)
    model = Decoder(cfg)
    params = model.init(jax.random.PRNGKey(0), idx)["params"]
    return model, params, idx


def test_every_family_has_a_test_model():
    assert set(SETTINGS) == set(FAMILIES)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_a_family_runs_forward_and_its_switches_shape_the_parameters(family):
    model, params, idx = family_model(family)
    logits = model.apply({"params": params}, idx)
    assert logits.shape == (2, 24, 64) and logits.dtype == jnp.float32 and bool(jnp.isfinite(logits).all())
    block = params["blocks_0"]
    assert ("lm_head" in params) == (not model.config.tie_embeddings)
    assert ("q_norm" in block["attn"]) == (family == "qwen3")
    assert ("bias" in block["attn"]["q_proj"]) == (family in ("qwen2", "gpt_neox"))
    assert ("gate_proj" in block["mlp"]) == (family != "gpt_neox")
    assert ("bias" in block["input_norm"]) == (family == "gpt_neox")
    assert block["attn"]["k_proj"]["kernel"].shape[1] == model.config.kv_heads * model.config.head_size


@pytest.mark.parametrize("family", ["llama", "gpt_neox"])
def test_bf16_activations_keep_float32_logits_and_parameters(family):
    model, params, idx = family_model(family, activation_dtype="bfloat16")
    assert model.apply({"params": params}, idx).dtype == jnp.float32
    assert {leaf.dtype for leaf in jax.tree.leaves(params)} == {jnp.dtype(jnp.float32)}


@pytest.mark.parametrize("family", sorted(FAMILIES))
@pytest.mark.parametrize("policy", ["nothing_saveable", "dots_saveable"])
def test_activation_checkpointing_leaves_loss_and_gradients_unchanged(family, policy):
    model, params, idx = family_model(family)
    checkpointed = Decoder(DecoderConfig(**{**vars(model.config), "remat": policy}))
    mask = jnp.ones(idx.shape, bool)

    def loss_and_grads(module):
        return jax.jit(jax.value_and_grad(lambda p: loss_fn(module.apply({"params": p}, idx), idx, mask)))(params)

    (plain_loss, plain_grads), (loss, grads) = loss_and_grads(model), loss_and_grads(checkpointed)
    assert float(loss) == pytest.approx(float(plain_loss), rel=1e-6)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7), grads, plain_grads)
    assert "remat" in jax.make_jaxpr(lambda p: checkpointed.apply({"params": p}, idx))(params).pretty_print()


def reference_attention(q, k, v, window: int) -> jax.Array:
    """Softmax attention written out: kv heads repeated per group, causal and windowed masks, float32."""
    group = q.shape[2] // k.shape[2]
    k, v = jnp.repeat(k, group, axis=2), jnp.repeat(v, group, axis=2)
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(q.shape[-1])
    T = q.shape[1]
    rows, cols = np.arange(T)[:, None], np.arange(T)[None, :]
    visible = (cols <= rows) & ((cols > rows - window) if window else True)
    scores = jnp.where(visible, scores, -jnp.inf)
    return jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(scores, axis=-1), v)


@pytest.mark.parametrize("kv_heads,window", [(4, 0), (2, 0), (1, 0), (2, 5)])
def test_attention_equals_a_reference_einsum(kv_heads, window):
    cfg = DecoderConfig(**{**SHAPE, "n_kv_head": kv_heads, "sliding_window": window})
    layer = GroupedQueryAttention(cfg)
    x = jax.random.normal(jax.random.PRNGKey(2), (2, 12, 32))
    variables = layer.init(jax.random.PRNGKey(0), x)
    bound = layer.bind(variables)
    q, k, v = bound._qkv(x, jnp.arange(12))
    expected = bound.o_proj(reference_attention(q, k, v, window).reshape(2, 12, -1))
    np.testing.assert_allclose(layer.apply(variables, x), expected, atol=2e-6)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_cached_decoding_equals_the_full_forward_pass(family):
    model, params, idx = family_model(family)
    full = model.apply({"params": params}, idx)
    np.testing.assert_allclose(cached_logits(model, params, idx, 7), full, atol=1e-5)


def test_a_bad_switch_is_refused_by_name():
    with pytest.raises(ValueError, match="rope_scaling 'yarn' is not one of none, linear, llama3"):
        DecoderConfig(rope_scaling="yarn")
    with pytest.raises(ValueError, match="remat 'dots' is not one of none, nothing_saveable"):
        DecoderConfig(remat="dots")
    with pytest.raises(ValueError, match="did you mean sliding_window"):
        DecoderConfig.from_mapping({"sliding_windows": 4})
    with pytest.raises(ValueError, match="rotary_pct 0.1 must be in"):
        DecoderConfig(n_embd=32, n_head=4, rotary_pct=0.1)


SHARDED = r"""
import sys, tempfile
sys.path.insert(0, {repo!r})
import jax
from tests.train._helpers import write_dataset, config, ListLog
from theseus.train.jobs import PretrainLlama
from theseus.train.trainer import Trainer

root = tempfile.mkdtemp()
write_dataset(root, tokens=12_000)
arch = {{"n_embd": 32, "n_layers": 2, "n_head": 4, "n_kv_head": 2, "intermediate_size": 64, "block_size": 32,
        "vocab_size": 256, "dtype": {{"activation": "float32"}}}}

def make(devices, per_device, **shard):
    cfg = config(architecture={{}}, training={{"tokens": 8 * 32 * 4}}, logging={{"report_interval": 1,
                 "validation_interval": 100}}, shard=shard)
    cfg["architecture"] = arch
    cfg["training"]["per_device_batch_size"] = per_device
    return Trainer(cfg, root, recipe=PretrainLlama, devices=devices, log=ListLog(), peak_flops=1e12, progress=False)

out = {{}}
one = make(jax.devices()[:1], 8)
out["single"] = [one.tick()["train/loss"] for _ in range(3)]
for name, devices, per_device, shard in [("fsdp", 8, 1, dict(fsdp=True)), ("zero", 8, 1, dict(zero=True)),
                                          ("tp", 8, 2, dict(tp=2, fsdp=True))]:
    trainer = make(jax.devices()[:devices], per_device, **shard)
    out[name] = [trainer.tick()["train/loss"] for _ in range(3)]
    attn = trainer.state["params"]["blocks_0"]["attn"]
    out[name + "_k"] = [str(s) for s in attn["k_proj"]["kernel"].sharding.spec]
    out[name + "_o"] = [str(s) for s in attn["o_proj"]["kernel"].sharding.spec]
    mlp = trainer.state["params"]["blocks_0"]["mlp"]
    out[name + "_down"] = [str(s) for s in mlp["down_proj"]["kernel"].sharding.spec]
emit(out)
"""


@pytest.mark.slow
def test_fsdp_zero_and_tensor_parallel_layouts_train_like_one_device():
    from pathlib import Path

    from tests.train._subproc import run_python

    out = run_python(SHARDED.format(repo=str(Path(__file__).resolve().parents[2])), devices=8, timeout=400)
    for name in ("fsdp", "zero", "tp"):
        np.testing.assert_allclose(out[name], out["single"], rtol=2e-5)
    assert out["fsdp_k"] == ["data", "None"]  # [n_embd, kv * head]: the larger free dim on data
    assert out["tp_k"] == ["data", "model"] and out["tp_o"] == ["model", "data"]
    assert out["tp_down"] == ["model", "data"]
    assert out["zero_k"] == ["None", "None"]  # ZeRO-1: parameters replicated


@pytest.mark.slow
def test_a_llama_trains_through_the_job_resumes_bitwise_samples_and_evaluates(tmp_path):
    from typer.testing import CliRunner

    from tests.train._helpers import config, write_dataset
    from theseus.cli import app
    from theseus.quick import quick
    from theseus.store import Store

    root = str(tmp_path / "root")
    write_dataset(root, tokens=12_000)
    arch = {"n_embd": 32, "n_layers": 2, "n_head": 4, "n_kv_head": 2, "intermediate_size": 64, "block_size": 32,
            "vocab_size": 256, "remat": "dots_saveable"}
    cfg = config(training={"tokens": 8 * 32 * 6}, logging={"report_interval": 1, "checkpoint_interval": 3,
                                                           "validation_interval": 3})
    cfg["architecture"] = arch
    with quick(root) as q:
        q.build("llama/train/pretrain", "llama").config.merge_with(cfg)
        job = q.create()
        first = job.node
        job()
        job.close()
    store = Store(root)
    straight = {r["seq"]: r["train/loss"] for r in
                store.find().nonce(first.nonce).has("train/loss").frame().collect().iter_rows(named=True)}
    assert [n.seq for n in store.find().nonce(first.nonce).checkpoint().all()] == [3, 6]

    with quick(root) as q:
        q.find().nonce(first.nonce).seq(3).resume()
        job = q.build().create()
        assert job.find(DecoderMLP) == [("blocks_0", "mlp"), ("blocks_1", "mlp")]
        layer, inputs = job.debug(("blocks_1", "mlp"))
        assert bool((layer(**inputs) == layer.captured_output).all())
        layer.close()
        branch = job.node
        job()
        job.close()
    resumed = store.find().nonce(branch.nonce).has("train/loss").select(keys=["train/loss"])
    assert [r["train/loss"] for r in resumed] == [straight[s] for s in range(4, 7)]  # bitwise

    result = CliRunner().invoke(app, ["sample", root, first.nonce, "1+2=", "--max-new-tokens", "5",
                                      "--temperature", "0"])
    assert result.exit_code == 0, result.output
    assert "5 tokens" in result.output
    result = CliRunner().invoke(app, ["eval", root, first.nonce, "--tasks", "bits-per-byte", "--limit", "1"])
    assert result.exit_code == 0, result.output
    assert Store(root).find().job("gpt/evaluate").has("eval/fineweb-val/bpb").all()


def test_a_family_job_refuses_a_bad_architecture_before_any_device_work():
    from theseus.train.config import load_config
    from theseus.train.jobs import PretrainMistral
    from theseus.train.recipe import as_recipe

    recipe = as_recipe(PretrainMistral)
    good = load_config({"architecture": {"n_embd": 64, "n_head": 4, "sliding_window": 8}}, PretrainMistral.Config)
    recipe.check(good)
    assert recipe.model(good).config.sliding_window == 8 and recipe.model(good).config.family == "mistral"
    with pytest.raises(ValueError, match="rope_scaling 'yarn' is not one of"):
        recipe.check(load_config({"architecture": {"rope_scaling": "yarn"}}, PretrainMistral.Config))
    with pytest.raises(Exception, match="family"):  # the part fixes the family: no such key in its section
        load_config({"architecture": {"family": "gemma"}}, PretrainMistral.Config)


def test_the_lm_eval_harness_adapter_scores_a_decoder_as_by_hand(tmp_path, monkeypatch):
    pytest.importorskip("lm_eval")
    from tests.train._harness_tasks import multiple_choice_task, offline, sums
    from tests.train.test_eval_harness import by_hand
    from theseus.train.evals.harness import TheseusLM, harness
    from theseus.train.example import CharacterTokenizer

    offline(monkeypatch, tmp_path / "hf")
    model, params, _ = family_model("qwen3", vocab_size=128)
    tokenizer = CharacterTokenizer()
    rows = sums(8, seed=2)
    (tmp_path / "tasks").mkdir()
    folder = multiple_choice_task(tmp_path / "tasks", "sums", rows)
    keys, _ = harness(TheseusLM(model, params, tokenizer), ["sums"], include_path=str(folder), limit=5)
    expected = by_hand(model, params, tokenizer, rows[:5])
    assert keys["eval/sums/acc"] == pytest.approx(expected["acc"])
    assert keys["eval/sums/acc_norm"] == pytest.approx(expected["acc_norm"])


def test_attention_auto_is_xla_on_cpu_and_falls_back_to_it_where_cudnn_is_refused(monkeypatch):
    from theseus.model.layers.gqa import causal_attention

    q, k, v = (jax.random.normal(jax.random.PRNGKey(i), (1, 16, heads, 16), jnp.bfloat16)
               for i, heads in enumerate((4, 2, 2)))
    xla = causal_attention(q, k, v, 5, "xla")
    assert bool((causal_attention(q, k, v, 5, "auto") == xla).all())
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")  # as on a GPU, but this host has no cuDNN
    assert bool((jax.jit(lambda *a: causal_attention(*a, 5, "auto"))(q, k, v) == xla).all())
    model, params, idx = family_model("mistral")
    forced = Decoder(DecoderConfig(**{**vars(model.config), "attention": "xla"}))
    assert bool((forced.apply({"params": params}, idx) == model.apply({"params": params}, idx)).all())


RESHARDED = r"""
import sys, tempfile
sys.path.insert(0, {repo!r})
import jax, numpy as np
from tests.train._helpers import write_dataset, config, ListLog
from theseus.train.jobs import PretrainLlama
from theseus.train.trainer import Trainer

root = tempfile.mkdtemp()
write_dataset(root, tokens=12_000)
arch = {{"n_embd": 32, "n_layers": 2, "n_head": 4, "n_kv_head": 2, "intermediate_size": 64, "block_size": 32,
        "vocab_size": 256, "dtype": {{"activation": "bfloat16"}}}}

def make(devices, per_device, **shard):
    cfg = config(architecture={{}}, training={{"batch_size": 16, "tokens": 16 * 32 * 6}},
                 logging={{"report_interval": 1, "validation_interval": 100}}, shard=shard)
    cfg["architecture"] = arch
    cfg["training"]["per_device_batch_size"] = per_device
    return Trainer(cfg, root, recipe=PretrainLlama, devices=devices, log=ListLog(), peak_flops=1e12, progress=False)

folder = root + "/saved"
fsdp = make(jax.devices(), 1, fsdp=True)  # 8 devices x 1 row, 2 micro-batches a step
out = {{"fsdp_accumulation": fsdp.accumulation, "losses": [fsdp.tick()["train/loss"] for _ in range(2)]}}
fsdp.save(folder)
fsdp.wait()
batch = fsdp.batch()
out["next"] = fsdp.tick()["train/loss"]
meshes = [("one", jax.devices()[:1], 4, {{}}), ("tp", jax.devices(), 2, dict(tp=2, fsdp=True))]
for name, devices, per_device, shard in meshes:
    trainer = make(devices, per_device, **shard)
    trainer.restore(folder)
    out[name + "_step"] = trainer.step
    out[name + "_accumulation"] = trainer.accumulation
    out[name + "_same_batch"] = all(np.array_equal(batch[k], v) for k, v in trainer.batch().items())
    out[name] = trainer.tick()["train/loss"]
emit(out)
"""


@pytest.mark.slow
def test_a_family_checkpoint_reshards_with_accumulation_and_bf16_activations():
    """A Llama trained on 8 devices (FSDP, 2 micro-batches a step, bf16 activations) restores on 1 device
    (4 micro-batches) and on a tensor-parallel mesh, each reads the same next batch and takes the same step."""
    from pathlib import Path

    from tests.train._subproc import run_python

    out = run_python(RESHARDED.format(repo=str(Path(__file__).resolve().parents[2])), devices=8, timeout=500)
    assert out["fsdp_accumulation"] == 2 and out["one_accumulation"] == 4
    assert out["one_step"] == out["tp_step"] == 2
    assert out["one_same_batch"] and out["tp_same_batch"]
    assert out["losses"][1] < out["losses"][0] + 0.5
    for name in ("one", "tp"):  # bf16 activations summed in another order: close, not bitwise
        np.testing.assert_allclose(out[name], out["next"], rtol=2e-2)
