"""Model FLOPs utilisation: FLOPs per token, chip peaks, and a measured CPU peak.

>>> from theseus.model.config import GPTConfig
>>> cfg = GPTConfig(n_embd=128, n_layers=4, n_head=4, block_size=512)
>>> fpt = flops_per_token(cfg, n_params=13_630_208)
>>> round(mfu(tokens_per_second=10_000, flops_per_token=fpt, peak=1e12), 4)
0.8493
"""

import json
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from loguru import logger

from theseus.errors import BadInput
from theseus.store.fs import read_bytes, write_atomic

# Dense (no sparsity) peak FLOP/s per chip. "float32" is the rate of the unit XLA uses
# for a float32 matmul at default precision: TF32 tensor cores on NVIDIA Ampere and
# later, single-pass bfloat16 on the TPU MXU. float16 runs at the bfloat16 rate.
PEAK_FLOPS = {
    "H100 SXM": {"bfloat16": 989.4e12, "float32": 494.7e12},
    "H100 PCIe": {"bfloat16": 756.0e12, "float32": 378.0e12},
    "H100 NVL": {"bfloat16": 835.5e12, "float32": 417.5e12},
    "H200": {"bfloat16": 989.4e12, "float32": 494.7e12},
    "H200 NVL": {"bfloat16": 835.5e12, "float32": 417.5e12},
    "A100 40GB": {"bfloat16": 312.0e12, "float32": 156.0e12},
    "A100 80GB": {"bfloat16": 312.0e12, "float32": 156.0e12},
    "L40": {"bfloat16": 181.05e12, "float32": 90.5e12},
    "L40S": {"bfloat16": 362.05e12, "float32": 183.0e12},
    "TPU v4": {"bfloat16": 275.0e12, "float32": 275.0e12},
    "TPU v5e": {"bfloat16": 197.0e12, "float32": 197.0e12},
    "TPU v5p": {"bfloat16": 459.0e12, "float32": 459.0e12},
    "TPU v6e": {"bfloat16": 918.0e12, "float32": 918.0e12},
}

# (substrings that must all appear in the lower-cased device_kind, PEAK_FLOPS key),
# most specific first. Examples of device_kind: "NVIDIA H100 80GB HBM3",
# "NVIDIA A100-SXM4-40GB", "NVIDIA L40S", "TPU v4", "TPU v5 lite", "TPU v5", "TPU v6 lite".
_KIND_RULES = (
    (("gh200",), "H200"),
    (("h200", "nvl"), "H200 NVL"),
    (("h200",), "H200"),
    (("h100", "nvl"), "H100 NVL"),
    (("h100", "pcie"), "H100 PCIe"),
    (("h100",), "H100 SXM"),
    (("a100", "40gb"), "A100 40GB"),
    (("a100",), "A100 80GB"),
    (("l40s",), "L40S"),
    (("l40",), "L40"),
    (("tpu v4",), "TPU v4"),
    (("tpu v5 lite",), "TPU v5e"),
    (("tpu v5e",), "TPU v5e"),
    (("tpu v5",), "TPU v5p"),
    (("tpu v6 lite",), "TPU v6e"),
    (("tpu v6e",), "TPU v6e"),
)

_DTYPE_NAMES = {"bfloat16": "bfloat16", "float16": "bfloat16", "float32": "float32"}


def _dtype_name(dtype) -> str:
    name = np.dtype(dtype).name if not isinstance(dtype, str) else dtype
    if name not in _DTYPE_NAMES:
        raise BadInput(f"no peak FLOPs for dtype {dtype!r}; use one of {sorted(_DTYPE_NAMES)}")
    return _DTYPE_NAMES[name]


def flops_per_token(config, n_params: int, seq_len: int | None = None) -> float:
    """Training FLOPs per token: 6 * N + 12 * n_layers * n_embd * seq_len (PaLM / nanoGPT).

    N is the parameter count without position embeddings
    (`count_params(params, non_embedding=True)`; the tied `wte` counts, it is the output
    layer). 6N is forward + backward of every matmul; the second term is attention
    scores and values, 2 * 2 * n_layers * seq_len * n_embd forward, times 3 with the
    backward. `seq_len` defaults to `config.block_size`.

    >>> from theseus.model.config import GPTConfig
    >>> flops_per_token(GPTConfig(n_embd=64, n_head=4, n_layers=2, block_size=128), 1000)
    202608.0
    """
    if n_params <= 0:
        raise BadInput(f"n_params must be positive, got {n_params!r}")
    T = config.block_size if seq_len is None else seq_len
    return float(6 * n_params + 12 * config.n_layers * config.n_embd * T)


def chip_peak(device, dtype="bfloat16") -> float | None:
    """Dense peak FLOP/s of one `jax.Device` for dtype, by `device.device_kind`; None when unknown (CPU).

    >>> import jax
    >>> chip_peak(jax.devices("cpu")[0]) is None
    True
    """
    name = _dtype_name(dtype)
    kind = str(getattr(device, "device_kind", "")).lower()
    for needles, chip in _KIND_RULES:
        if all(n in kind for n in needles):
            return PEAK_FLOPS[chip][name]
    return None


def measure_cpu_peak(dtype="float32", size: int = 2048, reps: int = 3, max_seconds: float = 1.5) -> float:
    """FLOP/s of a jitted size x size matmul on the first CPU device (best of a few runs).

    Stops repeating once `max_seconds` of timed runs have passed. Caching the number is
    the caller's business.

    >>> measure_cpu_peak(size=256, reps=2) > 0
    True
    """
    _dtype_name(dtype)  # validates
    cpu = jax.local_devices(backend="cpu")[0]  # with several processes, devices("cpu")[0] may be another host's
    a = jax.device_put(jnp.ones((size, size), dtype), cpu)
    b = jax.device_put(jnp.full((size, size), 0.5, a.dtype), cpu)
    matmul = jax.jit(jnp.matmul)
    matmul(a, b).block_until_ready()
    best = float("inf")
    spent = 0.0
    for _ in range(max(reps, 1)):
        start = time.perf_counter()
        matmul(a, b).block_until_ready()
        elapsed = time.perf_counter() - start
        best = min(best, elapsed)
        spent += elapsed
        if spent > max_seconds:
            break
    return 2.0 * size**3 / best


def mfu(tokens_per_second: float, flops_per_token: float, peak: float) -> float:
    """Model FLOPs utilisation: tokens_per_second * flops_per_token / peak.

    `peak` is the peak of all the chips that produced those tokens
    (`chip_peak(device) * jax.device_count()`).

    >>> mfu(1000.0, 1e9, 1e13)
    0.1
    """
    if peak is None or not peak > 0:
        raise BadInput(f"peak FLOP/s must be positive, got {peak!r}")
    return tokens_per_second * flops_per_token / peak


def _load_peak_file(path: str) -> dict[str, float]:
    try:
        data = json.loads(read_bytes(path))
    except (OSError, ValueError):  # missing or unreadable: measure again
        return {}
    return {str(k): float(v) for k, v in data.items() if isinstance(v, (int, float))} if isinstance(data, dict) else {}


def cached_cpu_peak(path: str, device_kind: str, dtype: str, log: Any = logger) -> float:
    """The measured matmul peak of this CPU for ``dtype``: read from the folder ``path`` or measured once.

    Each measurement is its own small JSON file (``<device kind>-<dtype>.json``),
    written once and never modified, like everything else in a root.

    >>> import tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "meta", "cpu_peak")
    >>> first = cached_cpu_peak(path, "cpu", "float32")
    >>> cached_cpu_peak(path, "cpu", "float32") == first
    True
    """
    key = f"{device_kind}/{dtype}"
    name = "".join(c if c.isalnum() or c in "-_." else "_" for c in f"{device_kind}-{dtype}")
    file = f"{path}/{name}.json"
    cached = _load_peak_file(file).get(key)
    if cached:
        return cached
    peak = measure_cpu_peak(dtype)
    log.info(f"MFU | measured {key} matmul peak {peak / 1e9:.1f} GFLOP/s, cached in {file}")
    try:
        write_atomic(file, json.dumps({key: peak}, indent=2, sort_keys=True).encode())
    except OSError as error:  # a read-only root still trains
        log.warning(f"MFU | could not cache the CPU peak in {file}: {error}")
    return peak


def mesh_peak(mesh: Any, dtype: str, cache: str, log: Any = logger) -> float:
    """Peak FLOP/s of the devices of ``mesh`` for ``dtype``, NaN when unknown: a chip's table entry
    (`chip_peak`) times the device count; on CPU this machine's measured matmul peak (all its virtual
    devices share it), read from or written to the folder ``cache`` (`cached_cpu_peak`), so a trainer
    asks once, before its first timed step. Processes other than 0 of a CPU run neither measure nor
    cache (only process 0 writes metrics).

    >>> import jax, tempfile
    >>> from jax.sharding import Mesh
    >>> mesh_peak(Mesh(jax.devices()[:1], ("data",)), "float32", tempfile.mkdtemp()) > 0
    True
    """
    device = mesh.devices.flat[0]
    if device.platform == "cpu":
        if jax.process_index() != 0:
            return float("nan")
        return cached_cpu_peak(cache, str(device.device_kind), dtype, log)
    chip = chip_peak(device, dtype)
    if chip is None:
        log.warning(f"MFU | unknown chip {device.device_kind!r}: train/mfu is NaN")
        return float("nan")
    return chip * mesh.devices.size
