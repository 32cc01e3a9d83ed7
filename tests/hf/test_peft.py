"""LoRA adapters and peft: theseus's adapters written as a peft folder load in ``peft.PeftModel`` with equal
logits (fp32, 1e-4), the merged model equals peft's ``merge_and_unload`` (1e-5), and an adapter trained with
peft reads back into theseus with equal logits; folders beyond plain LoRA are refused."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.hf._folders import imported_tiny, tiny_folder

torch = pytest.importorskip("torch")
peft = pytest.importorskip("peft")

FAMILIES = ["llama", "gpt_neox", "qwen3"]


def _theseus_side(folder):
    """The fp32 decoder and params of an HF folder, as the importer converts them."""
    from theseus.hf.convert import config_from_hf, load_params
    from theseus.hf.safetensors_io import SafetensorsFolder
    from theseus.model.decoder import Decoder

    cfg = config_from_hf(json.loads((folder / "config.json").read_text()), activation_dtype="float32",
                         param_dtype="float32")
    return cfg, Decoder(cfg), load_params(cfg, dict(SafetensorsFolder(str(folder)).items()))


def _trained_adapters(model, spec, seed=1):
    """Adapters as after training: lora_b away from its zeros, so the adapters change the logits."""
    import jax

    from theseus.model import lora

    adapters = lora.init_adapters(spec, lora.projections(model, spec, 8), jax.random.PRNGKey(seed))
    keys = iter(jax.random.split(jax.random.PRNGKey(seed + 1), 1000))
    return jax.tree.map(lambda a: a + 0.05 * jax.random.normal(next(keys), a.shape), adapters)


def _ids():
    return np.random.RandomState(0).randint(0, 300, (2, 12))


@pytest.mark.slow
@pytest.mark.parametrize("family", FAMILIES)
def test_an_exported_adapter_loads_in_peft_with_equal_logits(tmp_path, family):
    from theseus.hf.peft import write_peft
    from theseus.model import lora

    hf_model = tiny_folder(tmp_path / "base", family)
    cfg, model, params = _theseus_side(tmp_path / "base")
    spec = lora.LoraSpec(rank=4, alpha=8.0)
    adapters = _trained_adapters(model, spec)
    ours = np.asarray(lora.apply(model, params, adapters, spec, _ids()))
    assert float(np.abs(ours - np.asarray(model.apply({"params": params}, _ids()))).max()) > 1e-3

    write_peft(str(tmp_path / "adapter"), cfg, spec, adapters, base=str(tmp_path / "base"))
    theirs = peft.PeftModel.from_pretrained(hf_model, str(tmp_path / "adapter")).eval()
    with torch.no_grad():
        logits = theirs(torch.tensor(_ids())).logits.numpy()
    assert float(np.abs(logits - ours).max()) < 1e-4


@pytest.mark.slow
@pytest.mark.parametrize("family", ["llama", "gpt_neox"])
def test_the_merged_model_equals_peft_merge_and_unload(tmp_path, family):
    from theseus.hf.convert import dump_params
    from theseus.hf.peft import write_peft
    from theseus.model import lora

    hf_model = tiny_folder(tmp_path / "base", family)
    cfg, model, params = _theseus_side(tmp_path / "base")
    spec = lora.LoraSpec(rank=2, alpha=3.0, targets="q_proj,v_proj,down_proj")
    adapters = _trained_adapters(model, spec)
    write_peft(str(tmp_path / "adapter"), cfg, spec, adapters)
    merged = peft.PeftModel.from_pretrained(hf_model, str(tmp_path / "adapter")).merge_and_unload()
    theirs = {k: v.detach().numpy() for k, v in merged.state_dict().items()}
    ours = dump_params(cfg, lora.merge(params, adapters, spec))
    assert set(ours) <= set(theirs)
    assert max(float(np.abs(ours[k] - theirs[k]).max()) for k in ours) < 1e-5


@pytest.mark.slow
@pytest.mark.parametrize("family", ["llama", "gpt_neox"])
def test_an_adapter_trained_with_peft_reads_back_with_equal_logits(tmp_path, family):
    from theseus.hf.peft import read_peft
    from theseus.model import lora

    hf_model = tiny_folder(tmp_path / "base", family)
    _, model, params = _theseus_side(tmp_path / "base")
    targets = ["query_key_value", "dense_4h_to_h"] if family == "gpt_neox" else ["q_proj", "k_proj", "gate_proj"]
    config = peft.LoraConfig(r=4, lora_alpha=12, target_modules=targets, init_lora_weights=False)
    theirs = peft.get_peft_model(hf_model, config).eval()  # random lora_B: the adapters change the logits
    theirs.save_pretrained(str(tmp_path / "adapter"))
    with torch.no_grad():
        logits = theirs(torch.tensor(_ids())).logits.numpy()
    spec, adapters = read_peft(str(tmp_path / "adapter"), _theseus_side(tmp_path / "base")[0])
    assert spec.scale == 3.0
    ours = np.asarray(lora.apply(model, params, adapters, spec, _ids()))
    assert float(np.abs(logits - ours).max()) < 1e-4


def test_adapters_beyond_plain_lora_are_refused(tmp_path):
    from theseus.hf.convert import UnsupportedModel
    from theseus.hf.peft import from_peft
    from theseus.model.decoder_config import DecoderConfig

    cfg = DecoderConfig(n_embd=8, n_head=2, n_layers=1, vocab_size=16, intermediate_size=8)
    a = np.zeros((2, 8), np.float32)
    tensors = {"base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight": a,
               "base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight": a.T}
    plain = {"r": 2, "lora_alpha": 4, "target_modules": ["q_proj"]}
    assert from_peft(cfg, tensors, plain)[0].scale == 2.0
    with pytest.raises(UnsupportedModel, match="use_dora"):
        from_peft(cfg, tensors, {**plain, "use_dora": True})
    with pytest.raises(UnsupportedModel, match="modules_to_save"):
        from_peft(cfg, tensors, {**plain, "modules_to_save": ["lm_head"]})
    with pytest.raises(UnsupportedModel, match="adapts no projection"):
        from_peft(cfg, {"base_model.model.lm_head.lora_A.weight": a}, plain)
    with pytest.raises(UnsupportedModel, match="scales its modules differently"):
        from_peft(cfg, {**tensors, "base_model.model.model.layers.0.self_attn.v_proj.lora_A.weight": a,
                        "base_model.model.model.layers.0.self_attn.v_proj.lora_B.weight": a.T},
                  {**plain, "alpha_pattern": {"v_proj": 8}})


def test_a_pickled_adapter_is_never_read(tmp_path):
    from theseus.errors import NotFound
    from theseus.hf.peft import read_peft
    from theseus.model.decoder_config import DecoderConfig

    (tmp_path / "adapter_config.json").write_text(json.dumps({"r": 2, "lora_alpha": 4}))
    (tmp_path / "adapter_model.bin").write_bytes(b"not unpickled")
    with pytest.raises(NotFound, match="never unpickles"):
        read_peft(str(tmp_path), DecoderConfig(n_embd=8, n_head=2))


@pytest.fixture(scope="module")
def lora_run(tmp_path_factory):
    """An imported tiny llama, and a 2-step ``llama/train/lora`` run over it: (root, folder, model, base, last)."""
    from tests.train._helpers import write_dataset
    from theseus.quick import quick

    tmp = tmp_path_factory.mktemp("lora-export")
    hf_model, root, base = imported_tiny(tmp)
    write_dataset(root, vocab=300)
    with quick(root) as q:
        q.build("llama/train/lora", "adapt").config.merge_with({
            "architecture": {"dtype": {"activation": "float32"}},
            "training": {"init_from": base.nonce, "batch_size": 4, "per_device_batch_size": 4, "tokens": 4 * 64 * 2},
            "optimization": {"lr": 1e-2, "warmup_pct": 0.0, "decay_pct": 0.0},
            "logging": {"checkpoint_interval": 2, "validation_interval": 2},
            "lora": {"rank": 4, "alpha": 8.0, "targets": "q_proj,v_proj,down_proj"}})
        last = q()
    return root, tmp, hf_model, base, last


def _cli(*arguments):
    import typer
    from typer.testing import CliRunner

    from theseus.cli.export import register

    app = typer.Typer()
    register(app)
    return CliRunner().invoke(app, [str(a) for a in arguments])


@pytest.mark.slow
def test_a_lora_run_exports_as_peft_with_theseus_logits_and_merged_as_merge_and_unload(lora_run):
    import transformers

    from theseus.replay.restore import restored_trainer
    from theseus.store import Store

    root, tmp, hf_model, base, last = lora_run
    result = _cli(root, last.id, "--format", "peft", tmp / "adapter")
    assert result.exit_code == 0, result.output
    assert Store(root).record(last)["export/peft/base"] == base.id
    trainer = restored_trainer(root, last)
    try:
        ours = np.asarray(trainer.model.apply({"params": trainer.params}, _ids(), frozen=trainer.frozen))
    finally:
        trainer.close()
    adapted = peft.PeftModel.from_pretrained(hf_model, str(tmp / "adapter")).eval()
    with torch.no_grad():
        assert float(np.abs(adapted(torch.tensor(_ids())).logits.numpy() - ours).max()) < 1e-4

    result = _cli(root, last.id, "--format", "hf", "--merge", "--dtype", "fp32", tmp / "merged")
    assert result.exit_code == 0, result.output
    merged = transformers.AutoModelForCausalLM.from_pretrained(str(tmp / "merged"), dtype=torch.float32)
    theirs = adapted.merge_and_unload().state_dict()
    worst = max(float((merged.state_dict()[k] - v).abs().max()) for k, v in theirs.items())
    assert worst < 1e-5


@pytest.mark.slow
def test_exporting_a_lora_checkpoint_as_a_model_needs_merge_and_merge_needs_lora(lora_run):
    root, tmp, _, base, last = lora_run
    result = _cli(root, last.id, "--format", "hf", tmp / "plain")
    assert result.exit_code == 2 and "--merge" in result.output and not (tmp / "plain").exists()
    result = _cli(root, base.id, "--format", "hf", "--merge", tmp / "wrong")
    assert result.exit_code == 2 and "not of a LoRA run" in result.output
    result = _cli(root, base.id, "--format", "peft", tmp / "wrong")
    assert result.exit_code == 2 and "not of a LoRA run" in result.output
