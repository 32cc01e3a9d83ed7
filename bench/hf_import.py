"""Importing and exporting a Hugging Face folder against transformers, measured in one run.

A model with Qwen2.5-0.5B's shapes (hidden 896, 24 layers, 14 heads, 2 kv heads, intermediate 4864, vocab
151936, tied embeddings) gets random bf16 weights written as one ``model.safetensors`` (~1 GB), its
``config.json`` by transformers' ``Qwen2Config.save_pretrained`` and a small tokenizer trained offline. Then,
each in its own subprocess (``--repeats`` times, interleaved, medians reported):

1. import: ``theseus.hf.importer.import_hf(folder, root)`` (bf16 as stored) against
   ``AutoModelForCausalLM.from_pretrained(folder, dtype=torch.bfloat16)``;
2. export: ``theseus.hf.exporter.export_hf(root, nonce, out, "bf16")`` against ``model.save_pretrained(out)``
   (the model loaded untimed first).

Neither transformers call leaves anything durable: ``from_pretrained`` writes nothing, and ``save_pretrained``
returns with its file in the page cache. An import returns with a synced, hashed copy of the weights in the root
and an export with a synced folder, so each is also measured against the transformers calls that leave the same
bytes on the disk: ``from_pretrained`` then ``save_pretrained`` and an fsync of the folder's files, and
``save_pretrained`` then that fsync.

Time is the operation's, after the process's imports (torch, JAX and TensorStore), and CPU its CPU seconds (every
thread's, user and system); wall is the whole subprocess. Peak RSS is the subprocess's maximum resident set
(``/usr/bin/time``). Goals: import <= 1x transformers' time with peak RSS <=
1.5x the file size; export <= 1x save_pretrained.

    uv run --group hf python bench/hf_import.py [--repeats 3] [--layers 24] [--readme]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

SHAPES = dict(hidden_size=896, num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
              intermediate_size=4864, vocab_size=151936, tie_word_embeddings=True, max_position_embeddings=32768)

# each child prints one JSON line: its operation's seconds and its peak RSS
CHILD = {
    "theseus import": """
import jax, tensorstore
from theseus.hf.importer import import_hf
t0, c0 = time.perf_counter(), cpu()
node = import_hf(FOLDER, WORK + "/root", name="bench")
seconds, cpu_seconds = time.perf_counter() - t0, cpu() - c0
open(WORK + "/nonce", "w").write(node.nonce)
""",
    "transformers from_pretrained": """
import torch, transformers
t0, c0 = time.perf_counter(), cpu()
model = transformers.AutoModelForCausalLM.from_pretrained(FOLDER, dtype=torch.bfloat16)
seconds, cpu_seconds = time.perf_counter() - t0, cpu() - c0
""",
    "theseus export": """
import jax, tensorstore
from theseus.hf.exporter import export_hf
nonce = open(WORK + "/nonce").read()
t0, c0 = time.perf_counter(), cpu()
export_hf(WORK + "/root", nonce, WORK + "/out", "bf16")
seconds, cpu_seconds = time.perf_counter() - t0, cpu() - c0
""",
    "transformers save_pretrained": """
import torch, transformers
model = transformers.AutoModelForCausalLM.from_pretrained(FOLDER, dtype=torch.bfloat16)
t0, c0 = time.perf_counter(), cpu()
model.save_pretrained(WORK + "/out")
seconds, cpu_seconds = time.perf_counter() - t0, cpu() - c0
""",
    # the same outcomes made durable before returning, as theseus's are: an import leaves a synced copy of the
    # weights in the root, an export a synced folder
    "transformers from_pretrained + synced save": """
import torch, transformers
t0, c0 = time.perf_counter(), cpu()
model = transformers.AutoModelForCausalLM.from_pretrained(FOLDER, dtype=torch.bfloat16)
model.save_pretrained(WORK + "/out")
synced(WORK + "/out")
seconds, cpu_seconds = time.perf_counter() - t0, cpu() - c0
""",
    "transformers save_pretrained, synced": """
import torch, transformers
model = transformers.AutoModelForCausalLM.from_pretrained(FOLDER, dtype=torch.bfloat16)
t0, c0 = time.perf_counter(), cpu()
model.save_pretrained(WORK + "/out")
synced(WORK + "/out")
seconds, cpu_seconds = time.perf_counter() - t0, cpu() - c0
""",
}
# cpu(): the process's CPU seconds, every thread's (TensorStore's and torch's included)
PRELUDE = ("import json, os, time\nFOLDER, WORK = {folder!r}, {work!r}\n"
           "def cpu():\n    t = os.times()\n    return t.user + t.system\n"
           "def synced(folder):\n    for name in [*os.listdir(folder), '.']:\n"
           "        fd = os.open(os.path.join(folder, name), os.O_RDONLY)\n"
           "        os.fsync(fd)\n        os.close(fd)\n")
EPILOGUE = "\nprint(json.dumps({{'seconds': seconds, 'cpu': cpu_seconds}}))\n"


def make_folder(folder: str, layers: int) -> int:
    """Write the random bf16 model, its config and a tokenizer into ``folder``; returns the safetensors' bytes."""
    import ml_dtypes
    import tokenizers
    import torch
    import transformers

    from theseus.hf.safetensors_io import write_folder

    config = transformers.Qwen2Config(**{**SHAPES, "num_hidden_layers": layers}, torch_dtype="bfloat16")
    config.save_pretrained(folder)
    with torch.device("meta"):
        shapes = {k: tuple(v.shape) for k, v in transformers.AutoModelForCausalLM.from_config(config).state_dict()
                  .items() if k != "lm_head.weight"}
    rng = np.random.default_rng(0)

    def tensors():
        for name, shape in shapes.items():
            yield name, (rng.standard_normal(shape, dtype=np.float32) * 0.02).astype(ml_dtypes.bfloat16)

    write_folder(folder, tensors())
    tok = tokenizers.Tokenizer(tokenizers.models.BPE())
    tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tokenizers.decoders.ByteLevel()
    tok.train_from_iterator(["the quick brown fox " * 50], tokenizers.trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<|endoftext|>"],
        initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet()))
    transformers.PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>").save_pretrained(folder)
    return os.path.getsize(os.path.join(folder, "model.safetensors"))


def measure(name: str, folder: str, work: str) -> dict:
    """Run contender ``name`` in a fresh subprocess on an empty work area; its seconds, wall and peak RSS."""
    subprocess.run(["rm", "-rf", work + "/out"], check=True)
    if name == "theseus import":
        subprocess.run(["rm", "-rf", work + "/root"], check=True)
    code = PRELUDE.format(folder=folder, work=work) + CHILD[name] + EPILOGUE.format()
    t0 = time.perf_counter()
    # /usr/bin/time reports the child's own peak: Linux carries a process's maxrss across fork and exec
    done = subprocess.run(["/usr/bin/time", "-f", "maxrss_kib=%M", sys.executable, "-c", code], check=True,
                          capture_output=True, text=True)
    wall = time.perf_counter() - t0
    rss = int(done.stderr.strip().splitlines()[-1].split("=")[1]) * 1024
    return {**json.loads(done.stdout.strip().splitlines()[-1]), "wall": wall, "rss": rss}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--layers", type=int, default=SHAPES["num_hidden_layers"])
    parser.add_argument("--work", default=None, help="a folder on the disk to measure (default: a tmp folder)")
    args = parser.parse_args()
    base = args.work or tempfile.mkdtemp(prefix="hf-bench-")
    folder, work = os.path.join(base, "qwen"), os.path.join(base, "work")
    os.makedirs(work, exist_ok=True)
    size = make_folder(folder, args.layers)
    print(f"model.safetensors: {size / 2**30:.2f} GiB ({args.layers} layers, bf16)")
    results: dict[str, list[dict]] = {name: [] for name in CHILD}
    for _ in range(args.repeats):  # interleaved: a slow spell of a shared machine hits every contender
        for name in CHILD:
            results[name].append(measure(name, folder, work))
    rows = {}
    for name, runs in results.items():
        rows[name] = {k: statistics.median(r[k] for r in runs) for k in ("seconds", "cpu", "wall", "rss")}
        r = rows[name]
        print(f"{name:30s} {r['seconds']:7.2f} s  (CPU {r['cpu']:6.2f} s, wall {r['wall']:6.2f} s)  peak RSS "
              f"{r['rss'] / 2**30:5.2f} GiB ({r['rss'] / size:.2f}x the file)")
    for ours, theirs in (("theseus import", "transformers from_pretrained"),
                         ("theseus import", "transformers from_pretrained + synced save"),
                         ("theseus export", "transformers save_pretrained"),
                         ("theseus export", "transformers save_pretrained, synced")):
        a, b = rows[ours], rows[theirs]
        print(f"{ours} / {theirs}: time {a['seconds'] / b['seconds']:.2f}x, CPU {a['cpu'] / b['cpu']:.2f}x, "
              f"wall {a['wall'] / b['wall']:.2f}x, peak RSS {a['rss'] / b['rss']:.2f}x")


if __name__ == "__main__":
    main()
