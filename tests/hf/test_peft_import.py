"""``theseus import peft``: an adapter trained with peft becomes a LoRA run over a base node of the root, which
samples peft's greedy text, exports back as an equal adapter and is audited (its base checked present); a folder
that is not a peft adapter, a base of other shapes and a DoRA adapter are one-line errors that write nothing."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.hf._folders import imported_tiny, tiny_folder

torch = pytest.importorskip("torch")
peft = pytest.importorskip("peft")

PROMPT = "def add"


def _adapter(hf_model, out, **settings):
    """A peft LoRA adapter over ``hf_model`` saved in ``out``, its lora_B away from zeros so it changes the text."""
    config = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "down_proj"], **settings)
    adapted = peft.get_peft_model(hf_model, config).eval()
    torch.manual_seed(1)
    with torch.no_grad():
        for name, p in adapted.named_parameters():
            if "lora_B" in name:
                p.copy_(0.3 * torch.randn_like(p))
    adapted.save_pretrained(str(out))
    return adapted


def _cli(*arguments):
    from typer.testing import CliRunner

    from theseus.cli import app

    return CliRunner().invoke(app, [str(a) for a in arguments])


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    """(root, tmp, peft model, base node, imported adapter node): a tiny llama imported, a peft adapter over it."""
    tmp = tmp_path_factory.mktemp("peft-import")
    hf_model, root, base = imported_tiny(tmp)
    adapted = _adapter(hf_model, tmp / "adapter")
    result = _cli("import", "peft", tmp / "adapter", root, "--base", base.nonce)
    assert result.exit_code == 0, result.output
    node_id = result.output.split("(node ")[1].split(")")[0]
    return root, tmp, adapted, base, node_id


@pytest.mark.slow
def test_an_imported_adapter_samples_the_text_peft_decodes_greedily(imported):
    import transformers

    root, tmp, adapted, base, node = imported
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(tmp / "base"))
    ids = tokenizer(PROMPT, return_tensors="pt").input_ids
    with torch.no_grad():
        out = adapted.generate(ids, max_new_tokens=8, do_sample=False, eos_token_id=None, pad_token_id=0)
    theirs = tokenizer.decode(out[0, ids.shape[1]:])
    sampled = _cli("sample", root, node, PROMPT, "--max-new-tokens", "8", "--temperature", "0")
    assert sampled.exit_code == 0, sampled.output
    assert f"{PROMPT}{theirs}\n" in sampled.output, (sampled.output, theirs)
    plain = _cli("sample", root, base.nonce, PROMPT, "--max-new-tokens", "8", "--temperature", "0")
    assert f"{PROMPT}{theirs}\n" not in plain.output  # the adapters change the text: the base alone differs


@pytest.mark.slow
def test_an_imported_adapter_exports_back_as_an_equal_peft_adapter(imported):
    from safetensors.numpy import load_file

    root, tmp, _, base, node = imported
    result = _cli("export", root, node, "--format", "peft", tmp / "again")
    assert result.exit_code == 0, result.output
    theirs = load_file(str(tmp / "adapter" / "adapter_model.safetensors"))
    back = load_file(str(tmp / "again" / "adapter_model.safetensors"))
    assert sorted(back) == sorted(theirs)
    assert all(np.array_equal(back[k], theirs[k]) for k in theirs)
    config = json.loads((tmp / "again" / "adapter_config.json").read_text())
    assert (config["r"], config["lora_alpha"], config["target_modules"]) == (4, 8, ["down_proj", "q_proj", "v_proj"])


@pytest.mark.slow
def test_the_audit_passes_an_imported_adapter_and_finds_its_base_gone(imported, tmp_path):
    import shutil

    from theseus.audit import audit
    from theseus.store import Store

    root, _, _, base, node = imported
    assert not [p for p in audit(root).problems if p.level == "error"]
    copy = str(tmp_path / "copy")
    shutil.copytree(root, copy)
    with Store(copy).writer() as w:
        w.retire(base, "a test")
    found = [p for p in audit(copy).problems if p.kind == "missing-base"]
    assert found and base.id in found[0].message


@pytest.mark.slow
def test_bad_adapters_and_bases_are_one_line_errors_that_write_nothing(imported, tmp_path):
    from theseus.hf.importer import import_hf

    root, tmp, _, base, node = imported
    other = tiny_folder(tmp_path / "wide", "llama", head_dim=16)
    wide = import_hf(str(tmp_path / "wide"), root, name="wide", dtype="float32")
    _adapter(other, tmp_path / "dora", use_dora=True)
    before = sorted((tmp / "root" / "objects").iterdir())
    cases = [((tmp / "base", base.nonce), "no adapter_config.json: not a peft adapter folder"),
             ((tmp / "adapter", wide.nonce), "the adapter was not trained on this model"),
             ((tmp_path / "dora", wide.nonce), "use_dora=True is not supported"),
             ((tmp / "adapter", node), "holds LoRA adapters, not a model"),
             ((tmp / "adapter", "abc123"), "--base abc123: there is no run with nonce")]
    for (folder, on), message in cases:
        result = _cli("import", "peft", folder, root, "--base", on)
        assert result.exit_code == 2 and message in result.output, result.output
        assert len(result.output.strip().splitlines()) == 1, result.output
    assert sorted((tmp / "root" / "objects").iterdir()) == before


@pytest.mark.slow
def test_a_lora_run_from_an_imported_adapter_continues_its_adapters_over_its_base(imported):
    import jax

    from tests.train._helpers import write_dataset
    from theseus.errors import BadInput
    from theseus.hf.peft import lora_checkpoint
    from theseus.quick import quick

    root, _, _, base, node = imported
    write_dataset(root, vocab=300)
    settings = {"architecture": {"dtype": {"activation": "float32"}},
                "training": {"init_from": node, "batch_size": 4, "per_device_batch_size": 4, "tokens": 4 * 64 * 2},
                "optimization": {"lr": 1e-3, "warmup_pct": 0.0, "decay_pct": 0.0},
                "logging": {"checkpoint_interval": 2, "validation_interval": 2}}
    with quick(root) as q:
        q.build("llama/train/lora", "continue").config.merge_with(settings)
        last = q()
    trained, imported_adapters = lora_checkpoint(root, last), lora_checkpoint(root, node).adapters()
    assert trained.base == base.id and trained.spec.rank == 4
    moved = max(float(np.abs(a - b).max()) for a, b in zip(jax.tree.leaves(trained.adapters()),
                                                           jax.tree.leaves(imported_adapters), strict=True))
    assert 0 < moved < 0.01  # two small steps from the imported adapters (a fresh lora_b is zeros, theirs is not)
    with quick(root) as q, pytest.raises(BadInput, match="lora.rank=2: training.init_from"):
        q.build("llama/train/lora", "other").config.merge_with({**settings, "lora": {"rank": 2}})
        q()
