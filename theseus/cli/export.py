"""The ``theseus export`` command: a root's runs in another tool's format (TensorBoard event files, a Hugging Face
model folder).

The format is named by ``--format`` or, as the first argument, by its name::

    theseus export ROOT NONCE_OR_NODE --format hf OUT [--dtype bf16|fp16|fp32]
    theseus export hf ROOT NONCE_OR_NODE OUT                  # the same
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

USAGE = ("theseus export ROOT NONCE_OR_NODE --format hf OUT [--dtype bf16|fp16|fp32], or theseus export "
         "tensorboard ROOT [NONCE...] OUT_DIR")


class Format(str, enum.Enum):
    """The formats ``theseus export`` writes.

    >>> [f.value for f in Format]
    ['tensorboard', 'hf']
    """

    tensorboard = "tensorboard"
    hf = "hf"


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
        named = f"{arguments[0]!r} is not a format (tensorboard, hf)" if arguments else "no format named"
        fail(f"{named}: {USAGE}", 2)
    return Format(arguments[0]), arguments[1:]


def _hf(arguments: list[str], dtype: str) -> None:
    if len(arguments) != 3:
        fail(f"--format hf takes ROOT NONCE_OR_NODE OUT, got {len(arguments)} arguments: {USAGE}", 2)
    root, target, out = arguments
    from theseus.hf.exporter import export_hf  # lazily: it reads the checkpoint with JAX

    record = export_hf(root, target, out, dtype=dtype)
    Console(highlight=False, soft_wrap=True).print(
        f"wrote {record['export/hf/path']} ({record['export/hf/dtype']}) from node {record['node']}; recorded as "
        f"export/hf/* on that node; load it with transformers.AutoModelForCausalLM.from_pretrained({out!r})")


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
    format: Annotated[Format | None, typer.Option("--format", help="tensorboard (event files) or hf (a Hugging "
                                                                   "Face model folder)")] = None,
    dtype: Annotated[str | None, typer.Option("--dtype", help="hf only: the tensors' dtype, bf16 (default), fp16 "
                                                              "or fp32")] = None,
) -> None:
    """Write runs of ROOT in another tool's format.

    hf: the checkpoint of a node (or a run's last, by nonce) as a folder transformers loads
    (config.json, safetensors, generation_config.json, the tokenizer of an imported model), recorded on
    the node as export/hf/*. tensorboard: event files ``OUT_DIR/<name>/<nonce>/`` per run, every key a
    scalar at the run's training step, the config as text; ``tensorboard --logdir OUT_DIR`` shows them.
    Exit status 2, nothing written, on bad input: an unknown format, run or node, a node without a
    checkpoint, an OUT that is not a new or empty folder, an unknown --dtype.

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
        _hf(arguments, dtype or "bf16")
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
