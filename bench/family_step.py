"""Step time of the Llama-family part against the GPT part at about equal parameter count and sequence (CPU).

Both models are built through their model parts (``get_part("model", "gpt")`` and
``get_part("model", "llama")``, the parts ``gpt/train/pretrain`` and ``llama/train/pretrain``
build), so what is timed is what those jobs train:

- GPT: n_embd 384, 6 layers, 6 heads, RoPE, biases, GELU MLP 4x, tied unembedding;
- Llama: n_embd 384, 6 layers, 6 heads with 2 key/value heads (grouped-query attention),
  RMSNorm, SwiGLU, RoPE, untied ``lm_head``; the SwiGLU width (1,200) makes its 6N
  parameter count (all but the embedding lookup table) within 0.1% of the GPT's.

Vocabulary 8192, sequence 256, batch 4, float32 parameters, activations ``--dtype``
(default float32: a CPU without native bf16 matmuls would time bf16's conversions, not
the model). The step is ``theseus.train.step.make_train_step`` with AdamW after clipping to
norm 1.0, jitted with the state donated. After ``--warmup`` steps each, rounds alternate
the two models (``--steps`` steps each, the order swapped every round) so that both share the
machine's noise; per model the median step time and the process CPU time per step are kept.

FLOPs per step: the part's own ``flops_per_token`` (6N + 12 L d T, as MFU uses) times the
tokens of a step, and, as a cross-check, XLA's ``cost_analysis()`` of the compiled step (which also
gives the bytes the step accesses: on a CPU a step this small is partly bound by memory traffic). The
FLOPs-normalised ratio is (Llama time / GPT time) / (Llama FLOPs / GPT FLOPs): 1.0 means the
family costs what its FLOPs say.

    .venv/bin/python bench/family_step.py [--steps 4] [--rounds 5] [--warmup 2] [--dtype float32]
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import jax
import numpy as np
import optax

from theseus.model.gpt import count_params
from theseus.train.parts import get_part
from theseus.train.step import init_state, make_train_step

VOCAB, BLOCK, BATCH = 8192, 256, 4
SHAPES = {
    "gpt": {"n_embd": 384, "n_layers": 6, "n_head": 6},
    "llama": {"n_embd": 384, "n_layers": 6, "n_head": 6, "n_kv_head": 2, "intermediate_size": 1200},
}


def architecture(family: str, dtype: str) -> dict[str, Any]:
    """The ``architecture`` section of ``family``'s part at the bench's shape."""
    return {**SHAPES[family], "vocab_size": VOCAB, "block_size": BLOCK,
            "dtype": {"param": "float32", "activation": dtype}}


def xla_cost(compiled) -> tuple[float, float]:
    """FLOPs and bytes accessed XLA counts in a compiled computation (0.0 where the backend does not say)."""
    cost = compiled.cost_analysis()
    if isinstance(cost, (list, tuple)):  # older JAX: one dict per computation
        cost = cost[0] if cost else {}
    cost = cost or {}
    return float(cost.get("flops", 0.0)), float(cost.get("bytes accessed", 0.0))


class Bench:
    """One model's jitted step, its state, and what it has measured."""

    def __init__(self, family: str, dtype: str, batch: dict[str, np.ndarray]):
        model_part = get_part("model", family)
        config = architecture(family, dtype)
        model = model_part.build(config)
        optimizer = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(3e-4, b1=0.9, b2=0.95, weight_decay=0.1))
        self.family = family
        self.state = jax.jit(lambda key: init_state(model, optimizer, key, BLOCK))(jax.random.PRNGKey(0))
        params = self.state["params"]
        self.n_params = count_params(params)
        self.flops = model_part.flops_per_token(config, params) * BATCH * BLOCK
        self.batch = jax.device_put(batch)
        self.key = jax.random.PRNGKey(1)
        jitted = jax.jit(make_train_step(model, optimizer), donate_argnums=0)
        self.step = jitted.lower(self.state, self.batch, self.key).compile()
        self.xla_flops, self.xla_bytes = xla_cost(self.step)
        self.wall: list[float] = []
        self.cpu: list[float] = []

    def run(self, steps: int, record: bool = True) -> None:
        """``steps`` steps; with ``record``, each step's wall time and the mean process CPU time per step."""
        cpu0 = time.process_time()
        for _ in range(steps):
            start = time.perf_counter()
            self.state, metrics = self.step(self.state, self.batch, self.key)
            jax.block_until_ready(metrics)
            if record:
                self.wall.append(time.perf_counter() - start)
        if record:
            self.cpu.append((time.process_time() - cpu0) / steps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=4, help="timed steps per model and round")
    parser.add_argument("--rounds", type=int, default=5, help="rounds, alternating the models")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps per model after compiling")
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"), help="activation dtype")
    args = parser.parse_args()
    for name in ("steps", "rounds"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be positive, got {getattr(args, name)}")

    rng = np.random.default_rng(0)
    tokens = rng.integers(0, VOCAB, (BATCH, BLOCK + 1), dtype=np.int32)
    batch = {"x": tokens[:, :-1], "y": tokens[:, 1:], "padding_mask": np.ones((BATCH, BLOCK), bool)}
    benches = [Bench(family, args.dtype, batch) for family in ("gpt", "llama")]
    for bench in benches:
        bench.run(args.warmup, record=False)
    for r in range(args.rounds):
        for bench in benches if r % 2 == 0 else benches[::-1]:
            bench.run(args.steps)

    gpt, llama = benches
    time_ratio = statistics.median(llama.wall) / statistics.median(gpt.wall)
    cpu_ratio = statistics.median(llama.cpu) / statistics.median(gpt.cpu)
    flops_ratio = llama.flops / gpt.flops
    xla_ratio = llama.xla_flops / gpt.xla_flops if gpt.xla_flops else float("nan")
    print(f"{jax.devices()[0].device_kind}; batch {BATCH} x {BLOCK}, vocab {VOCAB}, activations {args.dtype}; "
          f"{args.rounds} rounds x {args.steps} steps per model")
    print("| model | parameters | FLOPs/step (6N + 12LdT) | FLOPs/step (XLA) | median step | steps (min-max) "
          "| CPU time/step | bytes accessed/step (XLA) |")
    print("|---|---|---|---|---|---|---|---|")
    for b in benches:
        print(f"| {b.family} | {b.n_params:,} | {b.flops / 1e9:.2f} G | {b.xla_flops / 1e9:.2f} G | "
              f"{statistics.median(b.wall) * 1e3:,.0f} ms | {min(b.wall) * 1e3:,.0f}-{max(b.wall) * 1e3:,.0f} ms | "
              f"{statistics.median(b.cpu) * 1e3:,.0f} ms | {b.xla_bytes / 1e9:.2f} GB |")
    print(f"llama/gpt: time {time_ratio:.3f}x, CPU time {cpu_ratio:.3f}x, FLOPs {flops_ratio:.3f}x "
          f"(XLA {xla_ratio:.3f}x), bytes accessed {llama.xla_bytes / gpt.xla_bytes:.3f}x; "
          f"FLOPs-normalised: time {time_ratio / flops_ratio:.3f}, "
          f"CPU time {cpu_ratio / flops_ratio:.3f}, against XLA's FLOPs {time_ratio / xla_ratio:.3f}")


if __name__ == "__main__":
    main()
