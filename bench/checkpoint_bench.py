"""Save + restore time of one GPT train state (params + AdamW moments): theseus vs Orbax.

Both write the same arrays to the same disk and restore them onto the same
shardings; runs alternate between the two and the best of ``--repeat`` is kept.

    uv run --group bench python bench/checkpoint_bench.py [--layers 3] [--d 512] [--repeat 3] [--dir /tmp]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from importlib.metadata import version

import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp

from theseus.train import checkpoint as ckpt


def gpt_state(vocab: int, block: int, d: int, layers: int) -> dict:
    """A GPT-shaped train state of float32 params and non-zero AdamW moments."""
    rng = np.random.default_rng(0)

    def w(*shape):
        return jnp.asarray(rng.standard_normal(shape, dtype=np.float32))

    def ln():
        return {"scale": w(d), "bias": w(d)}

    params = {"wte": {"embedding": w(vocab, d)}, "wpe": {"embedding": w(block, d)}, "ln_f": ln()}
    for i in range(layers):
        params[f"blocks_{i}"] = {
            "ln_1": ln(),
            "attn": {"c_attn": {"kernel": w(d, 3 * d), "bias": w(3 * d)}, "c_proj": {"kernel": w(d, d), "bias": w(d)}},
            "ln_2": ln(),
            "mlp": {"c_fc": {"kernel": w(d, 4 * d), "bias": w(4 * d)}, "c_proj": {"kernel": w(4 * d, d), "bias": w(d)}},
        }
    tx = optax.adamw(1e-3)
    opt_state = tx.init(params)
    _, opt_state = tx.update(params, opt_state, params)  # moments = f(params): not all zeros
    return jax.block_until_ready({"params": params, "opt_state": opt_state, "step": jnp.int32(1)})


def abstract(state):
    return jax.tree_util.tree_map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding), state)


def time_theseus(state, folder: str) -> tuple[float, float]:
    t0 = time.perf_counter()
    ckpt.save(folder, state)
    t1 = time.perf_counter()
    restored, _ = ckpt.restore(folder, abstract(state))
    jax.block_until_ready(restored)
    return t1 - t0, time.perf_counter() - t1


def time_orbax(state, folder: str) -> tuple[float, float]:
    checkpointer = ocp.StandardCheckpointer()
    t0 = time.perf_counter()
    checkpointer.save(folder, state)
    checkpointer.wait_until_finished()
    t1 = time.perf_counter()
    restored = checkpointer.restore(folder, abstract(state))
    jax.block_until_ready(restored)
    t2 = time.perf_counter()
    checkpointer.close()
    return t1 - t0, t2 - t1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab", type=int, default=8192)
    parser.add_argument("--block", type=int, default=512)
    parser.add_argument("--d", type=int, default=512)
    parser.add_argument("--layers", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--dir", default=None, help="parent folder (same disk for both)")
    args = parser.parse_args()

    state = gpt_state(args.vocab, args.block, args.d, args.layers)
    nbytes = sum(x.nbytes for x in jax.tree_util.tree_leaves(state))
    leaves = len(jax.tree_util.tree_leaves(state))
    print(f"state: {nbytes / 2**20:.1f} MiB in {leaves} leaves, devices={jax.device_count()}, "
          f"jax {jax.__version__}, orbax-checkpoint {version('orbax-checkpoint')}")

    root = tempfile.mkdtemp(prefix="ckpt-bench-", dir=args.dir)
    best = {"theseus": [np.inf, np.inf], "orbax": [np.inf, np.inf]}
    try:
        for i in range(args.repeat):
            for name, run in (("theseus", time_theseus), ("orbax", time_orbax)):
                save_s, restore_s = run(state, f"{root}/{name}-{i}")
                print(f"  run {i} {name:8s} save {save_s:6.3f}s  restore {restore_s:6.3f}s")
                best[name] = [min(best[name][0], save_s), min(best[name][1], restore_s)]
        t0 = time.perf_counter()
        ckpt.restore(f"{root}/theseus-0", abstract(state), verify=False)
        unchecked_s = time.perf_counter() - t0
    finally:
        shutil.rmtree(root, ignore_errors=True)

    (ts_save, ts_restore), (ob_save, ob_restore) = best["theseus"], best["orbax"]
    print(f"theseus: save {ts_save:.3f}s  restore {ts_restore:.3f}s  total {ts_save + ts_restore:.3f}s"
          f"  ({nbytes / 2**20 / ts_save:.0f} MiB/s save; unchecked restore, verify=False, {unchecked_s:.3f}s)")
    print(f"orbax:   save {ob_save:.3f}s  restore {ob_restore:.3f}s  total {ob_save + ob_restore:.3f}s")
    print(f"ratio theseus/orbax: save {ts_save / ob_save:.2f}x  restore {ts_restore / ob_restore:.2f}x  "
          f"total {(ts_save + ts_restore) / (ob_save + ob_restore):.2f}x")


if __name__ == "__main__":
    main()
