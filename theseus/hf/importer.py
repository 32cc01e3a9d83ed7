"""Import a Hugging Face folder as a run whose node 0 holds a params-only checkpoint.

``import_hf(folder, root, name=None)`` reads ``config.json``, the safetensors (one file or a sharded index;
``.bin`` pickles are refused: no code from outside is executed), the tokenizer files and
``generation_config.json``, and writes a ``gpt/train/pretrain`` run of one node: its checkpoint holds the
parameters converted tensor by tensor (`theseus.train.checkpoint.save_streamed`), the architecture in
theseus's terms in ``config.yaml``, the folder's tokenizer files, configs and the size and sha256 of every
file read (`theseus.hf.layout`), sealed by MANIFEST.json like any checkpoint. ``training.init_from`` with its
node continues pretraining it.

>>> import tempfile
>>> import_hf(tempfile.mkdtemp(), tempfile.mkdtemp())  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
ValueError: ... has no config.json: not a Hugging Face model folder
"""

from __future__ import annotations

import hashlib
import json
import os

import numpy as np

from theseus.hf import gpt
from theseus.hf.layout import GENERATION_FILE, HF_CONFIG_FILE, SOURCE_FILE, TOKENIZER_FILES, TOKENIZER_FOLDER
from theseus.hf.safetensors_io import SafetensorsFolder
from theseus.store import Node, Store

#: the job whose run an import is: a training job, so sampling, evaluating and init_from read it as any
JOB_KEY = "gpt/train/pretrain"


def _hash(path: str) -> dict:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(2**24), b""):
            digest.update(block)
    return {"size": os.path.getsize(path), "sha256": digest.hexdigest()}


def import_hf(folder: str, root: str | Store, name: str | None = None, dtype: str | None = None) -> Node:
    """Import the Hugging Face model in ``folder`` into ``root`` as run ``name`` (default ``import-<folder name>``),
    its parameters in ``dtype`` (default: as the folder stores them); returns node 0 of the new run.

    >>> import tempfile, os
    >>> folder = tempfile.mkdtemp(); open(os.path.join(folder, "config.json"), "w").write('{"model_type": "gpt2"}')
    22
    >>> import_hf(folder, tempfile.mkdtemp())  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    theseus.hf.safetensors_io.NotSafetensors: ... has no model.safetensors and no model.safetensors.index.json
    """
    # lazily: TensorStore and JAX write the checkpoint; the CLI imports this module without them
    from theseus import config as configs
    from theseus.jobs import get_job
    from theseus.store.layout import CONFIG_FILE, JOB_FILE, RNG_FILE, objects
    from theseus.train import checkpoint as ckpt

    folder = os.path.abspath(os.fspath(folder))
    where = os.path.join(folder, "config.json")
    if not os.path.isfile(where):
        raise ValueError(f"{folder} has no config.json: not a Hugging Face model folder")
    with open(where) as f:
        hf_config = json.load(f)
    tensors = SafetensorsFolder(folder)  # refuses pickles before anything is written
    architecture = gpt.config_from_hf(hf_config)
    stored = {str(tensors.read(n).dtype) for n in tensors.names[:1]}
    param_dtype = dtype or (stored.pop() if stored else "float32")
    if param_dtype not in ("float32", "bfloat16", "float16"):
        raise ValueError(f"parameters stored as {param_dtype}: import them with dtype float32, bfloat16 or float16")
    architecture["dtype"]["param"] = param_dtype
    store = root if isinstance(root, Store) else Store(root)
    node = Node.start(name or f"import-{os.path.basename(folder.rstrip('/'))}")
    cls = get_job(JOB_KEY)
    config = cls.defaults()
    config = configs.merge(config, {"architecture": architecture})
    kept = [n for n in TOKENIZER_FILES if os.path.isfile(os.path.join(folder, n))]
    if "tokenizer.json" in kept:
        config.tokenizer.backend, config.tokenizer.name = "huggingface", f"{objects(node.id)}/{TOKENIZER_FOLDER}"
    read = ["config.json", *tensors.files, *kept, *(["generation_config.json"] if os.path.isfile(
        os.path.join(folder, "generation_config.json")) else [])]
    if os.path.isfile(os.path.join(folder, "model.safetensors.index.json")):
        read.append("model.safetensors.index.json")
    sidecars: dict[str, bytes] = {f"{TOKENIZER_FOLDER}/{n}": open(os.path.join(folder, n), "rb").read() for n in kept}
    sidecars[HF_CONFIG_FILE] = json.dumps(hf_config, indent=2).encode()
    if "generation_config.json" in read:
        sidecars[GENERATION_FILE] = open(os.path.join(folder, "generation_config.json"), "rb").read()
    sidecars[SOURCE_FILE] = json.dumps({"folder": folder, "files": {n: _hash(os.path.join(folder, n))
                                                                    for n in sorted(read)}}, indent=2).encode()
    # lazily: the base key's JSON is written as every checkpoint writes it
    import jax

    from theseus.train.rng import key_to_json

    sidecars[RNG_FILE] = key_to_json(jax.random.PRNGKey(0), 0).encode()
    sidecars[CONFIG_FILE] = configs.to_yaml(config).encode()
    sidecars[JOB_FILE] = json.dumps({"key": JOB_KEY, "name": node.name, "nonce": node.nonce, "seq": 0,
                                     "node": node.id, "parent": None, "step": 0, "base": None,
                                     "imported": folder}, indent=2).encode()
    cast = np.dtype(param_dtype) if param_dtype != "bfloat16" else None

    def leaves():
        for leaf, array in gpt.params_from_hf(architecture, tensors.read, tensors.names):
            if cast is not None:
                array = array.astype(cast)
            elif str(array.dtype) != "bfloat16":
                import ml_dtypes

                array = array.astype(ml_dtypes.bfloat16)
            yield f"params/{leaf}", array
        yield "step", np.int32(0)

    with store.writer() as w:
        w.begin(node)
        ckpt.save_streamed(store.objects(node), leaves(), sidecars)
        w.job(node, JOB_KEY, configs.to_yaml(config))
        w.write(node, {"train/step": 0, "train/tokens": 0, "hf/source": folder,
                       "hf/model_type": str(hf_config.get("model_type"))})
        w.checkpoint(node, objects(node.id))
        w.finished(node)
    return node
