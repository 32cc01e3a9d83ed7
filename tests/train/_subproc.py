"""Run a Python snippet in a fresh interpreter with N CPU devices and read back its JSON result.

The device count has to be fixed before JAX is imported, so multi-device tests
run their body in a subprocess. The snippet calls ``emit(obj)`` once; the helper
returns ``obj`` as decoded JSON.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from typing import Any

MARK = "@@RESULT@@"

_PRELUDE = f"""
import json as _json, os as _os, sys as _sys
def emit(obj):
    print({MARK!r} + _json.dumps(obj), flush=True)
"""


def python_env(devices: int = 1, extra: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for a child interpreter with ``devices`` CPU devices."""
    env = dict(os.environ)
    env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
    env["JAX_PLATFORMS"] = "cpu"
    env.update(extra or {})
    return env


def start_python(code: str, devices: int = 1, env: dict[str, str] | None = None, **popen: Any) -> subprocess.Popen:
    """Start ``code`` (with ``emit`` defined) in a child interpreter; return the Popen."""
    source = _PRELUDE + textwrap.dedent(code)
    return subprocess.Popen(
        [sys.executable, "-c", source],
        env=python_env(devices, env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **popen,
    )


def result_of(proc: subprocess.Popen, timeout: float = 180) -> Any:
    """Wait for ``proc`` and return what it emitted; AssertionError with its stderr on failure."""
    out, err = proc.communicate(timeout=timeout)
    lines = [line[len(MARK):] for line in out.splitlines() if line.startswith(MARK)]
    if proc.returncode != 0 or not lines:
        raise AssertionError(f"subprocess failed (rc={proc.returncode}):\n{out[-4000:]}\n{err[-6000:]}")
    return json.loads(lines[-1])


def run_python(code: str, devices: int = 1, env: dict[str, str] | None = None, timeout: float = 180) -> Any:
    """Run ``code`` with ``devices`` CPU devices and return the object it passed to ``emit``.

    >>> run_python("emit(1 + 1)")
    2
    """
    return result_of(start_python(code, devices, env), timeout)


def gpt_params(
    vocab: int = 64, block: int = 16, d: int = 32, layers: int = 2, ffn: int | None = None, seed: int = 0
) -> dict:
    """A GPT-shaped parameter tree of numpy arrays (float32; ``wpe`` in bfloat16), deterministic in ``seed``."""
    import ml_dtypes
    import numpy as np

    rng = np.random.default_rng(seed)
    ffn = 4 * d if ffn is None else ffn

    def w(*shape: int, dtype: Any = np.float32) -> Any:
        return rng.standard_normal(shape, dtype=np.float32).astype(dtype)

    def ln() -> dict:
        return {"scale": w(d), "bias": w(d)}

    params: dict = {"wte": {"embedding": w(vocab, d)}, "wpe": {"embedding": w(block, d, dtype=ml_dtypes.bfloat16)}}
    for i in range(layers):
        params[f"blocks_{i}"] = {
            "ln_1": ln(),
            "attn": {"c_attn": {"kernel": w(d, 3 * d), "bias": w(3 * d)}, "c_proj": {"kernel": w(d, d), "bias": w(d)}},
            "ln_2": ln(),
            "mlp": {"c_fc": {"kernel": w(d, ffn), "bias": w(ffn)}, "c_proj": {"kernel": w(ffn, d), "bias": w(d)}},
        }
    params["ln_f"] = ln()
    return params


def train_state(params: dict, step: int = 3) -> dict:
    """``{"params", "opt_state", "step"}`` with AdamW moments made non-zero by one update (single device)."""
    import jax
    import jax.numpy as jnp
    import optax

    params = jax.tree_util.tree_map(jnp.asarray, params)
    tx = optax.adamw(1e-3)
    opt_state = tx.init(params)
    grads = jax.tree_util.tree_map(lambda p: jnp.sin(p.astype(jnp.float32)).astype(p.dtype), params)
    updates, opt_state = tx.update(grads, opt_state, params)
    params = optax.apply_updates(params, updates)
    return {"params": params, "opt_state": opt_state, "step": jnp.int32(step)}


def leaf_hashes(tree: Any) -> dict[str, str]:
    """sha256 of ``np.asarray`` of every leaf (with its dtype and shape), by checkpoint leaf path."""
    import hashlib

    import jax
    import numpy as np

    from theseus.train.checkpoint import leaf_paths

    out = {}
    for name, leaf in zip(leaf_paths(tree), jax.tree_util.tree_leaves(tree), strict=True):
        a = np.asarray(leaf)
        h = hashlib.sha256(f"{a.dtype.name}{a.shape}".encode())
        h.update(np.ascontiguousarray(a).reshape(-1).view(np.uint8))
        out[name] = h.hexdigest()
    return out
