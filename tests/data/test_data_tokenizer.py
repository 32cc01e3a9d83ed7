"""get_tokenizer: offline cl100k_base, errors, and the huggingface backend on a local folder."""

import json
import socket

import pytest
import tiktoken

from theseus.data.tokenizer import get_tokenizer


@pytest.fixture
def no_network(monkeypatch, tmp_path):
    """Any network access or tiktoken download attempt fails; tiktoken's cache is empty."""

    def refuse(*args, **kwargs):
        raise AssertionError("network access attempted")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(tiktoken, "get_encoding", refuse)  # the registry path would download cl100k_base
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "empty-cache"))


def test_cl100k_offline_encodes_hello_world(no_network):
    tok = get_tokenizer("tiktoken", "cl100k_base")
    assert tok.name == "cl100k_base"
    assert tok.encoding.name == "cl100k_base"
    assert tok.encode("hello world") == [15339, 1917]
    assert tok.encode_batch(["hello world", "hello"], num_threads=2) == [[15339, 1917], [15339]]
    assert tok.decode([15339, 1917]) == "hello world"
    assert tok.eot == 100257
    assert tok.vocab_size == 100277
    assert tok.describe() == {"backend": "tiktoken", "name": "cl100k_base", "vocab_size": 100277, "eot": 100257}


def test_special_tokens_are_plain_text():
    tok = get_tokenizer()
    assert tok.eot not in tok.encode("<|endoftext|>")


def test_unknown_backend_lists_valid_ones():
    with pytest.raises(ValueError, match="unknown tokenizer backend 'sentencepiece'.*tiktoken, huggingface"):
        get_tokenizer("sentencepiece", "x")


def test_unknown_tiktoken_name_lists_valid_ones():
    with pytest.raises(ValueError, match="unknown tiktoken encoding 'cl200k'.*cl100k_base"):
        get_tokenizer("tiktoken", "cl200k")


def test_huggingface_missing_folder(tmp_path):
    with pytest.raises(FileNotFoundError, match="no tokenizer.json"):
        get_tokenizer("huggingface", str(tmp_path / "nope"))


def test_huggingface_refuses_remote_code(tmp_path):
    with pytest.raises(ValueError, match="use_remote_code"):
        get_tokenizer("huggingface", str(tmp_path), use_remote_code=True)


def test_huggingface_local_folder(tmp_path):
    import tokenizers
    vocab = {"[UNK]": 0, "hello": 1, "world": 2, "</s>": 3}
    hf = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="[UNK]"))
    hf.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    hf.decoder = tokenizers.decoders.WordPiece()
    hf.save(str(tmp_path / "tokenizer.json"))
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"eos_token": "</s>"}))
    tok = get_tokenizer("huggingface", str(tmp_path))
    assert tok.encode("hello world") == [1, 2]
    assert tok.encode_batch(["world hello", "hello"]) == [[2, 1], [1]]
    assert tok.eot == 3 and tok.vocab_size == 4
    assert tok.describe()["backend"] == "huggingface"


def test_data_package_imports_no_jax():
    import subprocess
    import sys

    code = ("import sys, theseus.data, theseus.data.sources, theseus.data.hashing; "
            "assert not any(m == 'jax' or m.startswith('jax.') for m in sys.modules), 'jax imported'")
    subprocess.run([sys.executable, "-c", code], check=True)
