"""Pick the largest per-device micro-batch whose compiled step fits in memory.

Each candidate is compiled ahead of time from abstract shapes
(`jax.jit(f).lower(*ShapeDtypeStructs).compile()`), so probing allocates no arrays;
the compiler's memory analysis is compared with a byte budget.

>>> import jax, jax.numpy as jnp
>>> def compile_fn(n):
...     x = jax.ShapeDtypeStruct((n, 256), jnp.float32)
...     return jax.jit(lambda a: a @ a.T).lower(x).compile()
>>> best, trials = probe_batch_size([1024, 64, 8], compile_fn, memory_budget_bytes=1_000_000)
>>> best, [fits for _, _, fits in trials]
(64, [False, True])
"""

import os
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from theseus.errors import BadInput

ENV_VAR = "THESEUS_AUTOBATCH_SIZE_CANDIDATES"
DEFAULT_CANDIDATES = (64, 32, 16, 8, 4, 2, 1)
_OOM_MARKERS = ("resource_exhausted", "resource exhausted", "out of memory")


class ProbeResult(NamedTuple):
    """The chosen batch size and every (candidate, bytes or None, fits) tried, largest first."""

    batch_size: int
    trials: list[tuple[int, int | None, bool]]


def candidates_from_env(environ: Mapping[str, str] | None = None) -> tuple[int, ...]:
    """Candidate sizes from THESEUS_AUTOBATCH_SIZE_CANDIDATES ("8 4 2 1" or "8,4,2,1").

    They must be strictly descending positive ints. Unset or blank gives
    DEFAULT_CANDIDATES (64 32 16 8 4 2 1).

    >>> candidates_from_env({"THESEUS_AUTOBATCH_SIZE_CANDIDATES": "8, 4 2 1"})
    (8, 4, 2, 1)
    >>> candidates_from_env({})
    (64, 32, 16, 8, 4, 2, 1)
    """
    environ = os.environ if environ is None else environ
    raw = environ.get(ENV_VAR, "")
    if not raw.strip():
        return DEFAULT_CANDIDATES
    parts = [p for p in re.split(r"[\s,]+", raw.strip()) if p]
    try:
        values = tuple(int(p) for p in parts)
    except ValueError:
        raise BadInput(f"{ENV_VAR}={raw!r} must be positive integers separated by spaces or commas") from None
    if any(v <= 0 for v in values):
        raise BadInput(f"{ENV_VAR}={raw!r} must hold positive integers only")
    if any(a <= b for a, b in zip(values[:-1], values[1:], strict=True)):
        raise BadInput(f"{ENV_VAR}={raw!r} must be strictly descending, like '8 4 2 1'")
    return values


def default_memory_budget(device=None, device_fraction: float = 0.9, ram_fraction: float = 0.8) -> int:
    """Bytes a step may use on `device` (default: the first local device).

    `device.memory_stats()["bytes_limit"] * device_fraction` when the backend reports
    it (GPU, TPU); otherwise total physical RAM * ram_fraction (CPU).

    >>> default_memory_budget() > 0
    True
    """
    device = jax.local_devices()[0] if device is None else device
    try:
        stats = device.memory_stats()
    except Exception:  # backends without memory stats raise different error types
        stats = None
    if stats and stats.get("bytes_limit"):
        return int(stats["bytes_limit"] * device_fraction)
    try:
        ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        raise BadInput("cannot tell this machine's memory; pass memory_budget_bytes") from None
    return int(ram * ram_fraction)


def compiled_bytes(compiled) -> int | None:
    """Peak bytes of a compiled step: temp + arguments + outputs - aliased (donated) buffers.

    None when the backend gives no memory analysis.

    >>> import jax, jax.numpy as jnp
    >>> c = jax.jit(lambda a: a + 1).lower(jax.ShapeDtypeStruct((256,), jnp.float32)).compile()
    >>> compiled_bytes(c)
    2048
    """
    analyze = getattr(compiled, "memory_analysis", None)
    if analyze is None:
        return None
    try:
        stats = analyze()
    except (NotImplementedError, RuntimeError):
        return None
    if stats is None:
        return None
    if isinstance(stats, (list, tuple)):  # one entry per device on some versions
        sizes = [s for s in (_stats_bytes(s) for s in stats) if s is not None]
        return max(sizes) if sizes else None
    return _stats_bytes(stats)


def _stats_bytes(stats) -> int | None:
    fields = ("temp_size_in_bytes", "argument_size_in_bytes", "output_size_in_bytes")
    if stats is None or not any(hasattr(stats, f) for f in fields):
        return None
    total = sum(int(getattr(stats, f, 0) or 0) for f in fields)
    return total - int(getattr(stats, "alias_size_in_bytes", 0) or 0)


def _is_oom(error: BaseException) -> bool:
    text = f"{type(error).__name__}: {error}".lower()
    return any(marker in text for marker in _OOM_MARKERS)


def agreed_batch_size(size: int) -> int:
    """The micro-batch every process of the run uses: the smallest that any process's probe found to fit
    (each probes its own devices; a run of several processes must step with one size). One process: ``size``.

    >>> agreed_batch_size(8)
    8
    """
    if jax.process_count() == 1:
        return int(size)
    from jax.experimental import multihost_utils  # a collective of every process, only in a multi-process run

    return int(min(multihost_utils.process_allgather(jnp.int32(size)).tolist()))


def probe_batch_size(
    candidates: Iterable[int],
    compile_fn: Callable[[int], Any],
    memory_budget_bytes: int | None = None,
) -> ProbeResult:
    """Largest candidate whose `compile_fn(candidate)` fits in the budget, plus the trials.

    Candidates are tried largest first and probing stops at the first fit. A compile
    that fails with an out-of-memory error counts as not fitting (bytes None); other
    errors propagate. A compiled step without memory analysis counts as fitting.
    The budget defaults to `default_memory_budget()`. No fit is a ValueError that lists
    every size and the budget.

    >>> import jax, jax.numpy as jnp
    >>> fn = lambda n: jax.jit(jnp.sum).lower(jax.ShapeDtypeStruct((n,), jnp.float32)).compile()
    >>> probe_batch_size([4, 2, 1], fn, memory_budget_bytes=12)
    ProbeResult(batch_size=2, trials=[(4, 20, False), (2, 12, True)])
    >>> probe_batch_size([4], fn, memory_budget_bytes=10)
    Traceback (most recent call last):
    ...
    theseus.errors.BadInput: no batch size fits in the memory budget of 10 bytes (4: 20 bytes)
    """
    sizes = sorted({int(c) for c in candidates}, reverse=True)
    if not sizes or sizes[-1] <= 0:
        raise BadInput(f"batch size candidates must be positive ints, got {list(candidates)!r}")
    budget = default_memory_budget() if memory_budget_bytes is None else int(memory_budget_bytes)
    trials: list[tuple[int, int | None, bool]] = []
    for size in sizes:
        try:
            compiled = compile_fn(size)
        except Exception as error:
            if not _is_oom(error):
                raise
            trials.append((size, None, False))
            continue
        nbytes = compiled_bytes(compiled)
        fits = nbytes is None or nbytes <= budget
        trials.append((size, nbytes, fits))
        if fits:
            return ProbeResult(size, trials)
    tried = ", ".join(f"{s}: {'out of memory' if b is None else f'{b} bytes'}" for s, b, _ in trials)
    raise BadInput(f"no batch size fits in the memory budget of {budget} bytes ({tried})")


def abstract_batch(rows: int, block_size: int) -> dict[str, jax.ShapeDtypeStruct]:
    """ShapeDtypeStructs of a train_step batch of [rows, block_size] (x, y int32; padding_mask bool).

    >>> abstract_batch(8, 16)["x"].shape
    (8, 16)
    """
    return {
        "x": jax.ShapeDtypeStruct((rows, block_size), jnp.int32),
        "y": jax.ShapeDtypeStruct((rows, block_size), jnp.int32),
        "padding_mask": jax.ShapeDtypeStruct((rows, block_size), jnp.bool_),
    }
