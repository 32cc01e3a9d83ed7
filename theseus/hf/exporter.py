"""Export any checkpoint as a Hugging Face folder that ``transformers`` loads with no code of ours.

``export_hf(root, target, out, dtype)`` writes ``config.json``, the safetensors (one file, or shards and
their index above `theseus.hf.safetensors_io.SHARD_BYTES`; the tied ``lm_head`` left out),
``generation_config.json`` and the tokenizer files (those an imported run keeps, or the ``huggingface``
tokenizer folder of a run trained from one), then records the export on the node: ``export/hf/path``,
``export/hf/dtype``, ``export/hf/sha256`` (of the listing of every file's sha256) and ``export/hf/files``
(that listing, JSON). Exporting the best checkpoint by a metric is one query and one call::

    export_hf(root, Store(root).find().checkpoint().sort("val/loss").first(), "out/best")

A GPT exports as GPT-2 (learned positions) or GPT-NeoX (RoPE), with equal logits (`theseus.hf.gpt`); a
decoder of the open-model families (`theseus.model.decoder`) as its own family's model (`theseus.hf.convert`).

>>> DTYPES["bf16"]
'bfloat16'
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import ml_dtypes
import numpy as np
import yaml

from theseus.errors import BadInput
from theseus.hf import gpt
from theseus.hf.layout import DTYPES, GENERATION_FILE, TOKENIZER_FILES, TOKENIZER_FOLDER
from theseus.hf.safetensors_io import SHARD_BYTES, write_folder
from theseus.store import Node, Store, direct_io

_NUMPY = {"bfloat16": np.dtype(ml_dtypes.bfloat16), "float16": np.dtype(np.float16), "float32": np.dtype(np.float32)}


def export_dtype(name: str) -> str:
    """The dtype an export writes for ``name`` (bf16 / fp16 / fp32 or their long names); ValueError otherwise.

    >>> export_dtype("fp16")
    'float16'
    >>> export_dtype("int8")
    Traceback (most recent call last):
    ...
    theseus.errors.BadInput: unknown export dtype 'int8': use bf16, fp16 or fp32
    """
    if name not in DTYPES:
        raise BadInput(f"unknown export dtype {name!r}: use bf16, fp16 or fp32")
    return DTYPES[name]


def check_out(out: str) -> None:
    """Refuse an export folder ``out`` that exists and is not empty (an export never overwrites files): checked
    before the run is read, so that mistake is named whatever else is wrong.

    >>> import tempfile
    >>> check_out(tempfile.mkdtemp()) is None
    True
    """
    if os.path.exists(out) and (not os.path.isdir(out) or os.listdir(out)):
        raise BadInput(f"{out} exists and is not an empty folder: an export never overwrites files")


#: the bytes of checkpoint leaves an export reads ahead of the conversion, on this many threads
READ_AHEAD_BYTES = 2**28
READ_AHEAD_THREADS = 4


def _natural(name: str) -> list:
    """A sort key that puts ``blocks_2`` before ``blocks_10``.

    >>> _natural("blocks_10/a") > _natural("blocks_2/b")
    True
    """
    return [(0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", name)]


class _Params:
    """``read(leaf)``: a ``params/`` leaf of the checkpoint in ``folder`` by its path under params/ (None: no such
    leaf), as a host array checked against its MANIFEST as it is read. The leaves after it in name order (the order
    a converter asks for them, layer by layer) are read meanwhile on threads, at most `READ_AHEAD_BYTES` of them,
    so the disk reads while the converter converts and hashes. A context manager: its threads end with it."""

    def __init__(self, folder: str, sealed: Any):
        from theseus.train import checkpoint as ckpt  # lazily: TensorStore reads the checkpoint

        self.entries = {leaf["path"].split("/", 1)[1]: leaf for leaf in ckpt.read_index(folder)["leaves"]
                        if leaf["path"].startswith("params/")}
        self.read_one = lambda leaf: ckpt.read_leaf(sealed, self.entries[leaf])
        self.order = sorted(self.entries, key=_natural)
        self.position = {leaf: k for k, leaf in enumerate(self.order)}
        self.ahead: dict[str, Future] = {}
        self.asked: set[str] = set()
        self.pool = ThreadPoolExecutor(READ_AHEAD_THREADS)

    def _bytes(self, leaf: str) -> int:
        entry = self.entries[leaf]
        return int(np.prod(entry["shape"], dtype=np.int64)) * np.dtype(entry["dtype"]).itemsize

    def __call__(self, leaf: str) -> np.ndarray | None:
        if leaf not in self.entries:
            return None
        self.asked.add(leaf)
        future = self.ahead.pop(leaf, None)
        held = sum(self._bytes(other) for other in self.ahead)
        for other in self.order[self.position[leaf] + 1:]:
            if held >= READ_AHEAD_BYTES:
                break
            if other not in self.ahead and other not in self.asked:
                self.ahead[other] = self.pool.submit(self.read_one, other)
                held += self._bytes(other)
        return future.result() if future is not None else self.read_one(leaf)

    def __enter__(self) -> _Params:
        return self

    def __exit__(self, *exc: Any) -> None:
        for future in self.ahead.values():
            future.cancel()
        self.pool.shutdown(wait=True)


def _architecture_family(store: Store, node: Node) -> str:
    """The model part of ``node``'s run (``gpt``...): its job class's ``MODEL``."""
    from theseus.jobs import get_job  # lazily: the registry imports the training jobs (JAX)
    from theseus.store.schema import JOB, JOB_SOURCE

    run = store.run_record(node.nonce, name=node.name)
    cls = get_job(run[JOB], run.get(JOB_SOURCE)) if run.get(JOB) else None
    model = getattr(cls, "MODEL", None)
    if model is None:
        raise BadInput(f"node {node.id} is of a {run.get(JOB)} run, not a training job: it has no model to export")
    return model.name


def _converters(family: str, architecture: dict) -> tuple[Callable[..., dict], Callable[..., Iterator]]:
    """``(config_to_hf(**token ids), params_to_hf(read, dtype))`` of a ``family`` model of ``architecture`` (the
    checkpoint's section): `theseus.hf.gpt` for our GPT (GPT-2 or GPT-NeoX), `theseus.hf.convert` for the decoder
    families; another family, or an architecture the family's HF model cannot express, is a ValueError naming it.

    >>> _converters("mamba", {})
    Traceback (most recent call last):
    ...
    theseus.errors.BadInput: a 'mamba' model has no Hugging Face export: theseus exports gpt, llama, mistral, qwen2, qwen3, gemma, gpt_neox
    """  # noqa: E501 - a doctest's expected output, printed on one line
    if family == "gpt":
        return (lambda **ids: gpt.config_to_hf(architecture, **ids),
                lambda read, dtype: gpt.params_to_hf(architecture, read, dtype))
    from theseus.hf import convert  # lazily: the decoder config pulls in JAX
    from theseus.model.decoder_config import FAMILIES, DecoderConfig

    if family not in FAMILIES:
        raise BadInput(f"a {family!r} model has no Hugging Face export: theseus exports gpt, {', '.join(FAMILIES)}")
    cfg = DecoderConfig.from_mapping({**architecture, "family": family})
    convert.config_to_hf(cfg)  # a config the family cannot express fails before the folder is written
    return (lambda **ids: convert.config_to_hf(cfg, **ids),
            lambda read, dtype: convert.params_to_hf(cfg, read, dtype))


def _tokenizer_files(sealed: Any, section: dict, root: str) -> dict[str, bytes]:
    """The Hugging Face tokenizer files of a checkpoint, by file name: those an imported checkpoint keeps, else
    those of the folder its ``tokenizer`` section names (a model trained from an import: a relative name is a
    folder of ``root``); none for tiktoken."""
    kept = {rel.split("/", 1)[1]: rel for rel in sealed.listed if rel.split("/")[0] == TOKENIZER_FOLDER}
    if kept:
        return {name: bytes(sealed.read(rel)) for name, rel in kept.items()}
    folder = os.path.join(root, str(section.get("name", "")))  # an absolute name stays itself
    if section.get("backend") != "huggingface" or not os.path.isfile(os.path.join(folder, "tokenizer.json")):
        return {}
    out = {}
    for name in TOKENIZER_FILES:
        if os.path.isfile(os.path.join(folder, name)):
            with open(os.path.join(folder, name), "rb") as f:
                out[name] = f.read()
    return out


def _eot(section: dict, root: str) -> int | None:
    """The end-of-text token of a checkpoint's ``tokenizer`` section, None when it cannot be loaded here."""
    from theseus.data.tokenizer import get_tokenizer

    try:
        return int(get_tokenizer(section.get("backend", "tiktoken"), section.get("name", "cl100k_base"),
                                 root=root).eot)
    except (ValueError, OSError, ImportError):
        return None


def export_hf(root: str | Store, target: str | Node, out: str, dtype: str = "bf16",
              params: Callable[[str], np.ndarray | None] | None = None) -> dict[str, Any]:
    """Write the checkpoint of ``target`` (node id, Node, or nonce: that run's last checkpoint) as a Hugging Face
    folder ``out`` (new or empty) in ``dtype``; record the export on the node and return what was recorded.
    ``params``: ``read(leaf)`` of the parameters to write instead of the checkpoint's own (a LoRA run's base
    with its adapters merged: `theseus.hf.peft.merged_reader`).

    >>> import tempfile
    >>> export_hf(tempfile.mkdtemp(), "abc123", tempfile.mkdtemp(), dtype="int4")
    Traceback (most recent call last):
    ...
    theseus.errors.BadInput: unknown export dtype 'int4': use bf16, fp16 or fp32
    """
    from theseus.replay.restore import checkpoint_for  # lazily: it loads the trainer (JAX)
    from theseus.replay.verify import checkpoint_config
    from theseus.train import manifest as mf

    dtype = export_dtype(dtype)
    out = os.path.abspath(os.fspath(out))
    check_out(out)
    store = root if isinstance(root, Store) else Store(root)
    node, folder = checkpoint_for(store, target)
    family = _architecture_family(store, node)
    config = yaml.safe_load(checkpoint_config(node, folder))
    architecture = config["architecture"]
    config_to_hf, params_to_hf = _converters(family, architecture)
    sealed = mf.Sealed(folder)
    generation = json.loads(sealed.read(GENERATION_FILE)) if GENERATION_FILE in sealed.listed else {}
    tokenizer = _tokenizer_files(sealed, config.get("tokenizer") or {}, store.root)
    eos = generation.get("eos_token_id")
    hf_config = config_to_hf(eos_token_id=_eot(config.get("tokenizer") or {}, store.root) if eos is None else eos,
                             bos_token_id=generation.get("bos_token_id"))
    os.makedirs(out, exist_ok=True)
    target = _NUMPY[dtype]
    files: dict[str, str] = {}  # each file's sha256: the safetensors' hashed as they are written
    with _Params(folder, sealed) as own:
        read = own if params is None else params
        cast = ((name, a if a.dtype == target else a.astype(target)) for name, a in params_to_hf(read, None))
        written = write_folder(out, cast, SHARD_BYTES, digests=files)
    generation = {k: v for k, v in {**generation, "bos_token_id": hf_config["bos_token_id"],
                                    "eos_token_id": hf_config["eos_token_id"]}.items() if v is not None}
    small = {"config.json": json.dumps({**hf_config, "torch_dtype": dtype}, indent=2).encode(),
             "generation_config.json": json.dumps(generation, indent=2).encode(), **dict(sorted(tokenizer.items()))}
    for name, body in small.items():  # synced and hashed as written, as the safetensors: durable before the record
        files[name] = direct_io.write_file(os.path.join(out, name), [body])[1]
    written += list(small)
    direct_io.sync_folders(os.path.dirname(out), [os.path.join(out, name) for name in written])
    listing = json.dumps(files, sort_keys=True)
    record = {"export/hf/path": out, "export/hf/dtype": dtype,
              "export/hf/sha256": hashlib.sha256(listing.encode()).hexdigest(), "export/hf/files": listing}
    with store.writer() as w:
        w.write(node, record)
    return {**record, "node": node.id, "tokenizer": bool(tokenizer)}
