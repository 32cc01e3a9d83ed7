"""Store commands of the ``theseus`` CLI: ``ls`` (its table: `theseus.cli.runs`), ``show``, ``compact``."""

from __future__ import annotations

import datetime as dt
import difflib
import json
import time
import warnings

import typer
from rich.console import Console
from rich.live import Live
from rich.table import Table

from theseus.cli import runs as runs_view
from theseus.cli.errors import fail, reported
from theseus.errors import BadInput
from theseus.store import EmptyResult, Node, Store, marks
from theseus.store.fold import WRITTEN
from theseus.store.status import without_inspections
from theseus.store.summary import UnreadableRun
from theseus.store.view_file import list_views


def _when(stamp: int | None) -> str:
    if stamp is None:
        return "-"
    return dt.datetime.fromtimestamp(stamp / 1e9).strftime("%Y-%m-%d %H:%M:%S")


def ls(
    root: str = typer.Argument(..., help="root folder or gs:// URL"),
    wide: bool = typer.Option(False, "--wide", help="more columns (job, train/tokens, last seq), none left out"),
    columns: str | None = typer.Option(None, "--columns", metavar="KEY,...",
                                       help="these columns (after name and nonce): status, written, nodes, job, "
                                            "last seq, tags, note, any logged key, or config.<dotted key> (a value "
                                            "of the run's config); one no run has is named in a warning"),
    as_json: bool = typer.Option(False, "--json", help="one JSON object per run, for scripts"),
    watch: bool = typer.Option(False, "--watch", help="refresh in place until Ctrl-C"),
    interval: float = typer.Option(2.0, "--interval", help="seconds between refreshes with --watch"),
    count: int | None = typer.Option(None, "--count", hidden=True, help="stop --watch after this many refreshes"),
    every: bool = typer.Option(False, "--all", help="also the hidden runs (theseus hide), the evaluation runs "
                                                    "(gpt/evaluate) and the inspection branches (a trainer ticked "
                                                    "outside job(), status inspecting or inspected)"),
    tags: list[str] = typer.Option([], "--tag", metavar="TAG", help="only the runs tagged TAG (theseus tag); "
                                                                     "repeat for runs holding every one"),
) -> None:
    """List the runs of a root: name, nonce, status, last write, latest metrics, tags; fits the terminal's width.

    Example: ``theseus ls /tmp/root``,
    ``theseus ls /tmp/root --tag baseline --columns status,train/loss,config.optimization.lr``
    """
    picked = runs_view.parse_columns(columns) if columns is not None else runs_view.default_columns(wide)
    if wide and columns is not None:
        raise BadInput("--wide and --columns are exclusive: --columns already says which columns to show")
    if as_json and watch:
        raise BadInput("--json prints once; leave out --watch")
    if interval <= 0 or (count is not None and count < 1):
        raise BadInput("--interval must be positive and --count at least 1")
    for tag in tags:
        marks.check_tag(tag)
    store = Store(root)
    keys = [k for k in runs_view.logged_keys(picked) if k not in runs_view.DEFAULT + runs_view.WIDE]
    configs = runs_view.config_keys(picked)
    warned: set[str] = set()  # a column no run has is named once, not each refresh

    left_out: dict[str, None] = {}  # a run an unreadable file keeps out is named once, below the table

    def listed():
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", UnreadableRun)
            runs = store.runs()
        left_out.update((str(w.message), None) for w in caught if issubclass(w.category, UnreadableRun))
        runs = marks.with_tag(runs if every else marks.without_hidden(without_inspections(runs)), tags)
        runs = runs_view.with_config(store, with_keys(runs), configs)
        unknown = runs_view.known_columns(runs, [*keys, *configs])[1]
        for column in unknown:
            if column not in warned and runs.height:
                warned.add(column)
                typer.echo(f"warning: no run listed has column {column!r}{_close(store, column)}", err=True)
        return runs.drop(unknown, strict=False)  # a column no run has is left out, as a key no run logged

    def with_keys(runs):
        found = [k for k in keys if k in store.keys()]  # a key no run logged: named in the warning above
        return runs_view.with_keys(store, runs, found)

    def name_left_out() -> None:
        for message in left_out:
            typer.echo(f"warning: {message}", err=True)

    if as_json:
        typer.echo(json.dumps(runs_view.runs_json(listed(), [*keys, *configs]), indent=2))
        name_left_out()
        return
    # --wide: lines as long as the table (the terminal wraps them) rather than cut columns
    console = Console(width=100_000) if wide else Console()

    def render() -> Table:
        return runs_view.runs_table(listed(), root, picked, width=console.width, fit=not wide)

    if not watch:
        console.print(render())
        name_left_out()
        return
    if not console.is_terminal:  # a file or a pipe: one table per refresh, written as it comes
        _watch_printed(console, render, interval, count)
        return
    try:
        with Live(render(), console=console, auto_refresh=False) as live:
            shown = 1
            while count is None or shown < count:
                time.sleep(interval)
                live.update(render(), refresh=True)
                shown += 1
    except KeyboardInterrupt:
        pass


def _watch_printed(console: Console, render, interval: float, count: int | None) -> None:
    """``ls --watch`` into a file or pipe: a table each ``interval`` seconds (``count`` of them), until Ctrl-C."""
    shown = 0
    try:
        while count is None or shown < count:
            if shown:
                time.sleep(interval)
            console.print(render())
            console.file.flush()
            shown += 1
    except KeyboardInterrupt:
        pass


def _close(store: Store, column: str) -> str:
    """``; did you mean ...?`` naming the logged keys close to ``column`` (none for a config column)."""
    if column.startswith(runs_view.CONFIG):
        return " (config.<dotted key> names a value of the runs' configs)"
    close = difflib.get_close_matches(column, [k for k in store.keys() if not k.startswith("_")], n=3, cutoff=0.5)
    return f"; did you mean {', '.join(map(repr, close))}?" if close else ""


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
            summary = store.runs().filter(nonce=ident)  # the status ls and the UI show: the store's one rule
            if summary.height:
                record.pop("_status", None)  # the recorded one, which the rule reads
                record["status"] = summary["status"][0]
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
        table.add_row(key, _when(value) if key == WRITTEN else runs_view.fmt(value))
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
