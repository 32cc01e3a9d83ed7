"""A Hugging Face folder imported as a run and exported back: transformers' logits are equal on both sides,
pickles are refused, and the export is recorded on the node."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.hf._folders import train_tokenizer
from theseus.hf.safetensors_io import NotSafetensors, write_folder
from theseus.store import Store

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")


def tiny_folder(path, kind):
    """A tiny random GPT-2 or GPT-NeoX (sequential residual, full rotary, tanh GELU, tied) saved offline."""
    if kind == "gpt2":
        config = transformers.GPT2Config(vocab_size=64, n_positions=16, n_embd=32, n_layer=2, n_head=4,
                                         activation_function="gelu_new")
    else:
        config = transformers.GPTNeoXConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2,
                                            num_attention_heads=4, intermediate_size=128, hidden_act="gelu_new",
                                            max_position_embeddings=16, use_parallel_residual=False,
                                            rotary_pct=1.0, tie_word_embeddings=True)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config)
    model.save_pretrained(str(path))
    train_tokenizer(str(path))  # an import keeps the folder's tokenizer: it needs one
    return model.eval()  # no dropout: logits compared


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["gpt2", "gpt_neox"])
def test_import_then_export_keeps_transformers_logits(tmp_path, kind):
    from theseus.hf.exporter import export_hf
    from theseus.hf.importer import import_hf

    model = tiny_folder(tmp_path / "src", kind)
    root = str(tmp_path / "root")
    node = import_hf(str(tmp_path / "src"), root, name="imported", dtype="float32")
    store = Store(root)
    assert store.find().checkpoint().all() == [node]
    record = export_hf(root, node.nonce, str(tmp_path / "out"), dtype="fp32")
    back = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path / "out"), dtype=torch.float32)
    idx = torch.tensor(np.random.RandomState(0).randint(0, 64, (2, 16)))
    with torch.no_grad():
        assert float((model(idx).logits - back(idx).logits).abs().max()) < 1e-5
    assert store.record(node)["export/hf/sha256"] == record["export/hf/sha256"]
    assert set(json.loads(record["export/hf/files"])) >= {"config.json", "model.safetensors"}


def test_a_folder_of_pickles_is_refused_and_nothing_is_written(tmp_path):
    from theseus.hf.importer import import_hf

    src = tmp_path / "src"
    src.mkdir()
    (src / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    (src / "pytorch_model.bin").write_bytes(b"not unpickled")
    with pytest.raises(NotSafetensors, match="never unpickles"):
        import_hf(str(src), str(tmp_path / "root"))
    assert not (tmp_path / "root").exists() or Store(str(tmp_path / "root")).find().all() == []


def test_an_export_refuses_a_folder_that_is_not_empty(tmp_path):
    from theseus.hf.exporter import export_hf

    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(ValueError, match="never overwrites"):
        export_hf(str(tmp_path / "root"), "abc123", str(out))


def test_sharded_folders_round_trip(tmp_path):
    from theseus.hf.safetensors_io import SafetensorsFolder

    arrays = [(f"t{i}", np.full((4,), i, np.float32)) for i in range(3)]
    files = write_folder(str(tmp_path), arrays, shard_bytes=20)
    assert files[-1] == "model.safetensors.index.json" and len(files) == 4
    folder = SafetensorsFolder(str(tmp_path))
    assert [float(folder.read(f"t{i}")[0]) for i in range(3)] == [0.0, 1.0, 2.0]
