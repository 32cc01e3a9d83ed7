"""Store commands of the ``theseus`` CLI: ``ls``, ``show``, ``compact``."""

from __future__ import annotations

import datetime as dt

import typer
from rich.console import Console
from rich.table import Table

from theseus.cli.errors import fail, reported
from theseus.store import EmptyResult, Node, Store
from theseus.store.fold import WRITTEN
from theseus.store.view import list_views


def _when(stamp: int | None) -> str:
    if stamp is None:
        return "-"
    return dt.datetime.fromtimestamp(stamp / 1e9).strftime("%Y-%m-%d %H:%M:%S")


def _fmt(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def ls(root: str = typer.Argument(..., help="root folder or gs:// URL")) -> None:
    """List the runs of a root: name, nonce, nodes, last write, status and latest metrics.

    Example: ``theseus ls /tmp/root``
    """
    runs = Store(root).runs()
    table = Table(title=f"runs in {root}")
    metrics = [c for c in ("train/loss", "val/loss", "train/tokens") if c in runs.columns]
    for column in ["name", "nonce", "nodes", "last write", "job", "status", *metrics]:
        table.add_column(column, justify="right" if column in ("nodes", *metrics) else "left",
                         no_wrap=column in ("nonce", "name"))
    for row in runs.iter_rows(named=True):
        status = row.get("_status") or ("finished" if row.get("_finished") else "-")
        table.add_row(
            row["name"], row["nonce"], str(row["nodes"]), _when(row[WRITTEN]), row.get("_job") or "-", status,
            *[_fmt(row.get(m)) for m in metrics],
        )
    Console().print(table)


def show(
    root: str = typer.Argument(..., help="root folder or gs:// URL"),
    ident: str = typer.Argument(..., help="a node id or a run's 6-hex nonce"),
) -> None:
    """Show one node (folded) or one run (its reserved fields and last metrics).

    Example: ``theseus show /tmp/root 949e88``
    """
    store = Store(root)
    try:
        if len(ident) == 6:
            record = store.run_record(ident)
            nodes = store.find().nonce(ident).all()
            title = (f"run {record.get('name')} nonce={ident} "
                     f"({len(nodes)} nodes, last seq {nodes[-1].seq if nodes else '-'})")
            last = store.find().nonce(ident).select()
            record = {**{k: v for k, v in record.items() if k != "nonce"}, **(last[-1] if last else {})}
        else:
            node = Node.from_id(ident)
            record = store.record(node)
            title = f"node {node.name} nonce={node.nonce} seq={node.seq}"
    except EmptyResult as e:  # no such run or node: bad input, like the errors reported() turns into a line
        fail(str(e), 2)
    table = Table(title=title)
    table.add_column("key")
    table.add_column("value", overflow="fold")
    for key, value in sorted(record.items()):
        table.add_row(key, _when(value) if key == WRITTEN else _fmt(value))
    Console().print(table)


def compact(root: str = typer.Argument(..., help="root folder or gs:// URL")) -> None:
    """Merge each run's small log segments into one and refresh the view (safe while others read and write).

    Example: ``theseus compact /tmp/root``
    """
    store = Store(root)
    merged = store.compact()
    for run, count in merged.items():
        Console().print(f"compacted {run}: {count} segments -> 1")
    Console().print(f"{len(merged)} runs compacted")
    views = list_views(store)
    if views:
        Console().print(f"view {views[-1].rsplit('/', 1)[-1]} (a folded copy of the log for fast queries)")


def register(app: typer.Typer) -> None:
    """Add the store commands to a Typer app."""
    app.command("ls")(reported(ls))
    app.command("show")(reported(show))
    app.command("compact")(reported(compact))
