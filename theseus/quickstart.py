"""The quickstart: the main job end to end on an embedded default, in one command.

It tokenizes the documentation that ships with Python (``pydoc_data``: no
network, no download), trains a small GPT on it on the CPU for a few hundred
steps, and prints where the run is, how to query it, and a short sample from the model it
trained with the ``theseus sample`` command that draws the same text::

    uv run python -m theseus.quickstart [ROOT] [--steps N]
"""

from __future__ import annotations

import argparse
import shlex
import tempfile

from theseus.quick import quick
from theseus.store import Node, Store

#: the quickstart's sample: its prompt and the options of ``job.generate`` / ``theseus sample`` that draw it
SAMPLE_PROMPT = "The"
SAMPLE_OPTIONS = {"max_new_tokens": 32, "temperature": 0.8, "top_k": 200, "seed": 0}


def configure(config, steps: int) -> None:
    """Shrink ``gpt/train/pretrain``'s config to a CPU-sized run of ``steps`` steps on the pydoc corpus.

    >>> from theseus.jobs import get_job
    >>> cfg = get_job("gpt/train/pretrain").defaults(); configure(cfg, 10)
    >>> cfg.training.tokens, cfg.data.dataset
    (5120, 'pydoc')
    """
    config.data.dataset = "pydoc"
    arch = config.architecture
    arch.n_embd, arch.n_layers, arch.n_head, arch.block_size = 64, 2, 4, 64
    arch.dtype.activation = "float32"
    config.training.batch_size = 8
    config.training.per_device_batch_size = 8
    config.training.tokens = steps * 8 * 64
    config.training.validation_steps = 4
    config.optimization.lr = 3e-3
    config.optimization.warmup_pct = 0.05
    config.optimization.decay_pct = 0.2
    config.logging.report_interval = 10
    config.logging.validation_interval = max(steps // 3, 1)
    config.logging.checkpoint_interval = max(steps // 3, 1)


def sample_command(root: str, nonce: str) -> str:
    """The ``theseus sample`` command that draws the quickstart's sample from the run's last checkpoint.

    >>> sample_command("/tmp/my root", "949e88")
    "theseus sample '/tmp/my root' 949e88 The --max-new-tokens 32 --temperature 0.8 --top-k 200 --seed 0"
    """
    options = " ".join(f"--{key.replace('_', '-')} {value}" for key, value in SAMPLE_OPTIONS.items())
    return f"theseus sample {shlex.quote(root)} {nonce} {shlex.quote(SAMPLE_PROMPT)} {options}"


def main(root: str | None = None, steps: int = 300, max_samples: int = -1) -> Node:
    """Tokenize the embedded corpus into ``root``, train a small GPT, print how to look at it and a sample.

    Returns the run's first node. (Takes minutes; the tests run it.)
    """
    root = root or tempfile.mkdtemp(prefix="theseus-")
    with quick(root) as q:
        q.build("data/tokenize/pydoc", "tokenize-pydoc")
        q.config.data.max_samples = max_samples
        q()
    with quick(root) as q:
        q.build("gpt/train/pretrain", "train-gpt")
        configure(q.config, steps)
        job = q.create()
        first = job.node
        job()
        [sample] = job.generate(SAMPLE_PROMPT, **SAMPLE_OPTIONS)  # the final parameters: the last checkpoint's
        job.close()
    store = Store(root)
    losses = [r["train/loss"] for r in store.find().nonce(first.nonce).has("train/loss").select(keys=["train/loss"])]
    print()
    print(f"run {first.name} nonce={first.nonce}: {len(losses)} reports, loss {losses[0]:.3f} -> {losses[-1]:.3f}")
    print(f"root: {store.root}")
    print("look at it:")
    print("  from theseus import quick")
    print(f"  with quick({store.root!r}) as q:")
    print(f"      print(q.find().nonce({first.nonce!r}).select(keys=['train/loss', 'train/tokens'])[-5:])")
    print("a sample from the model it trained:")
    print(f"  {sample.prompt + sample.text!r}")
    print("drawn again by:")
    print(f"  {sample_command(store.root, first.nonce)}")
    return first


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", nargs="?", default=None, help="root folder (default: a new temporary folder)")
    parser.add_argument("--steps", type=int, default=300, help="training steps (default 300)")
    args = parser.parse_args()
    main(args.root, args.steps)
