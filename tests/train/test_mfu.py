import time
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import pytest

from theseus.model.config import GPTConfig
from theseus.train.mfu import PEAK_FLOPS, chip_peak, flops_per_token, measure_cpu_peak, mfu


def test_flops_per_token_is_6n_plus_attention():
    cfg = GPTConfig(n_embd=128, n_layers=4, n_head=4, block_size=512)
    assert flops_per_token(cfg, 1000) == 6 * 1000 + 12 * 4 * 128 * 512
    assert flops_per_token(cfg, 1000, seq_len=256) == 6 * 1000 + 12 * 4 * 128 * 256
    with pytest.raises(ValueError, match="n_params"):
        flops_per_token(cfg, 0)


@pytest.mark.parametrize(
    "kind, chip",
    [
        ("NVIDIA H100 80GB HBM3", "H100 SXM"),
        ("NVIDIA H100 PCIe", "H100 PCIe"),
        ("NVIDIA H100 NVL", "H100 NVL"),
        ("NVIDIA H200", "H200"),
        ("NVIDIA GH200 480GB", "H200"),
        ("NVIDIA A100-SXM4-40GB", "A100 40GB"),
        ("NVIDIA A100-SXM4-80GB", "A100 80GB"),
        ("NVIDIA A100 80GB PCIe", "A100 80GB"),
        ("NVIDIA L40", "L40"),
        ("NVIDIA L40S", "L40S"),
        ("TPU v4", "TPU v4"),
        ("TPU v5 lite", "TPU v5e"),
        ("TPU v5", "TPU v5p"),
        ("TPU v5p", "TPU v5p"),
        ("TPU v6 lite", "TPU v6e"),
    ],
)
def test_chip_peak_by_device_kind(kind, chip):
    device = SimpleNamespace(device_kind=kind)
    assert chip_peak(device, "bfloat16") == PEAK_FLOPS[chip]["bfloat16"]
    assert chip_peak(device, jnp.float32) == PEAK_FLOPS[chip]["float32"]
    assert chip_peak(device, "float16") == PEAK_FLOPS[chip]["bfloat16"]


def test_chip_peak_unknown_and_bad_dtype():
    assert chip_peak(jax.devices("cpu")[0], "float32") is None
    assert chip_peak(SimpleNamespace(device_kind="Mystery 9000")) is None
    with pytest.raises(ValueError, match="int8"):
        chip_peak(SimpleNamespace(device_kind="NVIDIA H100 PCIe"), "int8")


def test_peak_table_is_sane():
    for chip, peaks in PEAK_FLOPS.items():
        assert set(peaks) == {"bfloat16", "float32"}, chip
        assert 1e13 < peaks["float32"] <= peaks["bfloat16"] < 2e15, chip


def test_measure_cpu_peak_is_quick_and_positive():
    start = time.perf_counter()
    peak = measure_cpu_peak()
    assert time.perf_counter() - start < 10  # generous, for a shared machine
    assert 1e8 < peak < 1e14


def test_mfu():
    assert mfu(2000.0, 1e9, 4e12) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="peak"):
        mfu(1.0, 1.0, 0.0)
    with pytest.raises(ValueError, match="peak"):
        mfu(1.0, 1.0, None)


def test_docstring_examples_run():
    import doctest

    import theseus.train.mfu as module

    result = doctest.testmod(module)
    assert result.attempted > 0 and result.failed == 0
