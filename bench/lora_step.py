"""A LoRA step against a full fine-tuning step of a Llama-family model (CPU): time, memory, checkpoint size.

The model is the ``llama`` model part at the quickstart's scale (n_embd 64, 2 layers, 4 heads with 2
key/value heads, SwiGLU 172, block 64, batch 8, the part's default vocabulary), or with
``--shape family`` at `bench/family_step.py`'s (n_embd 384, 6 layers, SwiGLU 1200, vocabulary 8192,
block 256, batch 4). Both steps are forward, backward, clip to norm 1.0 and AdamW, jitted with the state
donated:

- full: the gradient and AdamW moments of every parameter (``theseus.train.step.make_train_step``);
- LoRA: rank ``--rank`` adapters on every attention and MLP projection (`theseus.model.lora`), the base
  parameters a frozen argument of the step (not donated, no gradient, no moments).

Memory is XLA's own account of the compiled step (``memory_analysis()``): the arguments it reads
(state, batch, and for LoRA the frozen base) and the temporaries it allocates; their sum is the step's
peak beside what the arguments already hold. XLA's ``cost_analysis()`` gives each step's FLOPs and bytes
accessed (a CPU step this small is partly bound by the latter). Checkpoint size: the bytes on disk of
`theseus.train.checkpoint.save` of the trained tree and its optimizer state (the full run's params and
moments; the LoRA run's adapters and their moments), and of the params alone against the adapters
alone. After ``--warmup`` steps each, ``--rounds`` rounds of ``--steps`` steps alternate the two (order
swapped every round); the median step time and the process CPU time per step of each are kept.

    .venv/bin/python bench/lora_step.py [--shape quickstart|family] [--rank 8] [--steps 4] [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from theseus.model import lora
from theseus.model.gpt import count_params, cross_entropy
from theseus.train import checkpoint
from theseus.train.parts import get_part
from theseus.train.step import global_norm, init_state, make_train_step

SHAPES = {
    "quickstart": ({"n_embd": 64, "n_layers": 2, "n_head": 4, "n_kv_head": 2, "intermediate_size": 172,
                    "block_size": 64}, 8),
    "family": ({"n_embd": 384, "n_layers": 6, "n_head": 6, "n_kv_head": 2, "intermediate_size": 1200,
                "vocab_size": 8192, "block_size": 256}, 4),
}


def optimizer() -> optax.GradientTransformation:
    """Clip to norm 1.0, then AdamW, as the recipes chain them."""
    return optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(3e-4, b1=0.9, b2=0.95, weight_decay=0.1))


def lora_train_step(model: Any, spec: lora.LoraSpec, opt: optax.GradientTransformation):
    """``(state, frozen, batch) -> (state, metrics)``: the masked mean cross-entropy's gradient w.r.t. the adapters
    in ``state["params"]`` only, the base ``frozen``."""

    def loss_fn(adapters, frozen, batch):
        logits = lora.apply(model, frozen, adapters, spec, batch["x"])
        mask = batch["padding_mask"].astype(jnp.float32)
        return jnp.sum(cross_entropy(logits, batch["y"]) * mask) / jnp.maximum(jnp.sum(mask), 1.0)

    def step(state, frozen, batch):
        loss, grads = jax.value_and_grad(loss_fn)(state["params"], frozen, batch)
        updates, opt_state = opt.update(grads, state["opt_state"], state["params"])
        new = {"params": optax.apply_updates(state["params"], updates), "opt_state": opt_state,
               "step": state["step"] + 1}
        return new, {"loss": loss, "grad_norm": global_norm(grads)}

    return step


def memory(compiled) -> dict[str, float]:
    """The argument and temporary bytes XLA accounts for in a compiled step, and its FLOPs and bytes accessed
    (``cost_analysis()``; 0 where the backend does not say)."""
    analysis = compiled.memory_analysis()
    cost = compiled.cost_analysis()
    cost = (cost[0] if cost else {}) if isinstance(cost, (list, tuple)) else (cost or {})
    return {"arguments": int(analysis.argument_size_in_bytes), "temporaries": int(analysis.temp_size_in_bytes),
            "flops": float(cost.get("flops", 0.0)), "accessed": float(cost.get("bytes accessed", 0.0))}


def saved_bytes(tree: Any) -> int:
    """Bytes on disk of ``tree`` saved as a checkpoint (every file of the folder)."""
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "ckpt")
        checkpoint.save(path, tree)
        return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)


class Timed:
    """A compiled step, its arguments, and its wall times."""

    def __init__(self, name: str, compiled, state: Any, rest: tuple):
        self.name, self.compiled, self.state, self.rest = name, compiled, state, rest
        self.memory = memory(compiled)
        self.wall: list[float] = []
        self.cpu: list[float] = []

    def run(self, steps: int, record: bool = True) -> None:
        """``steps`` steps; with ``record``, each one's wall time and their mean process CPU time."""
        cpu = time.process_time()
        for _ in range(steps):
            start = time.perf_counter()
            self.state, metrics = self.compiled(self.state, *self.rest)
            jax.block_until_ready(metrics)
            if record:
                self.wall.append(time.perf_counter() - start)
        if record:
            self.cpu.append((time.process_time() - cpu) / steps)


def build(shape: str, rank: int) -> tuple[Timed, Timed, dict[str, int]]:
    """The full and LoRA steps of ``shape``'s model, compiled, and the parameter counts."""
    arch, batch_rows = SHAPES[shape]
    config = {**arch, "dtype": {"param": "float32", "activation": "float32"}}
    model = get_part("model", "llama").build(config)
    block = arch["block_size"]
    vocab = model.config.vocab_size
    tokens = np.random.default_rng(0).integers(0, vocab, (batch_rows, block + 1), dtype=np.int32)
    batch = jax.device_put({"x": tokens[:, :-1], "y": tokens[:, 1:],
                            "padding_mask": np.ones((batch_rows, block), bool)})
    opt = optimizer()
    full_state = jax.jit(lambda k: init_state(model, opt, k, block))(jax.random.PRNGKey(0))
    frozen = jax.tree.map(jnp.copy, full_state["params"])
    full = jax.jit(make_train_step(model, opt), donate_argnums=0).lower(full_state, batch,
                                                                         jax.random.PRNGKey(1)).compile()
    spec = lora.LoraSpec(rank=rank, alpha=2.0 * rank)
    adapters = lora.init_adapters(spec, lora.projections(model, spec, block), jax.random.PRNGKey(2))
    lora_state = {"params": adapters, "opt_state": opt.init(adapters), "step": jnp.zeros((), jnp.int32)}
    adapted = jax.jit(lora_train_step(model, spec, opt), donate_argnums=0).lower(lora_state, frozen, batch).compile()
    sizes = {"params": count_params(frozen), "adapters": count_params(adapters),
             "full checkpoint": saved_bytes({"params": full_state["params"], "opt_state": full_state["opt_state"]}),
             "lora checkpoint": saved_bytes({"params": adapters, "opt_state": lora_state["opt_state"]}),
             "params only": saved_bytes({"params": frozen}), "adapters only": saved_bytes({"params": adapters})}
    return (Timed("full", full, full_state, (batch, jax.random.PRNGKey(1))),
            Timed("lora", adapted, lora_state, (frozen, batch)), sizes)


def mib(n: int) -> str:
    return f"{n / 2**20:,.2f} MiB"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", default="quickstart", choices=sorted(SHAPES), help="the model's size")
    parser.add_argument("--rank", type=int, default=8, help="LoRA rank (alpha is twice it)")
    parser.add_argument("--steps", type=int, default=4, help="timed steps per step kind and round")
    parser.add_argument("--rounds", type=int, default=5, help="rounds, alternating full and LoRA")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps each after compiling")
    args = parser.parse_args()
    for name in ("rank", "steps", "rounds"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be positive, got {getattr(args, name)}")
    full, adapted, sizes = build(args.shape, args.rank)
    for timed in (full, adapted):
        timed.run(args.warmup, record=False)
    for r in range(args.rounds):
        for timed in (full, adapted) if r % 2 == 0 else (adapted, full):
            timed.run(args.steps)
    print(f"{jax.devices()[0].device_kind}; llama part, shape {args.shape}, rank {args.rank}; {args.rounds} rounds "
          f"x {args.steps} steps each")
    print(f"parameters {sizes['params']:,}; adapters {sizes['adapters']:,} "
          f"({sizes['adapters'] / sizes['params']:.3%})")
    print("| step | median step | min-max | CPU time/step | arguments | temporaries | arguments + temporaries |")
    print("|---|---|---|---|---|---|---|")
    for t in (full, adapted):
        m = t.memory
        print(f"| {t.name} | {statistics.median(t.wall) * 1e3:,.1f} ms | {min(t.wall) * 1e3:,.1f}-"
              f"{max(t.wall) * 1e3:,.1f} ms | {statistics.median(t.cpu) * 1e3:,.1f} ms | {mib(m['arguments'])} | "
              f"{mib(m['temporaries'])} | {mib(m['arguments'] + m['temporaries'])} |")
    peak = {t.name: t.memory["arguments"] + t.memory["temporaries"] for t in (full, adapted)}
    print(f"XLA cost_analysis: full {full.memory['flops'] / 1e9:.2f} GFLOP, {full.memory['accessed'] / 1e9:.2f} GB "
          f"accessed; LoRA {adapted.memory['flops'] / 1e9:.2f} GFLOP, {adapted.memory['accessed'] / 1e9:.2f} GB")
    print(f"lora/full: time {statistics.median(adapted.wall) / statistics.median(full.wall):.3f}x, CPU time "
          f"{statistics.median(adapted.cpu) / statistics.median(full.cpu):.3f}x, memory "
          f"{peak['lora'] / peak['full']:.3f}x, temporaries "
          f"{adapted.memory['temporaries'] / full.memory['temporaries']:.3f}x")
    print(f"checkpoint with optimizer state: full {mib(sizes['full checkpoint'])}, LoRA {mib(sizes['lora checkpoint'])}"
          f" ({sizes['lora checkpoint'] / sizes['full checkpoint']:.4f}x); params alone {mib(sizes['params only'])},"
          f" adapters alone {mib(sizes['adapters only'])} ({sizes['adapters only'] / sizes['params only']:.4f}x)")


if __name__ == "__main__":
    main()
