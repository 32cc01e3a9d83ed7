"""The ``theseus export`` command: a root's runs in another tool's format (TensorBoard event files, a Hugging Face
model folder).

The format is named by ``--format`` or, as the first argument, by its name::

    theseus export ROOT NONCE_OR_NODE --format hf OUT [--dtype bf16|fp16|fp32] [--merge]
    theseus export hf ROOT NONCE_OR_NODE OUT                  # the same
    theseus export ROOT NONCE_OR_NODE --format peft OUT       # a LoRA run's adapters, as peft loads them
    theseus export tensorboard ROOT [NONCE...] OUT_DIR
    theseus export ROOT [NONCE...] OUT_DIR --format tensorboard

>>> from typer.testing import CliRunner
>>> app = typer.Typer(); register(app)
>>> "OUT_DIR" in CliRunner().invoke(app, ["--help"]).output
True
"""

from __future__ import annotations

import enum
from typing import Annotated

import typer
from rich.console import Console

from theseus.cli.errors import fail, reported
from theseus.hf.layout import DTYPES
from theseus.mirror import require
from theseus.mirror.export import export_tensorboard

USAGE = ("theseus export ROOT NONCE_OR_NODE --format hf OUT [--dtype bf16|fp16|fp32] [--merge], theseus export ROOT "
         "NONCE_OR_NODE --format peft OUT, or theseus export tensorboard ROOT [NONCE...] OUT_DIR")


class Format(str, enum.Enum):
    """The formats ``theseus export`` writes.

    >>> [f.value for f in Format]
    ['tensorboard', 'hf', 'peft']
    """

    tensorboard = "tensorboard"
    hf = "hf"
    peft = "peft"


def _split(format: Format | None, arguments: list[str]) -> tuple[Format, list[str]]:
    """The format and the arguments after it: ``--format``'s, or the first argument's (a format's name).

    >>> _split(None, ["hf", "/r", "abc123", "/out"])
    (<Format.hf: 'hf'>, ['/r', 'abc123', '/out'])
    >>> _split(Format.hf, ["/r", "abc123", "/out"])[1]
    ['/r', 'abc123', '/out']
    """
    if format is not None:
        return format, arguments
    if not arguments or arguments[0] not in {f.value for f in Format}:
        named = f"{arguments[0]!r} is not a format (tensorboard, hf, peft)" if arguments else "no format named"
        fail(f"{named}: {USAGE}", 2)
    return Format(arguments[0]), arguments[1:]


def _hf(arguments: list[str], dtype: str, merge: bool) -> None:
    if len(arguments) != 3:
        fail(f"--format hf takes ROOT NONCE_OR_NODE OUT, got {len(arguments)} arguments: {USAGE}", 2)
    root, target, out = arguments
    from theseus.hf.peft import export_model  # lazily: it reads the checkpoint with JAX

    record = export_model(root, target, out, dtype=dtype, merge=merge)
    merged = " (its LoRA adapters merged into the base)" if merge else ""
    Console(highlight=False, soft_wrap=True).print(
        f"wrote {record['export/hf/path']} ({record['export/hf/dtype']}) from node {record['node']}{merged}; recorded "
        f"as export/hf/* on that node; load it with transformers.AutoModelForCausalLM.from_pretrained({out!r})")


def _peft(arguments: list[str]) -> None:
    if len(arguments) != 3:
        fail(f"--format peft takes ROOT NONCE_OR_NODE OUT, got {len(arguments)} arguments: {USAGE}", 2)
    root, target, out = arguments
    from theseus.hf.peft import export_peft  # lazily: it reads the checkpoint with JAX

    record = export_peft(root, target, out)
    Console(highlight=False, soft_wrap=True).print(
        f"wrote the LoRA adapters of node {record['node']} to {record['export/peft/path']}; recorded as "
        f"export/peft/* on that node; load them with peft.PeftModel.from_pretrained(base, {out!r}), base the "
        f"model of node {record['export/peft/base']} (theseus export ROOT {record['export/peft/base']} --format hf)")


def _tensorboard(root: str | None, targets: list[str]) -> None:
    if root is None or not targets:
        fail("missing OUT_DIR: theseus export tensorboard ROOT [NONCE...] OUT_DIR", 2)
    *nonces, out = targets
    require("tensorboard")  # the optional `remote` group: the error names the command installing it
    folders = export_tensorboard(root, nonces, out)
    console = Console(soft_wrap=True)
    for folder in folders:
        console.print(f"wrote {folder}")
    console.print(f"{len(folders)} runs exported; view them with: tensorboard --logdir {out}")


def export(
    arguments: Annotated[list[str] | None, typer.Argument(
        metavar="[FORMAT] ROOT [NONCE_OR_NODE...] OUT_DIR",
        help="the format's name unless --format names it, the root, the runs (tensorboard: nonces, none: every run; "
             "hf: one nonce or node id), then the folder to write into")] = None,
    format: Annotated[Format | None, typer.Option(
        "--format", help="tensorboard (event files), hf (a Hugging Face model folder) or peft (a LoRA run's "
                         "adapters)")] = None,
    dtype: Annotated[str | None, typer.Option("--dtype", help="hf only: the tensors' dtype, bf16 (default), fp16 "
                                                              "or fp32")] = None,
    merge: Annotated[bool, typer.Option("--merge", help="hf only: a LoRA run's model, its adapters merged into its "
                                                        "base")] = False,
) -> None:
    """Write runs of ROOT in another tool's format.

    hf: the checkpoint of a node (or a run's last, by nonce) as a folder transformers loads
    (config.json, safetensors, generation_config.json, the tokenizer of an imported model), recorded on
    the node as export/hf/*; with --merge, a LoRA run's base with its adapters merged. peft: a LoRA
    run's adapters as adapter_model.safetensors + adapter_config.json, recorded as export/peft/*.
    tensorboard: event files ``OUT_DIR/<name>/<nonce>/`` per run, every key a scalar at the run's
    training step, the config as text; ``tensorboard --logdir OUT_DIR`` shows them.
    Exit status 2, nothing written, on bad input: an unknown format, run or node, a node without a
    checkpoint, an OUT that is not a new or empty folder, an unknown --dtype, --merge of a checkpoint
    that is not a LoRA run's, a LoRA checkpoint exported as hf without --merge.

    Examples: ``theseus export /tmp/root 949e88 --format hf /tmp/model``;
    ``theseus export tensorboard /tmp/root 949e88 /tmp/tb``

    \f
    >>> import tempfile
    >>> from typer.testing import CliRunner
    >>> from theseus.store.store import _doc_store
    >>> store, node = _doc_store()
    >>> app = typer.Typer(); register(app)
    >>> CliRunner().invoke(app, ["tensorboard", store.root, tempfile.mkdtemp()]).output.splitlines()[-1]
    '1 runs exported; view them with: tensorboard --logdir ...'
    >>> CliRunner().invoke(app, [store.root, node.nonce, tempfile.mkdtemp(), "--format", "hf", "--dtype", "int8"]
    ...                    ).exit_code
    2
    """
    format, arguments = _split(format, list(arguments or []))
    if format is Format.hf:
        if dtype is not None and dtype not in DTYPES:
            fail(f"unknown --dtype {dtype!r}: use bf16, fp16 or fp32", 2)
        _hf(arguments, dtype or "bf16", merge)
        return
    if merge:
        fail("--merge is an option of --format hf: peft and event files hold no merged model", 2)
    if format is Format.peft:
        if dtype is not None:
            fail("--dtype is an option of --format hf: peft adapters are written in float32", 2)
        _peft(arguments)
        return
    if dtype is not None:
        fail("--dtype is an option of --format hf: event files hold the logged values as they are", 2)
    _tensorboard(arguments[0] if arguments else None, arguments[1:])


def register(app: typer.Typer) -> None:
    """Add ``export`` to a Typer app.

    >>> app = typer.Typer(); register(app); [c.name for c in app.registered_commands]
    ['export']
    """
    app.command("export")(reported(export))
