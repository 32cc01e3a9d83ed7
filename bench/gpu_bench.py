"""GPT-2 small on one GPU: tokens/s and MFU of the composed trainer, the bare jitted step and a PyTorch GPT;
then a Llama-shape model of about 1B parameters at sequence 2048 through the same bare step.

Model: GPT-2 small (n_embd 768, 12 layers, 12 heads, block 1024, vocab 50304, learned
positions, biases, tied unembedding, float32 parameters, bfloat16 activations), per-device
batch 16 x 1024, AdamW (lr 3e-4, betas 0.9/0.95, weight decay 0.1 on >= 2-D parameters)
after clipping the global gradient norm to 1.0. Three ways, on the same batches (the
deterministic loader's batches 0.. of one synthetic dataset of random tokens):

(a) theseus: ``gpt/train/pretrain`` through ``quick(root)``: the job's own loop, loader,
    reports and records; validation off, no checkpoint before the last step. tokens/s and
    MFU are the run's ``train/tokens_per_second`` and ``train/mfu`` records, read back with
    ``Store(root).find()``: the reports of the ``--steps`` steps after ``--warmup`` (one
    report every ``--report-interval`` steps). The run goes one report interval further and
    that interval is left out: its last step also writes the end-of-run checkpoint.
(b) bare: ``theseus.model.gpt.GPT`` and ``theseus.train.step.make_train_step`` with the same
    optax AdamW, jitted with the state donated, batches put on the device in a Python loop,
    timed with ``block_until_ready`` over ``--steps`` steps after ``--warmup``.
(c) PyTorch: the same GPT written here on the nanoGPT recipe (pre-LN blocks, fused qkv,
    ``F.scaled_dot_product_attention(is_causal=True)``, tanh-GELU MLP 4x, tied ``wte``),
    fused AdamW, bf16 autocast, ``torch.compile``; the parameter count must equal ours.

(d) Llama: the ``llama`` model part (what ``llama/train/pretrain`` trains) at Llama 3.2 1B's shape:
    hidden 2048, 16 layers, 32 heads, 8 key/value heads, SwiGLU 8192, vocabulary 128256, tied
    embeddings, RoPE theta 500000 with llama3 scaling (1,235,814,400 parameters); float32
    parameters, bfloat16 activations, ``attention=auto`` (cuDNN's fused attention on the GPU);
    batch ``--llama-per-device`` x 2048 of random tokens, timed like (b). Its MFU uses the
    part's own ``flops_per_token``; it has no PyTorch ratio.

MFU = tokens/s * theseus.train.mfu.flops_per_token(config, non-embedding params) / peak,
the peak being ``chip_peak(device, "bfloat16")`` (CPU: the peak the trainer measured,
recovered from its records). The table prints tokens/s, MFU and the ratio to PyTorch.
JAX gets ``XLA_PYTHON_CLIENT_MEM_FRACTION=0.5`` (unless set) so that PyTorch, running after
it in this process, has the other half of the device.

    python3 bench/gpu_bench.py [--steps 30] [--warmup 10] [--out gpu.md] [--out gpu.json]
    uv run python bench/gpu_bench.py --quick     # tiny model on CPU, a few steps; (c) only if torch imports
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from typing import Any

import jax
import numpy as np
import optax

from theseus.data.loader import Loader
from theseus.data.store import DatasetWriter, open_dataset
from theseus.model.config import GPTConfig
from theseus.model.gpt import GPT, count_params
from theseus.quick import quick
from theseus.store import Store
from theseus.train.mfu import chip_peak, flops_per_token
from theseus.train.parts import get_part
from theseus.train.step import init_state, make_train_step

JOB = "gpt/train/pretrain"
DATASET = "synthetic"
GPT2_TOKENS = 50257  # the real GPT-2 vocabulary; the model's 50304 rows pad it to a multiple of 64
TPS, MFU_KEY, TOKENS = "train/tokens_per_second", "train/mfu", "train/tokens"
LR, BETAS, WEIGHT_DECAY, CLIP = 3e-4, (0.9, 0.95), 0.1, 1.0
DATA_SEED = 0  # data.seed of (a) and the loader of (b) and (c): the same batches


@dataclasses.dataclass(frozen=True)
class Setup:
    """What all three ways share: the model shape, the batch and the step counts."""

    model: GPTConfig
    batch: int
    warmup: int
    steps: int
    report_interval: int
    train_tokens: int

    @property
    def tokens_per_step(self) -> int:
        """Tokens one step trains on: batch x block."""
        return self.batch * self.model.block_size


def gpt2_small() -> GPTConfig:
    """GPT-2 small (124M) as theseus spells it: learned positions, biases, fp32 params, bf16 activations."""
    return GPTConfig(n_embd=768, n_layers=12, n_head=12, block_size=1024, vocab_size=50304, rope=False, bias=True,
                     param_dtype="float32", activation_dtype="bfloat16")


def tiny() -> GPTConfig:
    """A model small enough for a CPU smoke test of the whole script."""
    return GPTConfig(n_embd=64, n_layers=2, n_head=2, block_size=64, vocab_size=512, rope=False, bias=True,
                     param_dtype="float32", activation_dtype="bfloat16")


def llama_1b() -> dict[str, Any]:
    """Llama 3.2 1B's shape as the ``llama`` part's ``architecture`` section (bf16 activations, fused attention)."""
    return {"n_embd": 2048, "n_layers": 16, "n_head": 32, "n_kv_head": 8, "intermediate_size": 8192,
            "vocab_size": 128256, "block_size": 2048, "tie_embeddings": True, "rope_theta": 500000.0,
            "rope_scaling": "llama3", "rope_factor": 32.0, "norm_eps": 1e-5, "attention": "auto",
            "dtype": {"param": "float32", "activation": "bfloat16"}}


def tiny_llama() -> dict[str, Any]:
    """A Llama-family model small enough for a CPU smoke test of (d)."""
    return {"n_embd": 64, "n_layers": 2, "n_head": 4, "n_kv_head": 2, "intermediate_size": 128, "vocab_size": 512,
            "block_size": 64, "attention": "auto", "dtype": {"param": "float32", "activation": "bfloat16"}}


def write_dataset(root: str, setup: Setup) -> None:
    """Random tokens (below the real vocabulary, as a tokenizer would give) as a contiguous dataset."""
    rng = np.random.default_rng(0)
    high = min(GPT2_TOKENS, setup.model.vocab_size)
    with DatasetWriter(root, DATASET, "contiguous", source="gpu_bench: uniform random tokens") as w:
        w.append("train", rng.integers(0, high, setup.train_tokens, dtype=np.uint32))
        w.append("val", rng.integers(0, high, 4 * setup.model.block_size + 1, dtype=np.uint32))


def host_batches(root: str, setup: Setup, count: int) -> list[dict[str, np.ndarray]]:
    """Batches 0..count-1 of the loader the trainer builds (same dataset, seed, batch and block)."""
    loader = Loader(open_dataset(root, DATASET), "train", seed=DATA_SEED, batch_size=setup.batch,
                    block_size=setup.model.block_size)
    return [loader.batch(k) for k in range(count)]


def harmonic_mean(rates: list[float]) -> float:
    """The rate over intervals of equal work: total work / total time."""
    return len(rates) / sum(1.0 / r for r in rates)


# ---------------------------------------------------------------------------------------------- (a)


def run_composed(root: str, setup: Setup) -> dict[str, Any]:
    """(a): the ``gpt/train/pretrain`` job through quick(), measured from its own records."""
    total = setup.warmup + setup.steps + setup.report_interval  # the last interval also saves a checkpoint
    start = time.perf_counter()
    with quick(root) as q:
        q.build(JOB, "gpu-bench")
        config = q.config
        for key, value in setup.model.to_mapping().items():
            if isinstance(value, dict):  # dtype, instrumentation: structured sections take their fields one by one
                for sub, subvalue in value.items():
                    config.architecture[key][sub] = subvalue
            else:
                config.architecture[key] = value
        config.data.dataset = DATASET
        config.data.seed = DATA_SEED
        config.training.batch_size = setup.batch
        config.training.per_device_batch_size = setup.batch
        config.training.tokens = total * setup.tokens_per_step
        config.training.validation = False
        config.logging.report_interval = setup.report_interval
        config.logging.checkpoint_interval = 10**9  # only the end-of-run save, outside the timed reports
        config.logging.validation_interval = 10**9
        job = q.create()
        try:
            job()
        finally:
            job.close()
        nonce = job.node.nonce
    wall = time.perf_counter() - start

    rows = Store(root).find().nonce(nonce).has(TPS).select(keys=[TOKENS, TPS, MFU_KEY])
    reports = sorted((int(r[TOKENS]) // setup.tokens_per_step, r[TPS], r[MFU_KEY]) for r in rows)
    timed = [(step, tps, m) for step, tps, m in reports if setup.warmup < step <= setup.warmup + setup.steps]
    expected = setup.steps // setup.report_interval
    if len(timed) != expected:
        raise RuntimeError(f"expected {expected} reports between steps {setup.warmup} and "
                           f"{setup.warmup + setup.steps}, found steps {[s for s, _, _ in reports]}")
    tps = harmonic_mean([t for _, t, _ in timed])
    mfu_values = [m for _, _, m in timed]
    return {
        "tokens_per_second": tps,
        "reported_mfu": harmonic_mean(mfu_values) if all(m == m and m > 0 for m in mfu_values) else float("nan"),
        "reports": [{"step": s, TPS: t, MFU_KEY: m} for s, t, m in timed],
        "step_ms": setup.tokens_per_step / tps * 1e3,
        "wall_s": wall,
        "nonce": nonce,
    }


# ---------------------------------------------------------------------------------------------- (b)


def adamw() -> optax.GradientTransformation:
    """Clip to global norm 1, then AdamW with weight decay on >= 2-D parameters (as the trainer's optimizer)."""
    def decay(params):
        return jax.tree.map(lambda p: p.ndim >= 2, params)

    return optax.chain(optax.clip_by_global_norm(CLIP),
                       optax.adamw(LR, b1=BETAS[0], b2=BETAS[1], weight_decay=WEIGHT_DECAY, mask=decay))


def timed_steps(step, state, batches: list[dict[str, np.ndarray]], warmup: int, steps: int) -> tuple[float, float]:
    """Seconds of ``steps`` steps after ``warmup`` untimed ones, each batch put on the device in the loop, and the
    last loss; ``state`` is donated to ``step`` and dropped afterwards."""
    key = jax.random.PRNGKey(1)
    metrics = None
    for k in range(warmup):
        state, metrics = step(state, jax.device_put(batches[k]), key)
    jax.block_until_ready((state, metrics))
    t0 = time.perf_counter()
    for k in range(warmup, warmup + steps):
        state, metrics = step(state, jax.device_put(batches[k]), key)
    jax.block_until_ready((state, metrics))
    seconds = time.perf_counter() - t0
    loss = float(metrics["loss"])
    del state, metrics
    gc.collect()
    return seconds, loss


def run_bare(setup: Setup, batches: list[dict[str, np.ndarray]]) -> dict[str, Any]:
    """(b): the jitted train step in a Python loop, state donated."""
    start = time.perf_counter()
    model, optimizer = GPT(setup.model), adamw()
    state = jax.jit(lambda key: init_state(model, optimizer, key, setup.model.block_size))(jax.random.PRNGKey(0))
    step = jax.jit(make_train_step(model, optimizer), donate_argnums=0)
    seconds, loss = timed_steps(step, state, batches, setup.warmup, setup.steps)
    return {
        "tokens_per_second": setup.steps * setup.tokens_per_step / seconds,
        "step_ms": seconds / setup.steps * 1e3,
        "wall_s": time.perf_counter() - start,
        "last_loss": loss,
    }


# ---------------------------------------------------------------------------------------------- (d)


def run_llama(architecture: dict[str, Any], batch: int, warmup: int, steps: int) -> dict[str, Any]:
    """(d): the ``llama`` part's module through the jitted train step in a Python loop, state donated, on random
    tokens (fresh ones each step, put on the device in the loop as (b) does)."""
    start = time.perf_counter()
    model_part = get_part("model", "llama")
    model_part.check(architecture)
    model, optimizer = model_part.build(architecture), adamw()
    block, vocab = architecture["block_size"], architecture["vocab_size"]
    state = jax.jit(lambda key: init_state(model, optimizer, key, block))(jax.random.PRNGKey(0))
    fpt = model_part.flops_per_token(architecture, state["params"])
    n_params = count_params(state["params"])
    step = jax.jit(make_train_step(model, optimizer), donate_argnums=0)
    rng = np.random.default_rng(DATA_SEED)
    tokens = [rng.integers(0, vocab, (batch, block + 1), dtype=np.int32) for _ in range(warmup + steps)]
    batches = [{"x": t[:, :-1], "y": t[:, 1:], "padding_mask": np.ones((batch, block), bool)} for t in tokens]
    seconds, loss = timed_steps(step, state, batches, warmup, steps)
    return {
        "tokens_per_second": steps * batch * block / seconds,
        "step_ms": seconds / steps * 1e3,
        "wall_s": time.perf_counter() - start,
        "last_loss": loss,
        "flops_per_token": fpt,
        "n_params": n_params,
        "batch": f"{batch} x {block}",
    }


# ---------------------------------------------------------------------------------------------- (c)


def torch_gpt(cfg: GPTConfig):
    """The nanoGPT recipe in PyTorch with ``cfg``'s shape; ``model(idx, targets)`` returns the mean loss."""
    # imported here: torch is optional (absent from theseus's environment, present on the GPU image)
    import torch
    from torch import nn
    from torch.nn import functional as F

    if cfg.rope or not cfg.bias:
        raise ValueError("the PyTorch GPT has learned positions and biases: use rope=False, bias=True")
    C, H, eps = cfg.n_embd, cfg.n_head, cfg.layer_norm_eps

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1, self.ln_2 = nn.LayerNorm(C, eps=eps), nn.LayerNorm(C, eps=eps)
            self.c_attn, self.attn_proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
            self.c_fc, self.mlp_proj = nn.Linear(C, cfg.mlp_dim), nn.Linear(cfg.mlp_dim, C)

        def forward(self, x):
            B, T, _ = x.shape
            q, k, v = (t.view(B, T, H, C // H).transpose(1, 2) for t in self.c_attn(self.ln_1(x)).split(C, dim=2))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.attn_proj(y.transpose(1, 2).reshape(B, T, C))
            return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))  # jax.nn.gelu is tanh

    class TorchGPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(cfg.vocab_size, C), nn.Embedding(cfg.block_size, C)
            self.blocks = nn.ModuleList(Block() for _ in range(cfg.n_layers))
            self.ln_f = nn.LayerNorm(C, eps=eps)
            for name, p in self.named_parameters():  # theseus's init: normal(0.02), residual projections scaled
                if p.dim() >= 2:
                    std = 0.02 / (2 * cfg.n_layers) ** 0.5 if name.endswith("proj.weight") else 0.02
                    nn.init.normal_(p, std=std)
                elif name.endswith("bias") and "ln" not in name:
                    nn.init.zeros_(p)

        def forward(self, idx, targets):
            x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
            for block in self.blocks:
                x = block(x)
            logits = F.linear(self.ln_f(x), self.wte.weight)  # tied unembedding
            return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.reshape(-1))

    return TorchGPT()


def run_torch(setup: Setup, batches: list[dict[str, np.ndarray]], theseus_params: int,
              compile_model: bool) -> dict[str, Any]:
    """(c): the PyTorch GPT, fused AdamW (on CUDA), bf16 autocast, torch.compile, same batches.

    Refuses to time a model whose parameter count differs from theseus's.
    """
    import torch  # optional, see torch_gpt

    start = time.perf_counter()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.set_float32_matmul_precision("high")  # TF32 for any float32 matmul left outside autocast, as JAX's default
    torch.manual_seed(0)
    model = torch_gpt(setup.model).to(device)
    n_params = sum(p.numel() for p in model.parameters())  # parameters() yields the tied wte once
    print(f"parameters: theseus {theseus_params:,}, PyTorch {n_params:,}", flush=True)
    if n_params != theseus_params:
        raise ValueError(f"the PyTorch GPT has {n_params:,} parameters, theseus's {theseus_params:,}: "
                         "not the same model")
    groups = [{"params": [p for p in model.parameters() if p.dim() >= 2], "weight_decay": WEIGHT_DECAY},
              {"params": [p for p in model.parameters() if p.dim() < 2], "weight_decay": 0.0}]
    optimizer = torch.optim.AdamW(groups, lr=LR, betas=BETAS, fused=device.type == "cuda")
    forward = torch.compile(model) if compile_model else model
    data = [{k: torch.from_numpy(b[k].astype(np.int64)).pin_memory() if device.type == "cuda"
             else torch.from_numpy(b[k].astype(np.int64)) for k in ("x", "y")} for b in batches]

    def step(batch):
        x = batch["x"].to(device, non_blocking=True)
        y = batch["y"].to(device, non_blocking=True)
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16):
            loss = forward(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()

    for k in range(setup.warmup):
        loss = step(data[k])
    sync()
    t0 = time.perf_counter()
    for k in range(setup.warmup, setup.warmup + setup.steps):
        loss = step(data[k])
    sync()
    seconds = time.perf_counter() - t0
    peak_memory = torch.cuda.max_memory_allocated() if device.type == "cuda" else None
    return {
        "tokens_per_second": setup.steps * setup.tokens_per_step / seconds,
        "step_ms": seconds / setup.steps * 1e3,
        "wall_s": time.perf_counter() - start,
        "n_params": n_params,
        "last_loss": float(loss),
        "compiled": compile_model,
        "peak_memory_gib": None if peak_memory is None else peak_memory / 2**30,
        "torch": torch.__version__,
    }


def torch_available() -> bool:
    """Whether torch imports."""
    try:
        import torch  # noqa: F401  (probing only)
    except ImportError:
        return False
    return True


# ---------------------------------------------------------------------------------------------- report


def table(results: dict[str, dict[str, Any]], setup: Setup, peak: float, fpt: float) -> list[dict[str, Any]]:
    """One row per way: tokens/s, MFU (same peak; GPT-2's FLOPs per token, (d) its own) and the ratio to PyTorch
    (GPT-2 rows only)."""
    labels = {"composed": "(a) theseus gpt/train/pretrain via quick()", "bare": "(b) bare jitted make_train_step",
              "torch": "(c) PyTorch nanoGPT recipe, torch.compile",
              "llama": "(d) llama part (Llama 3.2 1B shape), bare jitted make_train_step"}
    torch_tps = results.get("torch", {}).get("tokens_per_second")
    rows = []
    for name, label in labels.items():
        r = results.get(name, {})
        tps = r.get("tokens_per_second")
        rows.append({
            "way": label,
            "tokens_per_second": tps,
            "mfu": None if tps is None else tps * r.get("flops_per_token", fpt) / peak,
            "ratio_to_torch": None if tps is None or not torch_tps or name == "llama" else tps / torch_tps,
            "step_ms": r.get("step_ms"),
            "wall_s": r.get("wall_s"),
            "note": r.get("error") or r.get("skipped") or "",
        })
    return rows


def flops_text(flops_per_second: float) -> str:
    """FLOP/s in TFLOP/s, or GFLOP/s below one TFLOP/s (a CPU)."""
    if flops_per_second >= 1e12:
        return f"{flops_per_second / 1e12:,.1f} TFLOP/s"
    return f"{flops_per_second / 1e9:,.1f} GFLOP/s"


def markdown(rows: list[dict[str, Any]], info: dict[str, Any]) -> str:
    """The table and the run's facts as markdown."""
    def fmt(value, spec, unit=""):
        return "-" if value is None else format(value, spec) + unit

    lines = [f"{info['title']}", "",
             "| way | tokens/s | MFU | ratio to PyTorch | step | wall (compile included) | note |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['way']} | {fmt(r['tokens_per_second'], ',.0f')} | {fmt(r['mfu'], '.1%')} | "
                     f"{fmt(r['ratio_to_torch'], '.3f', 'x')} | {fmt(r['step_ms'], '.1f', ' ms')} | "
                     f"{fmt(r['wall_s'], '.0f', ' s')} | {r['note']} |")
    lines.append("")
    lines.extend(f"- {key}: {value}" for key, value in info["facts"].items())
    return "\n".join(lines) + "\n"


def write_outputs(paths: list[str], rows: list[dict[str, Any]], info: dict[str, Any],
                  results: dict[str, Any]) -> None:
    """Markdown to each ``.md`` path, everything as JSON to each ``.json`` path."""
    for path in paths:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with open(path, "w") as f:
            if path.endswith(".md"):
                f.write(markdown(rows, info))
            else:
                json.dump({"rows": rows, "facts": info["facts"], "results": results}, f, indent=2, default=str)
        print(f"wrote {path}")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options; a step count the report interval does not divide is an error."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="tiny model, a few steps: a CPU smoke test")
    parser.add_argument("--steps", type=int, default=None, help="timed steps per way (default 30; --quick 4)")
    parser.add_argument("--warmup", type=int, default=None, help="untimed steps first (default 10; --quick 2)")
    parser.add_argument("--report-interval", type=int, default=None, help="(a)'s logging.report_interval "
                        "(default 10; --quick 2); it must divide --steps and --warmup")
    parser.add_argument("--per-device", type=int, default=None, help="batch rows (default 16; --quick 4)")
    parser.add_argument("--no-torch", action="store_true", help="skip (c)")
    parser.add_argument("--no-llama", action="store_true", help="skip (d)")
    parser.add_argument("--llama-per-device", type=int, default=None, help="(d)'s batch rows of 2048 tokens "
                        "(default 4; --quick 2)")
    parser.add_argument("--out", action="append", default=[], help="write the results here: .md (the table) "
                        "or .json (everything); may be given more than once")
    args = parser.parse_args(argv)
    quick_defaults, gpu_defaults = (4, 2, 2, 4, 2), (30, 10, 10, 16, 4)
    for name, value in zip(("steps", "warmup", "report_interval", "per_device", "llama_per_device"),
                           quick_defaults if args.quick else gpu_defaults, strict=True):
        if getattr(args, name) is None:
            setattr(args, name, value)
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be positive, got {getattr(args, name)}")
    for name in ("steps", "warmup"):
        if getattr(args, name) % args.report_interval:
            parser.error(f"--{name} {getattr(args, name)} is not a multiple of --report-interval "
                         f"{args.report_interval}: (a) is timed from whole report intervals")
    for path in args.out:
        if not path.endswith((".md", ".json")):
            parser.error(f"--out {path!r}: use a .md or .json file name")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if not ("XLA_PYTHON_CLIENT_MEM_FRACTION" in os.environ or "XLA_CLIENT_MEM_FRACTION" in os.environ):
        # read when JAX creates its GPU client (first use below): half the device stays free for PyTorch
        os.environ["XLA_PYTHON_CLIENT_MEM_FRACTION"] = "0.5"
    cfg = tiny() if args.quick else gpt2_small()
    llama_cfg = tiny_llama() if args.quick else llama_1b()
    setup = Setup(model=cfg, batch=args.per_device, warmup=args.warmup, steps=args.steps,
                  report_interval=args.report_interval,
                  train_tokens=max(1 << 22, 4 * (args.warmup + args.steps) * args.per_device * cfg.block_size))
    if jax.device_count() != 1:
        sys.exit(f"this bench measures one device and JAX sees {jax.device_count()}: "
                 "make one visible (CUDA_VISIBLE_DEVICES=0)")
    device = jax.devices()[0]
    abstract = jax.eval_shape(lambda: GPT(cfg).init(jax.random.PRNGKey(0), np.zeros((1, 8), np.int32)))["params"]
    n_params, non_embedding = count_params(abstract), count_params(abstract, non_embedding=True)
    fpt = flops_per_token(cfg, non_embedding)
    run_torch_part = not args.no_torch
    if run_torch_part and not torch_available():
        if not args.quick:
            sys.exit("torch does not import: install it or pass --no-torch")
        run_torch_part = False

    root = tempfile.mkdtemp(prefix="theseus-gpu-bench-")
    results: dict[str, dict[str, Any]] = {}
    try:
        write_dataset(root, setup)
        batches = host_batches(root, setup, setup.warmup + setup.steps)
        print(f"device: {device.device_kind} ({device.platform}); batch {setup.batch} x {cfg.block_size}, "
              f"{setup.warmup} warm-up + {setup.steps} timed steps per way", flush=True)
        ways = (("composed", lambda: run_composed(root, setup)),
                ("bare", lambda: run_bare(setup, batches)),
                ("llama", lambda: run_llama(llama_cfg, args.llama_per_device, args.warmup, args.steps)),
                ("torch", lambda: run_torch(setup, batches, n_params, compile_model=device.platform != "cpu")))
        for name, run in ways:
            if name == "torch" and not run_torch_part:
                results[name] = {"skipped": "torch not installed" if not args.no_torch else "--no-torch"}
                continue
            if name == "llama" and args.no_llama:
                results[name] = {"skipped": "--no-llama"}
                continue
            print(f"--- {name}", flush=True)
            try:
                results[name] = run()
            except Exception as error:  # a failed way is reported in the table; the others still run
                results[name] = {"error": f"{type(error).__name__}: {error}"}
                print(f"{name} failed: {results[name]['error']}", flush=True)
            print(json.dumps({k: v for k, v in results[name].items() if k != "reports"}, default=str), flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)

    composed = results["composed"]
    reported = composed.get("reported_mfu")
    implied = composed["tokens_per_second"] * fpt / reported if reported and reported == reported else None
    peak, peak_source = chip_peak(device, cfg.activation_dtype), "theseus.train.mfu.chip_peak"
    if peak is None:
        if implied is None:
            sys.exit(f"no peak FLOP/s for {device.device_kind!r} and (a) recorded no train/mfu to recover it from")
        peak, peak_source = implied, "the trainer's measured CPU peak, recovered from train/mfu"
    torch_params = results["torch"].get("n_params")

    rows = table(results, setup, peak, fpt)
    facts = {
        "device": f"{device.device_kind} ({device.platform}), {jax.device_count()} device(s)",
        "model": (f"n_embd {cfg.n_embd}, {cfg.n_layers} layers, {cfg.n_head} heads, block {cfg.block_size}, "
                  f"vocab {cfg.vocab_size}, rope {cfg.rope}, params {cfg.param_dtype}, "
                  f"activations {cfg.activation_dtype}"),
        "parameters": f"theseus {n_params:,}; PyTorch {'-' if torch_params is None else f'{torch_params:,}'}",
        "(d) Llama": ("-" if "n_params" not in results["llama"] else
                      f"{results['llama']['n_params']:,} parameters, batch {results['llama']['batch']}, "
                      f"{results['llama']['flops_per_token']:,.0f} FLOPs per token (the llama part's)"),
        "batch": f"{setup.batch} x {cfg.block_size} = {setup.tokens_per_step:,} tokens per step",
        "steps": f"{setup.warmup} warm-up + {setup.steps} timed per way; (a) reports every {setup.report_interval}",
        "flops_per_token": f"{fpt:,.0f} (6N + 12 L d T, N = {non_embedding:,} non-embedding parameters)",
        "peak": f"{flops_text(peak)} bf16 ({peak_source})",
        "(a) train/mfu as recorded": ("-" if implied is None else
                                      f"{reported:.1%} (the peak it implies: {flops_text(implied)})"),
        "versions": (f"python {platform.python_version()}, jax {jax.__version__}, "
                     f"torch {results['torch'].get('torch', '-')}"),
        "date": time.strftime("%Y-%m-%d"),
    }
    info = {"title": f"GPT-2 small and Llama-shape 1B training throughput on {device.device_kind}" if not args.quick
            else "gpu_bench --quick (tiny model, smoke test)", "facts": facts}
    print()
    print(markdown(rows, info))
    write_outputs(args.out, rows, info, results)
    failed = [name for name, r in results.items() if "error" in r]
    if failed:
        sys.exit(f"failed: {', '.join(failed)}")


if __name__ == "__main__":
    main()
