"""The cost of checking a checkpoint as it is restored: ``restore`` (sha256 of every byte read, the default) versus
``restore(verify=False)`` (presence, type and size of the files only), and a separate hash pass over every file
before a restore, for comparison.

One GPT-shaped float32 state of about ``--mib`` MiB, saved once; rounds alternate the three, the best of
``--repeat`` is kept. Prints the times and the ratio of a checked restore to an unchecked one.

    uv run python bench/restore_verify.py [--mib 48] [--repeat 5] [--dir /tmp]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np

from theseus.train import checkpoint as ckpt
from theseus.train import manifest as mf


def state_of(mib: float, d: int = 256) -> dict:
    """Params and two AdamW moments of ``d``-wide square layers, about ``mib`` MiB in all, random float32."""
    rng = np.random.default_rng(0)
    layers = max(1, round(mib * 2**20 / (3 * 4 * d * d)))
    params = {f"blocks_{i}": {"kernel": jnp.asarray(rng.standard_normal((d, d), dtype=np.float32))}
              for i in range(layers)}
    moments = jax.tree.map(lambda a: a * 0.5, params)
    return {"params": params, "mu": moments, "nu": jax.tree.map(jnp.abs, moments), "step": jnp.int32(7)}


def timed(fn) -> float:
    """Seconds one call of ``fn`` takes."""
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=float, default=48)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--dir", default=None)
    args = parser.parse_args()
    state = state_of(args.mib)
    nbytes = sum(a.nbytes for a in jax.tree.leaves(state))
    target = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), state)
    work = tempfile.mkdtemp(dir=args.dir)
    try:
        folder = f"{work}/ckpt"
        ckpt.save(folder, state)

        def restore(verify: bool) -> None:
            restored, _ = ckpt.restore(folder, target, verify=verify)
            jax.block_until_ready(restored)

        def hash_pass_then_restore() -> None:
            mf.verify(folder)
            restore(False)

        restore(True)  # warm: page cache, TensorStore, JAX
        plain = checked = separate = float("inf")
        for _ in range(args.repeat):  # alternate, so drift hits all three alike
            plain = min(plain, timed(lambda: restore(False)))
            checked = min(checked, timed(lambda: restore(True)))
            separate = min(separate, timed(hash_pass_then_restore))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"state {nbytes / 2**20:.1f} MiB, {len(jax.tree.leaves(state))} leaves, best of {args.repeat}")
    print(f"restore(verify=False)            {plain * 1e3:8.1f} ms")
    print(f"restore (checked as read)        {checked * 1e3:8.1f} ms")
    print(f"hash pass, then restore          {separate * 1e3:8.1f} ms")
    print(f"ratio checked / unchecked        {checked / plain:8.2f}x")
    print(f"ratio hash pass / unchecked      {separate / plain:8.2f}x")


if __name__ == "__main__":
    main()
