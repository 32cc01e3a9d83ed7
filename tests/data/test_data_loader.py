"""Loader: batch k is a pure function of (data, seed, batch size, block size, k), sliceable by rows."""

import hashlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from theseus.data.loader import Loader
from theseus.data.store import DatasetWriter, open_dataset

EOT = 100257


@pytest.fixture(scope="module")
def contiguous(tmp_path_factory):
    root = tmp_path_factory.mktemp("root")
    rng = np.random.default_rng(0)
    with DatasetWriter(root, "c", "contiguous") as w:
        w.set_tokenizer({"backend": "tiktoken", "name": "cl100k_base", "vocab_size": 100277, "eot": EOT})
        w.append("train", rng.integers(0, 100288, 5000, dtype=np.uint32))
        w.append("val", rng.integers(0, 100288, 300, dtype=np.uint32))
    return open_dataset(root, "c")


@pytest.fixture(scope="module")
def padded(tmp_path_factory):
    root = tmp_path_factory.mktemp("root")
    n, width = 10, 6
    tokens = np.full((n, width), EOT, dtype=np.uint32)
    mask = np.zeros((n, width), dtype=bool)
    for i in range(n):  # row i: prompt [i, i], response [1000 + i] * (i % 3 + 1), eot
        r = i % 3 + 1
        tokens[i, :2] = i
        tokens[i, 2:2 + r] = 1000 + i
        mask[i, 2:3 + r] = True
    with DatasetWriter(root, "p", "padded") as w:
        w.set_tokenizer({"backend": "tiktoken", "name": "cl100k_base", "vocab_size": 100277, "eot": EOT})
        w.append("train", tokens, mask)
        w.append("val", tokens[:2], mask[:2])
    return open_dataset(root, "p")


def digest(batch):
    h = hashlib.sha256()
    for key in ("x", "y", "padding_mask"):
        h.update(np.ascontiguousarray(batch[key]).tobytes())
    return h.hexdigest()


def assemble(loader, k, slices):
    parts = [loader.batch(k, rows=s) for s in slices]
    return {key: np.concatenate([p[key] for p in parts]) for key in parts[0]}


def test_contiguous_rows_are_windows(contiguous):
    loader = Loader(contiguous, seed=1, batch_size=8, block_size=16)
    b = loader.batch(5)
    assert b["x"].shape == b["y"].shape == b["padding_mask"].shape == (8, 16)
    assert b["x"].dtype == np.int32 and b["padding_mask"].dtype == bool and b["padding_mask"].all()
    tokens = np.asarray(contiguous.tokens("train"))
    for row, s in enumerate(loader.starts(5)):
        assert 0 <= s <= len(tokens) - 17
        np.testing.assert_array_equal(b["x"][row], tokens[s:s + 16])
        np.testing.assert_array_equal(b["y"][row], tokens[s + 1:s + 17])


@pytest.mark.parametrize("kind", ["contiguous", "padded"])
def test_same_batch_for_any_topology(kind, contiguous, padded):
    ds = contiguous if kind == "contiguous" else padded
    loader = Loader(ds, seed=7, batch_size=8, block_size=5)
    for k in (0, 3, 17):
        want = digest(loader.batch(k))
        one_device_8_micro = [slice(m, m + 1) for m in range(8)]
        eight_devices = [np.array([d]) for d in range(8)]
        two_hosts_two_devices = [slice((2 * h + d) * 2, (2 * h + d) * 2 + 2) for h in range(2) for d in range(2)]
        for slices in (one_device_8_micro, eight_devices, two_hosts_two_devices):
            assert digest(assemble(loader, k, slices)) == want


@pytest.mark.parametrize("kind", ["contiguous", "padded"])
def test_fresh_loader_matches_one_that_ran(kind, contiguous, padded):
    ds = contiguous if kind == "contiguous" else padded
    ran = Loader(ds, seed=3, batch_size=4, block_size=5)
    history = [digest(ran.batch(k)) for k in range(12)]
    assert digest(Loader(ds, seed=3, batch_size=4, block_size=5).batch(11)) == history[11]
    assert digest(ran.batch(4)) == history[4]  # asking again, out of order, changes nothing
    assert len(set(history)) == 12  # every step differs


def test_seeds_and_sizes_matter(contiguous):
    a = Loader(contiguous, seed=0, batch_size=4, block_size=8).batch(2)
    b = Loader(contiguous, seed=1, batch_size=4, block_size=8).batch(2)
    assert digest(a) != digest(b)
    val = Loader(contiguous, split="val", seed=0, batch_size=4, block_size=8).batch(2)
    assert digest(val) != digest(a)


def test_padded_respects_mask_and_covers_each_epoch(padded):
    loader = Loader(padded, seed=2, batch_size=5, block_size=5)
    seen = []
    for k in range(4):  # 4 steps x 5 rows = 2 epochs of 10 rows
        b = loader.batch(k)
        idx = loader.row_indices(k)
        seen.append(idx)
        for row, i in enumerate(idx):
            r = i % 3 + 1
            np.testing.assert_array_equal(b["x"][row, :2], [i, i])
            # targets in the loss: exactly the response tokens and the eot after them
            assert b["y"][row][b["padding_mask"][row]].tolist() == [1000 + i] * r + [EOT]
            assert not b["padding_mask"][row, 0]  # predicting the second prompt token
    assert sorted(np.concatenate(seen[:2]).tolist()) == list(range(10))
    assert sorted(np.concatenate(seen[2:]).tolist()) == list(range(10))
    assert not np.array_equal(np.concatenate(seen[:2]), np.concatenate(seen[2:]))  # reshuffled per epoch


def test_padded_full_width_block(padded):
    b = Loader(padded, seed=0, batch_size=3, block_size=6).batch(0)
    assert b["x"].shape == (3, 6)
    assert not b["padding_mask"][:, -1].any() and (b["y"][:, -1] == EOT).all()


def test_block_size_too_long(contiguous, padded):
    with pytest.raises(ValueError, match=r"block_size 5000 .* needs 5001 tokens and the split has 5000"):
        Loader(contiguous, batch_size=2, block_size=5000)
    Loader(contiguous, batch_size=2, block_size=4999).batch(0)  # exactly fits: one possible start
    with pytest.raises(ValueError, match=r"block_size 7 is longer than the rows .* \(6 tokens\)"):
        Loader(padded, batch_size=2, block_size=7)


def test_bad_arguments(contiguous):
    loader = Loader(contiguous, batch_size=4, block_size=8)
    with pytest.raises(ValueError, match=r"rows must be in \[0, 4\)"):
        loader.batch(0, rows=[3, 4])
    with pytest.raises(ValueError, match="non-negative integer"):
        loader.batch(-1)
    with pytest.raises(ValueError, match="batch_size and block_size must be >= 1"):
        Loader(contiguous, batch_size=0, block_size=8)
    with pytest.raises(ValueError, match="unknown split"):
        Loader(contiguous, split="test")


@settings(max_examples=25, deadline=None)
@given(batch_size=st.integers(1, 16), k=st.integers(0, 10**9), data=st.data())
def test_any_row_subset_matches_the_global_batch(contiguous, batch_size, k, data):
    loader = Loader(contiguous, seed=11, batch_size=batch_size, block_size=7)
    full = loader.batch(k)
    rows = data.draw(st.lists(st.integers(0, batch_size - 1), max_size=batch_size))
    part = loader.batch(k, rows=np.array(rows, dtype=np.int64))
    for key in full:
        np.testing.assert_array_equal(part[key], full[key][rows])
