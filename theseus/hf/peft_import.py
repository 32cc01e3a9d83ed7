"""Import a peft LoRA adapter folder as a LoRA run over a base node of the root.

``import_peft(folder, root, base)`` reads the folder's ``adapter_config.json`` and ``adapter_model.safetensors``
(`theseus.hf.peft.read_peft`: plain LoRA only; DoRA, biases or saved modules are refused), checks each adapter
against the shapes of the projections of ``base`` (a node id, or a nonce: that run's last checkpoint, of a decoder
family model: an imported one or a trained one), and writes a ``<family>/import/peft`` run of one node
(`theseus.hf.peft_jobs`). Its checkpoint holds the adapters as a ``<family>/train/lora`` checkpoint holds them
(parameters only), its config the base's architecture and tokenizer, the ``lora`` section and
``training.init_from`` set to the base node id, its ``job.json`` that id as ``adapts``: sampling, exporting
(``--format peft`` or ``--format hf --merge``) and the audit's missing-base check read it as a trained adapter.
Every check runs before anything is written.

>>> import tempfile
>>> import_peft(tempfile.mkdtemp(), tempfile.mkdtemp(), "abc123")  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
theseus.errors.NotFound: ... has no adapter_config.json: not a peft adapter folder
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from theseus.errors import BadInput
from theseus.hf.imported_run import committed, saved
from theseus.hf.peft import ADAPTER_CONFIG, ADAPTER_WEIGHTS
from theseus.store import Node, Store

__all__ = ["base_model", "import_peft"]


def base_model(store: Store, base: str) -> tuple[Node, dict, str]:
    """``(node, its checkpoint config, model family)`` of the base ``base`` (a node id or nonce); a base that is not
    a decoder family model with a committed checkpoint, or is itself an adapter, is a BadInput.

    >>> import tempfile
    >>> base_model(Store(tempfile.mkdtemp()), "abc123")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    theseus.errors.BadInput: --base abc123: there is no run with nonce 'abc123' in ...
    """
    from theseus.jobs import get_job  # lazily: the registry imports the training jobs (JAX)
    from theseus.model.decoder_config import FAMILIES
    from theseus.store.schema import JOB, JOB_SOURCE
    from theseus.train.init_from import source_of

    try:
        node, _, config = source_of(store, base)
    except BadInput as e:  # source_of names the setting it resolves; here that is --base
        raise BadInput(str(e).replace(f"training.init_from={base}", f"--base {base}")) from None
    if isinstance(config.get("lora"), dict):
        raise BadInput(f"--base {base}: node {node.id} holds LoRA adapters, not a model: name the model they adapt")
    run = store.run_record(node.nonce, name=node.name)
    family = get_job(run[JOB], run.get(JOB_SOURCE)).MODEL.name
    if family not in FAMILIES:
        raise BadInput(f"--base {base}: node {node.id} is a {family} model; peft adapters import over the decoder "
                       f"families: {', '.join(FAMILIES)}")
    return node, config, family


def _checked(adapters: Any, shapes: Mapping[str, tuple[int, int]], rank: int, base: str) -> None:
    """Raise a BadInput naming the first adapter whose projection ``base`` lacks or whose shape differs."""
    from theseus.model.lora import leaves

    for path, adapter in leaves(adapters):
        fan_in, fan_out = shapes.get(path, (None, None))
        want = {"lora_a": (fan_in, rank), "lora_b": (rank, fan_out)}
        for name, shape in want.items():
            if tuple(np.shape(adapter[name])) != shape:
                raise BadInput(f"the adapter of {path} has {name} of shape {tuple(np.shape(adapter[name]))}, the "
                               f"base {base} needs {shape}: the adapter was not trained on this model")


def _read(folder: str, config: dict, family: str, base: str) -> tuple[Any, Any]:
    """``(spec, adapters)`` of the peft ``folder`` over the base of ``config``, checked against its shapes."""
    from theseus.hf.peft import read_peft
    from theseus.model import lora
    from theseus.model.decoder import Decoder
    from theseus.model.decoder_config import DecoderConfig

    cfg = DecoderConfig.from_mapping({**config["architecture"], "family": family})
    try:
        spec, adapters = read_peft(folder, cfg)
    except BadInput:  # a BadInput is a ValueError already naming the problem
        raise
    except ValueError as e:  # a tensor the base's layout cannot hold (numpy's reshape)
        raise BadInput(f"{folder} does not fit the base {base}: {e}") from None
    shapes = lora.projections(Decoder(cfg), spec, int(config["architecture"].get("block_size", 1)))
    _checked(adapters, shapes, spec.rank, base)
    return spec, adapters


def _leaves(adapters: Any) -> Iterator[tuple[str, np.ndarray]]:
    from theseus.model.lora import leaves

    for path, adapter in leaves(adapters):
        for name in ("lora_a", "lora_b"):
            yield f"params/{path}/{name}", np.ascontiguousarray(adapter[name], np.float32)
    yield "step", np.int32(0)


def _digests(folder: str) -> dict[str, dict]:
    out = {}
    for name in (ADAPTER_CONFIG, ADAPTER_WEIGHTS):
        with open(os.path.join(folder, name), "rb") as f:
            data = f.read()
        out[name] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    return out


def import_peft(folder: str, root: str | Store, base: str, name: str | None = None) -> Node:
    """Import the peft LoRA adapter in ``folder`` into ``root`` as run ``name`` (default ``peft-<folder name>``)
    over the model ``base`` (node id or nonce); returns node 0 of the new run (module doc).

    >>> import tempfile
    >>> import_peft("/nowhere", tempfile.mkdtemp(), "abc123")
    Traceback (most recent call last):
    ...
    theseus.errors.BadInput: /nowhere is not a folder
    """
    # lazily: TensorStore and JAX write the checkpoint; the CLI imports this module without them
    import jax

    from theseus import config as configs
    from theseus.experiments import job_source
    from theseus.hf.layout import SOURCE_FILE
    from theseus.hf.peft_jobs import IMPORTED_PEFT, job_key
    from theseus.jobs import job_json
    from theseus.store.layout import CONFIG_FILE, JOB_FILE, RNG_FILE
    from theseus.train.lora_jobs import ADAPTS
    from theseus.train.rng import key_to_json

    folder = os.path.abspath(os.fspath(folder))
    if not os.path.isdir(folder):
        raise BadInput(f"{folder} is not a folder")
    store = root if isinstance(root, Store) else Store(root)
    if not all(os.path.isfile(os.path.join(folder, n)) for n in (ADAPTER_CONFIG, ADAPTER_WEIGHTS)):
        from theseus.hf.peft import read_peft  # its NotFound names the file missing (a folder is checked first)

        read_peft(folder, None)
    base_node, base_config, family = base_model(store, str(base))
    spec, adapters = _read(folder, base_config, family, str(base))
    cls = IMPORTED_PEFT[family]
    config = configs.merge(cls.defaults(), {
        "architecture": base_config["architecture"], "tokenizer": base_config["tokenizer"],
        "lora": {"rank": spec.rank, "alpha": spec.alpha, "dropout": spec.dropout, "targets": spec.targets}})
    config.training.init_from = base_node.id
    config.training.validation = config.training.evaluate = config.training.analyze = False  # no data to read
    node = Node.start(name or f"peft-{os.path.basename(folder.rstrip('/'))}", parent=base_node.id)
    key = job_key(family)
    sidecars = {RNG_FILE: key_to_json(jax.random.PRNGKey(0), 0), CONFIG_FILE: configs.to_yaml(config),
                JOB_FILE: job_json(key, node, None, step=0, imported=folder, **{ADAPTS: base_node.id}),
                SOURCE_FILE: json.dumps({"folder": folder, "files": _digests(folder)}, indent=2)}
    saved(store, node, _leaves(adapters), sidecars)
    committed(store, node, key, configs.to_yaml(config), job_source(cls),
              {"train/step": 0, "train/tokens": 0, "peft/source": folder, "peft/base": base_node.id})
    return node
