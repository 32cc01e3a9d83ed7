"""Import a Hugging Face folder as a run whose node 0 holds a params-only checkpoint.

``import_hf(folder, root, name=None)`` reads ``config.json``, the safetensors (one file or a sharded index;
``.bin`` pickles are refused: no code from outside is executed), the tokenizer files and
``generation_config.json``, and writes a ``<family>/import/hf`` run of one node (`theseus.hf.jobs`): its
checkpoint holds the parameters converted tensor by tensor (`theseus.train.checkpoint.save_streamed`), the
architecture in theseus's terms in ``config.yaml``, the folder's tokenizer files, configs and the size and
sha256 of every file read (`theseus.hf.layout`), sealed by MANIFEST.json like any checkpoint.
``training.init_from`` with its node continues pretraining it.

Which model a folder becomes: a ``gpt2`` folder becomes theseus's GPT (learned positions,
`theseus.hf.gpt`); every decoder family `theseus.hf.convert` knows (``llama``, ``mistral``,
``qwen2``, ``qwen3``, ``gemma``, ``gpt_neox``) becomes that family's decoder
(`theseus.model.decoder`), GPT-NeoX included: theseus's own GPT only exports as GPT-NeoX. Another
``model_type`` is refused, naming it. The run's tokenizer is the folder's ``tokenizer.json``, named
as a folder of the root (``tokenizer.backend=huggingface``, ``tokenizer.name=objects/<node>/tokenizer``, read there
by the jobs of that root, so the root can move): data tokenized for the model names that same tokenizer.

>>> import tempfile
>>> import_hf(tempfile.mkdtemp(), tempfile.mkdtemp())  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
theseus.errors.BadInput: ... has no config.json: not a Hugging Face model folder
"""

from __future__ import annotations

import hashlib
import json
import mmap
import os
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from theseus.errors import BadInput
from theseus.hf.imported_run import committed, saved
from theseus.hf.layout import GENERATION_FILE, HF_CONFIG_FILE, SOURCE_FILE, TOKENIZER_FILES, TOKENIZER_FOLDER
from theseus.hf.safetensors_io import SafetensorsFolder
from theseus.store import Node, Store

#: the parameter dtypes an import writes
PARAM_DTYPES = ("float32", "bfloat16", "float16")


#: a source file is hashed through a mapped window of this many bytes at a time
_HASH_WINDOW = 2**26


def _hash(path: str) -> dict:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        # from the mapped pages the conversion reads too, a window at a time: no copy of the file, and no more of
        # it resident for the hash than one window
        for offset in range(0, size, _HASH_WINDOW):
            with mmap.mmap(f.fileno(), min(_HASH_WINDOW, size - offset), access=mmap.ACCESS_READ,
                           offset=offset) as window:
                digest.update(window)
    return {"size": size, "sha256": digest.hexdigest()}


def model_of(hf_config: dict) -> tuple[str, dict[str, Any], Callable[..., Iterator[tuple[str, np.ndarray]]]]:
    """``(family, architecture section, params_from_hf(read, names))`` of a folder's ``config.json``: our GPT for
    ``gpt2``, the decoder family for the families `theseus.hf.convert` knows; a ValueError naming the setting
    (`theseus.hf.convert.UnsupportedModel`) otherwise.

    >>> family, arch, _ = model_of({"model_type": "qwen2", "vocab_size": 64, "hidden_size": 32,
    ...     "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 64})
    >>> family, arch["n_kv_head"], arch["qkv_bias"], "family" in arch
    ('qwen2', 2, True, False)
    >>> model_of({"model_type": "bert"})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    theseus.hf.convert.UnsupportedModel: model_type 'bert' is not a model theseus imports; supported: gpt2, llama, ...
    """
    from theseus.hf import convert, gpt  # lazily: the decoder config pulls in JAX

    kind = hf_config.get("model_type")
    if kind == "gpt2":
        architecture = gpt.config_from_hf(hf_config)
        return "gpt", architecture, lambda read, names: gpt.params_from_hf(architecture, read, names)
    if kind not in convert.FAMILIES:
        raise convert.UnsupportedModel(f"model_type {kind!r} is not a model theseus imports; supported: gpt2, "
                                       f"{', '.join(convert.FAMILIES)}")
    cfg = convert.config_from_hf(hf_config)
    architecture = {k: v for k, v in cfg.to_mapping().items() if k != "family"}

    def params(read: Callable[[str], Any], names: list[str]) -> Iterator[tuple[str, np.ndarray]]:
        held = set(names)  # every tensor checked present before the first is converted (and written)
        missing = [m.hf_name for m in convert.tensor_maps(cfg) if not {m.hf_name, *m.aliases} & held]
        if missing:
            raise convert.UnsupportedModel(f"the model has no tensor {missing[0]}")
        return convert.params_from_hf(cfg, read, names)

    return kind, architecture, params


def _cast(leaves: Iterable[tuple[str, np.ndarray]], dtype: str) -> Iterator[tuple[str, np.ndarray]]:
    import ml_dtypes

    target = np.dtype(ml_dtypes.bfloat16) if dtype == "bfloat16" else np.dtype(dtype)
    for leaf, array in leaves:
        yield f"params/{leaf}", array if array.dtype == target else array.astype(target)
    yield "step", np.int32(0)


def _tokenizer_files(folder: str) -> list[str]:
    """The tokenizer files of ``folder`` an import keeps; a ValueError when it has no tokenizer.json or the
    tokenizer has no end-of-text token (a run's tokenizer must sample and tokenize data)."""
    from theseus.data.tokenizer import get_tokenizer

    kept = [n for n in TOKENIZER_FILES if os.path.isfile(os.path.join(folder, n))]
    if "tokenizer.json" not in kept:
        raise BadInput(f"{folder} has no tokenizer.json: theseus reads a model's tokenizer with the `tokenizers` "
                         "library (save it with a fast tokenizer: AutoTokenizer.from_pretrained(...).save_pretrained)")
    get_tokenizer("huggingface", folder)  # no end-of-text token: an error naming the fix
    return kept


def import_hf(folder: str, root: str | Store, name: str | None = None, dtype: str | None = None) -> Node:
    """Import the Hugging Face model in ``folder`` into ``root`` as run ``name`` (default ``import-<folder name>``),
    its parameters in ``dtype`` (float32, bfloat16, float16; default: as the folder stores them); returns node 0
    of the new run. Every check runs before anything is written.

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
    from theseus.experiments import job_source
    from theseus.hf.jobs import IMPORTED, job_key
    from theseus.jobs import job_json
    from theseus.store.layout import CONFIG_FILE, JOB_FILE, RNG_FILE, objects

    folder, hf_config = _read_hf_config(folder)
    tensors = SafetensorsFolder(folder)  # refuses pickles before anything is written
    family, architecture, convert_params = model_of(hf_config)
    param_dtype = _param_dtype(tensors, dtype)
    architecture["dtype"]["param"] = param_dtype
    kept = _tokenizer_files(folder)
    store = root if isinstance(root, Store) else Store(root)
    node = Node.start(name or f"import-{os.path.basename(folder.rstrip('/'))}")
    cls = IMPORTED[family]
    config = configs.merge(cls.defaults(), {"architecture": architecture})
    # named in the root (get_tokenizer reads a relative folder of the job's root there): the root may move
    config.tokenizer.backend, config.tokenizer.name = "huggingface", f"{objects(node.id)}/{TOKENIZER_FOLDER}"
    config.training.validation = config.training.evaluate = config.training.analyze = False  # no data to read
    read, sidecars = _folder_sidecars(folder, tensors, kept, hf_config)
    # lazily: the base key's JSON is written as every checkpoint writes it
    import jax

    from theseus.train.rng import key_to_json

    key = job_key(family)
    sidecars[RNG_FILE] = key_to_json(jax.random.PRNGKey(0), 0).encode()
    sidecars[CONFIG_FILE] = configs.to_yaml(config).encode()
    sidecars[JOB_FILE] = job_json(key, node, None, step=0, imported=folder).encode()
    leaves = _cast(convert_params(tensors.read, tensors.names), param_dtype)
    _save_hashing(store, node, leaves, sidecars, folder, read)
    committed(store, node, key, configs.to_yaml(config), job_source(cls),
              {"train/step": 0, "train/tokens": 0, "hf/source": folder,
               "hf/model_type": str(hf_config.get("model_type"))})
    return node


def _read_hf_config(folder: str) -> tuple[str, dict[str, Any]]:
    """``folder`` made absolute and its ``config.json`` as a dict; BadInput when either is not what HF writes."""
    folder = os.path.abspath(os.fspath(folder))
    if not os.path.isdir(folder):
        raise BadInput(f"{folder} is not a folder")
    where = os.path.join(folder, "config.json")
    if not os.path.isfile(where):
        raise BadInput(f"{folder} has no config.json: not a Hugging Face model folder")
    with open(where) as f:
        try:
            hf_config = json.load(f)
        except json.JSONDecodeError as e:  # the JSON decoder's answer to the folder the caller named
            raise BadInput(f"{where} is not JSON: {e}") from None
    if not isinstance(hf_config, dict):
        raise BadInput(f"{where} is not a JSON object")
    return folder, hf_config


def _param_dtype(tensors: SafetensorsFolder, dtype: str | None) -> str:
    """The dtype the parameters are imported in: ``dtype``, else the folder's first tensor's (float32 if none)."""
    stored = {str(tensors.read(n).dtype) for n in tensors.names[:1]}
    param_dtype = dtype or (stored.pop() if stored else "float32")
    if param_dtype not in PARAM_DTYPES:
        raise BadInput(f"parameters stored as {param_dtype}: import them with dtype {', '.join(PARAM_DTYPES)}")
    return param_dtype


def _folder_sidecars(folder: str, tensors: SafetensorsFolder, kept: list[str],
                     hf_config: dict[str, Any]) -> tuple[list[str], dict[str, bytes]]:
    """The folder's files the import reads (hashed into its source), and the sidecars copied from it: the kept
    tokenizer files, the HF config and, when there is one, the generation config."""
    generation = os.path.isfile(os.path.join(folder, "generation_config.json"))
    read = ["config.json", *tensors.files, *kept, *(["generation_config.json"] if generation else [])]
    if os.path.isfile(os.path.join(folder, "model.safetensors.index.json")):
        read.append("model.safetensors.index.json")
    sidecars: dict[str, bytes] = {}
    for n in kept:
        with open(os.path.join(folder, n), "rb") as f:
            sidecars[f"{TOKENIZER_FOLDER}/{n}"] = f.read()
    sidecars[HF_CONFIG_FILE] = json.dumps(hf_config, indent=2).encode()
    if generation:
        with open(os.path.join(folder, "generation_config.json"), "rb") as f:
            sidecars[GENERATION_FILE] = f.read()
    return read, sidecars


def _save_hashing(store: Store, node: Node, leaves: Any, sidecars: dict[str, bytes], folder: str,
                  read: list[str]) -> None:
    """Save the checkpoint of ``leaves`` with ``sidecars`` and a source file hashing the ``read`` files."""
    # the files read are hashed on another thread while the parameters are converted and written (hashlib and
    # TensorStore release the GIL): one more read of the folder, not one more pass before the conversion
    with ThreadPoolExecutor(1) as pool:
        hashed = pool.submit(lambda: {n: _hash(os.path.join(folder, n)) for n in sorted(set(read))})

        def with_source() -> dict[str, bytes]:
            return {**sidecars, SOURCE_FILE: json.dumps({"folder": folder, "files": hashed.result()},
                                                        indent=2).encode()}

        saved(store, node, leaves, with_source)  # the checkpoint first (`theseus.hf.imported_run`)
