"""``theseus import hf`` and ``theseus export --format hf`` on folders transformers saved offline: every decoder
family imports with transformers' logits and exports back bit-equal; an imported run samples, evaluates and is
trained further with training.init_from; bad input is one error line, exit 2, nothing written."""

from __future__ import annotations

import hashlib
import json
import os

import numpy as np
import pytest
from typer.testing import CliRunner

from tests.hf._folders import VOCAB, tiny_folder
from theseus.cli.app import app
from theseus.store import Store

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

FAMILIES = ["llama", "mistral", "qwen2", "qwen3", "gemma", "gpt_neox"]


def invoke(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


def theseus_logits(root, node, idx):
    """Logits of the imported decoder at ``node``, computed in float32 (parameters and activations)."""
    from theseus.model.decoder import Decoder
    from theseus.replay.restore import restored_trainer
    from theseus.train.models import decoder_config

    trainer = restored_trainer(root, node)
    try:
        family = trainer.recipe.MODEL.name
        arch = {**dict(trainer.config.architecture), "dtype": {"param": "float32", "activation": "float32"}}
        module = Decoder(decoder_config(family, arch))
        return np.asarray(module.apply({"params": trainer.params}, np.asarray(idx)), np.float32), trainer.params
    finally:
        trainer.close()


@pytest.mark.slow
@pytest.mark.parametrize("family", FAMILIES)
def test_a_family_imports_with_transformers_logits_and_exports_back_bit_equal(tmp_path, family):
    model = tiny_folder(str(tmp_path / "src"), family)
    root = tmp_path / "root"
    result = invoke("import", "hf", tmp_path / "src", root, "--name", "imported", "--dtype", "fp32")
    assert result.exit_code == 0, result.output
    [node] = Store(str(root)).find().all()
    assert Store(str(root)).run_record(node.nonce)["_job"] == f"{family}/import/hf"
    idx = np.random.RandomState(0).randint(0, VOCAB, (2, 24))
    with torch.no_grad():
        reference = model(torch.tensor(idx)).logits.numpy()
    ours, params = theseus_logits(str(root), node, idx)
    assert float(np.abs(ours - reference).max()) < 1e-5

    result = invoke("export", root, node.nonce, "--format", "hf", tmp_path / "out", "--dtype", "fp32")
    assert result.exit_code == 0, result.output
    back = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path / "out"), dtype=torch.float32).eval()
    with torch.no_grad():
        assert float(np.abs(back(torch.tensor(idx)).logits.numpy() - ours).max()) < 1e-5
    files = json.loads(Store(str(root)).record(node)["export/hf/files"])
    assert files.keys() >= {"tokenizer.json", "config.json", "model.safetensors"}
    for name, digest in files.items():  # the recorded hashes are those of the files as written
        assert hashlib.sha256((tmp_path / "out" / name).read_bytes()).hexdigest() == digest

    again = invoke("import", "hf", tmp_path / "out", root, "--name", "again")
    assert again.exit_code == 0, again.output
    twice = Store(str(root)).find().name("general.default.again").first()
    _, reimported = theseus_logits(str(root), twice, idx)
    import jax

    assert jax.tree.structure(reimported) == jax.tree.structure(params)
    assert all(np.array_equal(np.asarray(a), np.asarray(b)) for a, b in zip(jax.tree.leaves(reimported),
                                                                            jax.tree.leaves(params)))


@pytest.mark.slow
def test_an_imported_llama_samples_evaluates_and_is_trained_further_with_init_from(tmp_path):
    tiny_folder(str(tmp_path / "src"), "llama")
    root = tmp_path / "root"
    assert invoke("import", "hf", tmp_path / "src", root, "--name", "llama").exit_code == 0
    store = Store(str(root))
    [node] = store.find().all()
    sampled = invoke("sample", root, node.nonce, "def add", "--max-new-tokens", "8", "--temperature", "0")
    assert sampled.exit_code == 0 and sampled.output.count("--- sample") == 1, sampled.output
    evaluated = invoke("eval", root, node.nonce, "--tasks", "pydoc", "--limit", "2")
    assert evaluated.exit_code == 0 and "eval/pydoc/bpb" in evaluated.output, evaluated.output
    import shutil

    shutil.copytree(root, tmp_path / "moved")  # the tokenizer is named in the root: a copy samples alike
    moved = invoke("sample", tmp_path / "moved", node.nonce, "def add", "--max-new-tokens", "8", "--temperature", "0")
    assert moved.exit_code == 0 and moved.output == sampled.output.replace(str(root), str(tmp_path / "moved"))

    # data tokenized with the imported tokenizer: the name the import gave it, so the trained run's tokenizer matches
    import yaml

    tokenizer = yaml.safe_load(store.record(node)["_config"])["tokenizer"]["name"]
    assert tokenizer.startswith("objects/")  # a folder of the root, which can move
    assert os.path.isfile(os.path.join(root, tokenizer, "tokenizer.json"))
    tokenized = invoke("run", "data/tokenize/pydoc", "pydoc", root, "tokenizer.backend=huggingface",
                       f"tokenizer.name={tokenizer}", "--log-level", "WARNING")
    assert tokenized.exit_code == 0, tokenized.output
    trained = invoke("run", "llama/train/pretrain", "continued", root, f"training.init_from={node.nonce}",
                     "data.dataset=pydoc", "training.batch_size=4", "training.per_device_batch_size=4",
                     "training.steps=3", "training.validation_steps=1", "logging.report_interval=1",
                     "logging.checkpoint_interval=3", "logging.validation_interval=3", "--log-level", "WARNING")
    assert trained.exit_code == 0, trained.output
    other = invoke("run", "gpt/train/pretrain", "other-family", root, f"training.init_from={node.nonce}",
                   "data.dataset=pydoc")
    assert other.exit_code == 2 and "not a setting of a gpt model" in other.output, other.output
    last = store.find().name("general.default.continued").checkpoint().last()
    first = store.find().nonce(last.nonce).seq(0).first()
    assert first.parent == node.id and store.record(last)["train/step"] == 3
    out = tmp_path / "continued"
    exported = invoke("export", "hf", root, last.nonce, out)
    assert exported.exit_code == 0, exported.output
    model = transformers.AutoModelForCausalLM.from_pretrained(str(out))
    assert model.config.model_type == "llama" and os.path.isfile(out / "tokenizer.json")


def _nothing_written(root) -> bool:
    return not os.path.exists(root) or Store(str(root)).find().all() == []


def test_bad_input_to_import_is_one_error_line_and_nothing_is_written(tmp_path):
    root = tmp_path / "root"
    missing = invoke("import", "hf", tmp_path / "nowhere", root)
    assert missing.exit_code == 2 and "is not a folder" in missing.output
    pickles = tmp_path / "pickles"
    pickles.mkdir()
    (pickles / "config.json").write_text(json.dumps({"model_type": "llama"}))
    (pickles / "pytorch_model.bin").write_bytes(b"never unpickled")
    refused = invoke("import", "hf", pickles, root)
    assert refused.exit_code == 2 and "never unpickles" in refused.output
    from theseus.hf.safetensors_io import write_folder

    bert = tmp_path / "bert"
    write_folder(str(bert), [("w", np.zeros(2, np.float32))])
    (bert / "config.json").write_text(json.dumps({"model_type": "bert"}))
    unsupported = invoke("import", "hf", bert, root)
    assert unsupported.exit_code == 2 and "model_type 'bert'" in unsupported.output
    assert invoke("import", "hf", bert, root, "--dtype", "int4").exit_code == 2
    assert _nothing_written(root)


@pytest.mark.slow
def test_a_folder_without_a_tokenizer_or_a_tensor_is_refused_before_anything_is_written(tmp_path):
    tiny_folder(str(tmp_path / "src"), "qwen2")
    root = tmp_path / "root"
    os.remove(tmp_path / "src" / "tokenizer.json")
    no_tokenizer = invoke("import", "hf", tmp_path / "src", root)
    assert no_tokenizer.exit_code == 2 and "has no tokenizer.json" in no_tokenizer.output
    tiny_folder(str(tmp_path / "short"), "qwen2")
    from theseus.hf.safetensors_io import SafetensorsFolder, write_folder

    tensors = dict(SafetensorsFolder(str(tmp_path / "short")).items())
    tensors = {k: np.array(v) for k, v in tensors.items() if k != "model.norm.weight"}
    os.remove(tmp_path / "short" / "model.safetensors")
    write_folder(str(tmp_path / "short"), tensors.items())
    short = invoke("import", "hf", tmp_path / "short", root)
    assert short.exit_code == 2 and "model.norm.weight" in short.output
    assert _nothing_written(root)
    assert not (root / "objects").exists() or not os.listdir(root / "objects")  # no checkpoint folder left either


def test_bad_input_to_export_is_one_error_line_and_nothing_is_written(tmp_path):
    from theseus.store import Node

    root, out = tmp_path / "root", tmp_path / "out"
    with Store(str(root)).writer() as w:
        w.write(Node.start("other"), {"x": 1.0})
    unknown = invoke("export", root, "abc123", "--format", "hf", out)
    assert unknown.exit_code == 2 and "abc123" in unknown.output and not out.exists()
    out.mkdir()
    (out / "mine.txt").write_text("kept")
    full = invoke("export", root, "abc123", "--format", "hf", out)
    assert full.exit_code == 2 and "never overwrites" in full.output and os.listdir(out) == ["mine.txt"]
    assert invoke("export", root, "abc123", "--format", "hf", tmp_path / "o2", "--dtype", "int8").exit_code == 2
    assert invoke("export", root, "abc123", "--format", "hf").exit_code == 2  # OUT missing
    assert invoke("export", "mlflow", root, tmp_path / "o3").exit_code == 2
    assert invoke("export", "tensorboard", root, tmp_path / "o4", "--dtype", "bf16").exit_code == 2
    assert not (tmp_path / "o2").exists() and not (tmp_path / "o3").exists() and not (tmp_path / "o4").exists()
