"""Files written and read around the page cache: the bytes of any array layout in C order, their sha256 computed as
they pass, the same bytes through the page cache where O_DIRECT is refused, and every folder synced once."""

from __future__ import annotations

import hashlib
import os

import ml_dtypes
import numpy as np
import pytest

from theseus.store import direct_io


def _refuse_direct(monkeypatch: pytest.MonkeyPatch) -> None:
    """A filesystem that refuses O_DIRECT at open."""
    opened = os.open
    monkeypatch.setattr(direct_io.os, "open", lambda path, flags, *a: (_ for _ in ()).throw(
        OSError(22, "Invalid argument")) if flags & getattr(os, "O_DIRECT", 0) else opened(path, flags, *a))


def _arrays() -> list:
    rng = np.random.default_rng(0)  # bfloat16 transposed views, a strided slice, sizes that end mid-block
    matrix = rng.standard_normal((1031, 517)).astype(ml_dtypes.bfloat16)
    cube = rng.standard_normal((3, 5, 700)).astype(np.float16).transpose(2, 0, 1)
    return [b"header", matrix.T, matrix, rng.standard_normal(2**18 + 3).astype(np.float32)[::3],
            np.zeros(0, np.float16), np.float32(2.5), cube]


def _c_order(block) -> bytes:
    return bytes(block) if isinstance(block, bytes) else np.ascontiguousarray(block).tobytes()


@pytest.mark.parametrize("direct", [True, False])
def test_any_layout_is_written_in_c_order_and_hashed_as_written(tmp_path, monkeypatch, direct):
    monkeypatch.setattr(direct_io, "STAGING_BYTES", 2**16)  # many staging buffers, rows larger than one
    if not direct:
        _refuse_direct(monkeypatch)
    expected = b"".join(_c_order(b) for b in _arrays())
    size, digest = direct_io.write_file(str(tmp_path / "f"), _arrays())
    assert (tmp_path / "f").read_bytes() == expected
    assert (size, digest) == (len(expected), hashlib.sha256(expected).hexdigest())
    assert os.listdir(tmp_path) == ["f"]  # no temporary left behind
    data, read_digest = direct_io.read_file(str(tmp_path / "f"))
    assert data.tobytes() == expected and read_digest == digest


def test_a_bfloat16_transpose_as_bytes_equals_the_float_transpose_bit_for_bit(tmp_path):
    values = np.array([[0.0, -0.0, np.inf], [np.nan, 1e-40, -3.5]], np.float32).astype(ml_dtypes.bfloat16)
    direct_io.write_file(str(tmp_path / "t"), [values.T])
    assert (tmp_path / "t").read_bytes() == np.ascontiguousarray(values.T).tobytes()


def test_a_failed_write_leaves_nothing_and_the_old_file_stands(tmp_path):
    (tmp_path / "f").write_bytes(b"old")
    with pytest.raises(TypeError):  # object arrays have no bytes to write: found after the first blocks are out
        direct_io.write_file(str(tmp_path / "f"), [b"new", np.zeros(2**20), np.array([object()], dtype=object)])
    assert os.listdir(tmp_path) == ["f"] and (tmp_path / "f").read_bytes() == b"old"


def test_every_folder_up_to_the_top_is_synced_once(tmp_path, monkeypatch):
    for sub in ("a/b/c", "a/d"):
        os.makedirs(tmp_path / sub)
    synced = []
    monkeypatch.setattr(direct_io, "_fsync_folder", synced.append)
    paths = [str(tmp_path / "a/b/c/x"), str(tmp_path / "a/b/c/y"), str(tmp_path / "a/d/z")]
    direct_io.sync_folders(str(tmp_path / "a"), paths)
    assert sorted(os.path.relpath(f, tmp_path) for f in synced) == ["a", "a/b", "a/b/c", "a/d"]
