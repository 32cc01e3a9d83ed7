"""The ``theseus import`` commands: another tool's model as a run of a root (``theseus import hf``), a peft
LoRA adapter as a LoRA run over a model of the root (``theseus import peft``).

>>> from typer.testing import CliRunner
>>> app = typer.Typer(); register(app)
>>> "hf" in CliRunner().invoke(app, ["import", "--help"]).output
True
"""

from __future__ import annotations

import os
from typing import Annotated

import typer
from rich.console import Console

from theseus.cli.errors import fail, reported
from theseus.hf.layout import DTYPES


def import_hf(
    folder: Annotated[str, typer.Argument(metavar="DIR", help="A Hugging Face model folder (config.json, "
                                                               "safetensors, tokenizer.json)")],
    root: Annotated[str, typer.Argument(metavar="ROOT", help="The root folder to import it into")],
    name: Annotated[str | None, typer.Option("--name", help="Run name (default: import-<folder name>)")] = None,
    dtype: Annotated[str | None, typer.Option("--dtype", help="Parameter dtype: bf16, fp16 or fp32 (default: as "
                                                              "the folder stores them)")] = None,
) -> None:
    """Import the Hugging Face model in DIR as a run of ROOT: one node whose checkpoint holds its parameters,
    tokenizer and configs; sample, eval, export it, or train from it with ``training.init_from=<nonce>``.

    Llama, Mistral, Qwen2, Qwen3, Gemma and GPT-NeoX folders become that family's decoder; GPT-2 folders
    theseus's GPT. Exit status 2, nothing written, on bad input: DIR missing or without config.json, weights
    only as PyTorch pickles (.bin: never unpickled), an unsupported model_type or setting, no tokenizer.json,
    an unknown --dtype.

    Example: ``theseus import hf ./Qwen2.5-0.5B /tmp/root --dtype bf16``
    \f
    >>> from typer.testing import CliRunner
    >>> app = typer.Typer(); register(app)
    >>> result = CliRunner().invoke(app, ["import", "hf", "/nowhere", "/tmp/root"])
    >>> result.exit_code, "/nowhere is not a folder" in result.output
    (2, True)
    """
    if dtype is not None and dtype not in DTYPES:
        fail(f"unknown --dtype {dtype!r}: use bf16, fp16 or fp32", 2)
    if not os.path.isdir(folder):
        fail(f"{os.path.abspath(folder)} is not a folder", 2)
    from theseus.hf.importer import import_hf as run_import  # lazily: it writes the checkpoint with JAX

    node = run_import(folder, root, name=name, dtype=DTYPES[dtype] if dtype else None)
    console = Console(highlight=False, soft_wrap=True)
    console.print(f"imported {os.path.abspath(folder)} as {node.name}:{node.nonce} (node {node.id})")
    console.print(f"sample it: theseus sample {root} {node.nonce} 'Once upon a time'")
    console.print(f"train from it: training.init_from={node.nonce}")


def import_peft(
    folder: Annotated[str, typer.Argument(metavar="ADAPTER_DIR", help="A peft LoRA adapter folder (adapter_config"
                                                                       ".json, adapter_model.safetensors)")],
    root: Annotated[str, typer.Argument(metavar="ROOT", help="The root holding the model it adapts")],
    base: Annotated[str, typer.Option("--base", help="The model the adapter applies to: a node id, or a nonce (that "
                                                     "run's last checkpoint)")],
    name: Annotated[str | None, typer.Option("--name", help="Run name (default: peft-<folder name>)")] = None,
) -> None:
    """Import the peft LoRA adapter in ADAPTER_DIR as a LoRA run of ROOT over the model --base: one node whose
    checkpoint holds the adapters and names that base, as a trained LoRA checkpoint does; sample it, export it
    (``--format peft``, or ``--format hf --merge``) or audit it like one.

    Exit status 2, nothing written, on bad input: ADAPTER_DIR missing or not a peft folder, the adapter only as a
    PyTorch pickle (never unpickled), a setting beyond plain LoRA (DoRA, biases, saved modules), a base that is not
    a decoder model of the adapter's shapes.

    Example: ``theseus import peft ./my-adapter /tmp/root --base 949e88``
    \f
    >>> from typer.testing import CliRunner
    >>> app = typer.Typer(); register(app)
    >>> result = CliRunner().invoke(app, ["import", "peft", "/nowhere", "/tmp/root", "--base", "abc123"])
    >>> result.exit_code, "/nowhere is not a folder" in result.output
    (2, True)
    """
    if not os.path.isdir(folder):
        fail(f"{os.path.abspath(folder)} is not a folder", 2)
    from theseus.hf.peft_import import import_peft as run_import  # lazily: it writes the checkpoint with JAX

    node = run_import(folder, root, base, name=name)
    console = Console(highlight=False, soft_wrap=True)
    console.print(f"imported {os.path.abspath(folder)} as {node.name}:{node.nonce} (node {node.id}) over node "
                  f"{node.parent}")
    console.print(f"sample it: theseus sample {root} {node.nonce} 'Once upon a time'")


def register(app: typer.Typer) -> None:
    """Add ``import hf`` and ``import peft`` to a Typer app.

    >>> app = typer.Typer(); register(app); [g.name for g in app.registered_groups]
    ['import']
    """
    group = typer.Typer(help="Import another tool's model as a run of a root: hf (a Hugging Face folder), peft (a "
                             "LoRA adapter over a model of the root).", no_args_is_help=True)
    group.command("hf")(reported(import_hf))
    group.command("peft")(reported(import_peft))
    app.add_typer(group, name="import")
