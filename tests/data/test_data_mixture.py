"""MixtureLoader: batch k is a pure function of (datasets, rates, seed, batch size, block size, k),
each source holds its rate's share of the rows, and each reads its own stream of samples."""

import hashlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from theseus.data.loader import Loader
from theseus.data.mixture import MixtureLoader, Sampling, open_mixture
from theseus.data.store import DatasetNotFound, DatasetWriter, open_dataset

EOT = 100257
TOKENIZER = {"backend": "tiktoken", "name": "cl100k_base", "vocab_size": 100277, "eot": EOT}
C2_FIRST = 50_000  # tokens of "c2" are >= this, those of "c1" below: a row's content names its source


def padded_rows(n, width):
    """Row i: prompt [i, i], response [1000 + i] * (i % 3 + 1), then eot; the loss covers the response and eot."""
    tokens = np.full((n, width), EOT, dtype=np.uint32)
    mask = np.zeros((n, width), dtype=bool)
    for i in range(n):
        r = i % 3 + 1
        tokens[i, :2] = i
        tokens[i, 2:2 + r] = 1000 + i
        mask[i, 2:3 + r] = True
    return tokens, mask


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = tmp_path_factory.mktemp("root")
    rng = np.random.default_rng(0)
    c1 = rng.integers(0, C2_FIRST, 5000, dtype=np.uint32)
    c2 = rng.integers(C2_FIRST, 100_000, 4000, dtype=np.uint32)
    for name, train, val in (("c1", c1, c1[:300]), ("c1copy", c1, c1[:300]), ("c2", c2, c2[:250])):
        with DatasetWriter(root, name, "contiguous") as w:
            w.set_tokenizer(TOKENIZER)
            w.append("train", train)
            w.append("val", val)
    for name, width in (("p", 6), ("narrow", 4)):
        tokens, mask = padded_rows(10, width)
        with DatasetWriter(root, name, "padded") as w:
            w.set_tokenizer(TOKENIZER)
            w.append("train", tokens, mask)
            w.append("val", tokens[:2], mask[:2])
    return root


def mixture(root, rates=(("c1", 0.5), ("p", 0.3), ("c2", 0.2)), **kwargs):
    return MixtureLoader([(open_dataset(root, name), rate) for name, rate in rates], **kwargs)


def digest(batch):
    h = hashlib.sha256()
    for key in ("x", "y", "padding_mask"):
        h.update(np.ascontiguousarray(batch[key]).tobytes())
    return h.hexdigest()


def assemble(loader, k, slices):
    parts = [loader.batch(k, rows=s) for s in slices]
    return {key: np.concatenate([p[key] for p in parts]) for key in parts[0]}


def walk(mix, steps):
    """``(source, x row, y row, mask row)`` of every row of steps 0..steps-1, grouped by source in run order."""
    by_source = {s: [] for s in range(len(mix.names))}
    for k in range(steps):
        b, sources = mix.batch(k), mix.source(k)
        for row, s in enumerate(sources.tolist()):
            by_source[s].append((b["x"][row], b["y"][row], b["padding_mask"][row]))
    return by_source


def test_batch_shapes_and_sources(root):
    mix = mixture(root, seed=1, batch_size=10, block_size=5)
    assert mix.names == ("c1", "p", "c2") and mix.rates == (0.5, 0.3, 0.2)
    b = mix.batch(3)
    assert b["x"].shape == b["y"].shape == b["padding_mask"].shape == (10, 5)
    assert b["x"].dtype == b["y"].dtype == np.int32 and b["padding_mask"].dtype == bool
    sources = mix.source(3)
    assert np.bincount(sources, minlength=3).tolist() == [5, 3, 2]
    for row, s in enumerate(sources.tolist()):
        if s == 1:
            assert b["x"][row, 0] == b["x"][row, 1] < 10  # a padded row opens with its prompt [i, i]
        else:
            assert b["padding_mask"][row].all()
            assert ((b["x"][row] >= C2_FIRST) == (s == 2)).all()
            np.testing.assert_array_equal(b["y"][row, :-1], b["x"][row, 1:])


@pytest.mark.parametrize("k", [0, 3, 17])
def test_same_batch_for_any_topology(root, k):
    mix = mixture(root, seed=7, batch_size=8, block_size=5)
    want, want_sources = digest(mix.batch(k)), mix.source(k)
    one_device_8_micro = [slice(m, m + 1) for m in range(8)]
    eight_devices = [np.array([d]) for d in range(8)]
    two_hosts_two_devices = [slice((2 * h + d) * 2, (2 * h + d) * 2 + 2) for h in range(2) for d in range(2)]
    for slices in (one_device_8_micro, eight_devices, two_hosts_two_devices):
        assert digest(assemble(mix, k, slices)) == want
        np.testing.assert_array_equal(np.concatenate([mix.source(k, rows=s) for s in slices]), want_sources)


def test_fresh_mixture_matches_one_that_ran(root):
    ran = mixture(root, seed=3, batch_size=4, block_size=5)
    history = [digest(ran.batch(k)) for k in range(12)]
    assert digest(mixture(root, seed=3, batch_size=4, block_size=5).batch(11)) == history[11]
    assert digest(ran.batch(4)) == history[4]  # asking again, out of order, changes nothing
    assert digest(ran.batch(4)) == history[4]
    assert len(set(history)) == 12  # every step differs


def test_seeds_sizes_splits_and_rates_matter(root):
    base = digest(mixture(root, seed=0, batch_size=4, block_size=8).batch(2))
    assert digest(mixture(root, seed=1, batch_size=4, block_size=8).batch(2)) != base
    assert digest(mixture(root, seed=0, batch_size=4, block_size=8, split="val").batch(2)) != base
    other_rates = (("c1", 0.2), ("p", 0.3), ("c2", 0.5))
    assert digest(mixture(root, other_rates, seed=0, batch_size=4, block_size=8).batch(2)) != base


def test_rates_are_normalised(root):
    decimals = mixture(root, (("c1", 0.7), ("c2", 0.3)), seed=4, batch_size=10, block_size=6)
    weights = mixture(root, (("c1", 7), ("c2", 3)), seed=4, batch_size=10, block_size=6)
    assert weights.rates == decimals.rates == (0.7, 0.3)
    for k in range(20):
        assert digest(weights.batch(k)) == digest(decimals.batch(k))


@settings(max_examples=25, deadline=None)
@given(batch_size=st.integers(1, 16), k=st.integers(0, 10**9), data=st.data())
def test_any_row_subset_matches_the_global_batch(root, batch_size, k, data):
    mix = mixture(root, seed=11, batch_size=batch_size, block_size=5)
    full, sources = mix.batch(k), mix.source(k)
    rows = data.draw(st.lists(st.integers(0, batch_size - 1), max_size=batch_size))
    part = mix.batch(k, rows=np.array(rows, dtype=np.int64))
    for key in full:
        np.testing.assert_array_equal(part[key], full[key][rows])
    np.testing.assert_array_equal(mix.source(k, rows=np.array(rows, dtype=np.int64)), sources[rows])


@pytest.mark.parametrize("rates", [(0.7, 0.3), (0.5, 0.25, 0.25), (0.9, 0.1), (1, 1, 1)])
@pytest.mark.parametrize("seed", [0, 1, 2024])
@pytest.mark.parametrize("batch_size", [8, 25])
def test_each_source_holds_its_share(root, rates, seed, batch_size):
    names = ("c1", "c2", "c1copy")[:len(rates)]
    mix = mixture(root, tuple(zip(names, rates)), seed=seed, batch_size=batch_size, block_size=5)
    want = np.array(rates) / sum(rates)
    counts = np.zeros(len(rates), dtype=np.int64)
    for k in range(10_000 // batch_size):  # 10,000 rows
        counts += np.bincount(mix.source(k), minlength=len(rates))
        # after every step each source is at most one row (two or three sources) from its rate
        assert (np.abs(counts - want * (k + 1) * batch_size) <= 1 + 1e-9).all()
    assert counts.sum() == 10_000
    assert (np.abs(counts / 10_000 - want) <= 0.01).all()


@pytest.mark.parametrize("batch_size", [1, 3, 512])
def test_a_rate_below_one_row_per_step(root, batch_size):
    rates = (0.6, 0.001, 0.399)
    mix = mixture(root, tuple(zip(("c1", "c2", "c1copy"), rates)), seed=9, batch_size=batch_size, block_size=5)
    counts = np.zeros(3, dtype=np.int64)
    for k in range(4000 // batch_size + 1):
        counts += np.bincount(mix.source(k), minlength=3)
        assert (np.abs(counts - np.array(rates) * (k + 1) * batch_size) <= 1 + 1e-9).all()
    assert counts[1] >= 4


def test_sources_read_their_own_streams_without_gaps(root):
    """Source s's i-th row of the run is row 0 of step i of a batch-1 Loader with the source's seed."""
    mix = mixture(root, seed=5, batch_size=6, block_size=5)
    for s, rows in walk(mix, 12).items():
        assert len(rows) >= 10
        alone = Loader(open_dataset(root, mix.names[s]), seed=mix.source_seeds[s], batch_size=1, block_size=5)
        for i, (x, y, mask) in enumerate(rows):
            want = alone.batch(i)
            np.testing.assert_array_equal(x, want["x"][0])
            np.testing.assert_array_equal(y, want["y"][0])
            np.testing.assert_array_equal(mask, want["padding_mask"][0])


def test_padded_source_respects_its_mask_and_covers_each_epoch(root):
    mix = mixture(root, (("c1", 0.5), ("p", 0.5)), seed=2, batch_size=4, block_size=5)
    rows = walk(mix, 10)[1]  # 20 padded rows: two epochs of 10
    assert len(rows) == 20
    seen = []
    for x, y, mask in rows:
        i = int(x[0])
        seen.append(i)
        np.testing.assert_array_equal(x[:2], [i, i])
        assert y[mask].tolist() == [1000 + i] * (i % 3 + 1) + [EOT]  # the response and its eot, nothing else
    assert sorted(seen[:10]) == list(range(10)) and sorted(seen[10:]) == list(range(10))
    assert seen[:10] != seen[10:]  # reshuffled per epoch


def test_narrow_padded_rows_are_padded_up_to_the_block(root):
    with pytest.raises(ValueError, match=r"block_size 8 is longer than the rows"):
        Loader(open_dataset(root, "narrow"), batch_size=2, block_size=8)  # the single-dataset loader refuses
    mix = mixture(root, (("c1", 0.5), ("narrow", 0.5)), seed=0, batch_size=8, block_size=8)
    rows = walk(mix, 3)[1]
    assert len(rows) == 12
    tokens, data_mask = padded_rows(10, 4)
    for x, y, mask in rows:
        i = int(x[0])
        np.testing.assert_array_equal(x, [*tokens[i], *[EOT] * 4])
        np.testing.assert_array_equal(y, [*tokens[i, 1:], *[EOT] * 5])
        np.testing.assert_array_equal(mask, [*data_mask[i, 1:], *[False] * 5])
    full = mixture(root, (("narrow", 1),), batch_size=2, block_size=4).batch(0)  # block == width: one eot past it
    assert not full["padding_mask"][:, -1].any() and (full["y"][:, -1] == EOT).all()


def test_sources_holding_the_same_data_read_different_samples(root):
    mix = mixture(root, (("c1", 0.5), ("c1copy", 0.5)), seed=0, batch_size=4, block_size=8)
    assert mix.source_seeds[0] != mix.source_seeds[1]
    streams = walk(mix, 10)
    first, second = np.array([x for x, _, _ in streams[0]]), np.array([x for x, _, _ in streams[1]])
    assert first.shape == second.shape == (20, 8)
    assert (first != second).any(axis=1).sum() >= 18  # two streams of one seed would agree on every row


def test_block_size_must_fit_each_source(root):
    with pytest.raises(ValueError, match=r"block_size 250 is too long for dataset 'c2' val: .* the split has 250"):
        mixture(root, (("c1", 0.5), ("c2", 0.5)), split="val", batch_size=2, block_size=250)
    mixture(root, (("c1", 0.5), ("c2", 0.5)), split="val", batch_size=2, block_size=249).batch(0)  # exactly fits


def test_bad_arguments(root):
    for rate in (0, -0.5, float("nan"), float("inf"), True, "0.5", None):
        with pytest.raises(ValueError, match=r"sampling rate of dataset 'c1' must be a finite number > 0"):
            Sampling("c1", rate)
        with pytest.raises(ValueError, match=r"sampling rate of dataset 'c1' must be a finite number > 0"):
            mixture(root, (("c1", rate),))
    with pytest.raises(ValueError, match="invalid dataset name"):
        Sampling("../c1", 0.5)
    with pytest.raises(ValueError, match="at least one"):
        MixtureLoader([])
    with pytest.raises(TypeError, match=r"takes \(Dataset, rate\) pairs, got Sampling"):
        MixtureLoader([Sampling("c1", 0.5)])
    with pytest.raises(ValueError, match=r"'c1' named more than once"):
        mixture(root, (("c1", 0.5), ("c1", 0.5)))
    with pytest.raises(ValueError, match="batch_size and block_size must be >= 1"):
        mixture(root, batch_size=0)
    with pytest.raises(ValueError, match="unknown split"):
        mixture(root, split="test")
    mix = mixture(root, batch_size=4, block_size=8)
    with pytest.raises(ValueError, match=r"rows must be in \[0, 4\)"):
        mix.batch(0, rows=[3, 4])
    with pytest.raises(ValueError, match=r"rows must be in \[0, 4\)"):
        mix.source(0, rows=[-1])
    with pytest.raises(ValueError, match="non-negative integer"):
        mix.batch(-1)
    with pytest.raises(ValueError, match="non-negative integer"):
        mix.source(1.5)


def test_open_mixture(root):
    mix = open_mixture(root, [Sampling("c1", 0.7), Sampling("p", 0.3)], seed=3, batch_size=4, block_size=5)
    assert digest(mix.batch(6)) == digest(mixture(root, (("c1", 0.7), ("p", 0.3)), seed=3, batch_size=4,
                                                  block_size=5).batch(6))
    with pytest.raises(DatasetNotFound, match=r"'fineweb' not found .* theseus run data/tokenize/fineweb "):
        open_mixture(root, [Sampling("c1", 0.7), Sampling("fineweb", 0.3)])
    with pytest.raises(ValueError, match="at least one Sampling"):
        open_mixture(root, [])
    with pytest.raises(ValueError, match=r"'c1' named more than once"):
        open_mixture(root, [Sampling("c1", 0.7), Sampling("c1", 0.3)])
    with pytest.raises(TypeError, match=r"takes Sampling\(dataset, rate\) entries, got \('c1', 0.7\)"):
        open_mixture(root, [("c1", 0.7)])


def test_open_mixture_suffix(tmp_path):
    with DatasetWriter(tmp_path, "pydoc-small", "contiguous") as w:
        w.append("train", np.arange(100))
        w.append("val", np.arange(10))
    mix = open_mixture(tmp_path, [Sampling("pydoc", 1)], batch_size=2, block_size=8, suffix="-small")
    assert mix.names == ("pydoc-small",) and mix.batch(0)["x"].shape == (2, 8)
    with pytest.raises(DatasetNotFound, match=r"'fineweb-small' not found .* theseus run data/tokenize/fineweb "):
        open_mixture(tmp_path, [Sampling("fineweb", 1)], suffix="-small")
