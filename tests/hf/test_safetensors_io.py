"""The safetensors writer: the same bytes, and the sha256 of those bytes, whether the filesystem takes direct writes
or the writer falls back to the page cache."""

from __future__ import annotations

import hashlib
import os

import numpy as np
import pytest

from theseus.hf.safetensors_io import SafetensorsFolder, write_folder
from theseus.store import direct_io


def _tensors() -> list[tuple[str, np.ndarray]]:
    rng = np.random.default_rng(0)  # sizes that end mid-block and span several staging buffers
    return [("a", rng.standard_normal(3 * 2**20 + 5).astype(np.float32)), ("empty", np.zeros(0, np.float16)),
            ("b", rng.standard_normal((7, 3)).astype(np.float16))]


@pytest.mark.parametrize("direct", [True, False])
def test_a_written_file_holds_the_tensors_and_its_digest_is_of_its_bytes(tmp_path, monkeypatch, direct):
    monkeypatch.setattr(direct_io, "STAGING_BYTES", 2**20)  # several staging buffers per file
    if not direct:  # a filesystem that refuses O_DIRECT: the writer goes through the page cache
        opened = os.open
        monkeypatch.setattr(direct_io.os, "open", lambda path, flags, *a: (_ for _ in ()).throw(
            OSError(22, "Invalid argument")) if flags & getattr(os, "O_DIRECT", 0) else opened(path, flags, *a))
    digests: dict[str, str] = {}
    assert write_folder(str(tmp_path), _tensors(), digests=digests) == ["model.safetensors"]
    with open(tmp_path / "model.safetensors", "rb") as f:
        raw = f.read()
    assert digests["model.safetensors"] == hashlib.sha256(raw).hexdigest()
    folder = SafetensorsFolder(str(tmp_path))
    for name, array in _tensors():
        assert np.array_equal(folder.read(name), array)
    assert sorted(os.listdir(tmp_path)) == ["model.safetensors"]  # no temporary left behind
    reference = pytest.importorskip("safetensors.numpy")  # the reference reader agrees
    assert np.array_equal(reference.load_file(str(tmp_path / "model.safetensors"))["b"], _tensors()[2][1])
