"""The runs table of ``theseus ls``: the columns that fit a terminal, short relative times, and JSON rows.

The name comes first and is never cut; the other columns follow in order of use
(nonce, status, written, train/loss, val/loss, nodes) and those that do not fit the
width are left out, named in the caption, rather than every column cut to ``fini…``.
``--wide`` adds job, train/tokens, last seq and note and prints at the table's own width;
``--columns`` picks the columns (any of those, any logged key, or ``config.<dotted key>``: the
value in the run's latest config, as the UI names it). A run's tags (``theseus tag``) show in
the ``tags`` column once some run listed has some.

>>> import polars as pl
>>> runs = pl.DataFrame({"name": ["general.default.train-gpt"], "nonce": ["c33b26"], "nodes": [7],
...                      "last seq": [6], "_written": [10**18], "_status": ["finished"], "train/loss": [5.3]})
>>> import io
>>> console = Console(width=80, file=io.StringIO())
>>> console.print(runs_table(runs, "/tmp/root", default_columns(), width=80, now=10**18 + 180 * 10**9))
>>> print(console.file.getvalue().splitlines()[3].rstrip())
general.default.train-gpt  c33b26  finished  3m ago          5.3      7
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Sequence
from typing import Any

import polars as pl
import yaml
from rich import box
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table

from theseus.errors import BadInput
from theseus.store import Store, marks, schema
from theseus.store.fold import WRITTEN
from theseus.store.status import run_status

#: the columns ``theseus ls`` shows by default, in the order they are kept as the width shrinks
DEFAULT = ("name", "nonce", "status", "written", "train/loss", "val/loss", "nodes", "tags")
#: what ``--wide`` adds
WIDE = ("job", "train/tokens", "last seq", "note")
#: columns that are not logged keys (the rest are: their latest value in each run, or a config value)
BUILT_IN = ("name", "nonce", "status", "written", "nodes", "job", "last seq", "tags", "note")
MARKS = {"tags": schema.TAGS, "note": schema.NOTE}  # shown where some run listed has the mark's records
CONFIG = "config."  # a column of a config value: config.<dotted key>
_NUMERIC = ("nodes", "last seq")


def default_columns(wide: bool = False) -> tuple[str, ...]:
    """The columns of ``theseus ls`` (``--wide``: with job, train/tokens, last seq and note).

    >>> default_columns()[:3], default_columns(wide=True)[-1]
    (('name', 'nonce', 'status'), 'note')
    """
    return DEFAULT + WIDE if wide else DEFAULT


def parse_columns(text: str) -> tuple[str, ...]:
    """``--columns KEY,...`` as a tuple, the name and nonce first (they name the run); an empty list is a ValueError.

    >>> parse_columns("train/loss, status")
    ('name', 'nonce', 'train/loss', 'status')
    """
    picked = [c.strip() for c in text.split(",") if c.strip()]
    if not picked:
        raise BadInput("--columns takes a comma-separated list of columns, e.g. --columns status,train/loss")
    return tuple(dict.fromkeys(["name", "nonce", *picked]))


def logged_keys(columns: Sequence[str]) -> list[str]:
    """The columns that are logged keys (read from the store), not built-in ones nor config values.

    >>> logged_keys(["name", "status", "train/loss", "lr", "config.optimization.lr"])
    ['train/loss', 'lr']
    """
    return [c for c in columns if c not in BUILT_IN and not c.startswith(CONFIG)]


def config_keys(columns: Sequence[str]) -> list[str]:
    """The columns that name a config value (``config.<dotted key>``).

    >>> config_keys(["name", "train/loss", "config.optimization.lr"])
    ['config.optimization.lr']
    """
    return [c for c in columns if c.startswith(CONFIG)]


def with_config(store: Store, runs: pl.DataFrame, columns: Sequence[str]) -> pl.DataFrame:
    """``runs`` with a column per ``config.<dotted key>`` of ``columns``: the value in each run's latest config
    (None where it has none; a list or section shown as its text).

    >>> from theseus.store.store import _doc_store
    >>> store, n = _doc_store()
    >>> with store.writer() as w:
    ...     w.job(n, "doc/job", "optimization:\\n  lr: 0.001\\n")
    >>> with_config(store, store.runs(), ["config.optimization.lr"])["config.optimization.lr"].to_list()
    [0.001]
    """
    if not columns or not runs.height:
        return runs
    trees = []
    for name, nonce in zip(runs["name"].to_list(), runs["nonce"].to_list()):
        text = store.run_record(nonce, name=name).get(schema.CONFIG)
        try:
            trees.append(yaml.safe_load(text) if text else None)
        except yaml.YAMLError:
            trees.append(None)  # an unreadable config has no values, as in the UI
    return runs.with_columns(_column(c, [_at(tree, c[len(CONFIG):]) for tree in trees]) for c in columns)


def _at(tree: Any, dotted: str) -> Any:
    """The value at ``dotted`` in a nested config (None where absent)."""
    for part in dotted.split("."):
        if not isinstance(tree, dict) or part not in tree:
            return None
        tree = tree[part]
    return tree


def _column(name: str, values: list) -> pl.Series:
    """A config column: ints and floats as Float64 when mixed, one scalar type as itself, anything else as text.

    >>> _column("c", [1, 0.5, None]).to_list(), _column("c", [1, "a", [2]]).to_list()
    ([1.0, 0.5, None], ['1', 'a', '[2]'])
    """
    kinds = {type(v) for v in values if v is not None}
    if kinds == {int, float}:
        return pl.Series(name, [None if v is None else float(v) for v in values], dtype=pl.Float64)
    if len(kinds) == 1 and kinds <= {bool, int, float, str}:
        return pl.Series(name, values)
    return pl.Series(name, [None if v is None else str(v) for v in values], dtype=pl.String)


def known_columns(runs: pl.DataFrame, columns: Sequence[str]) -> tuple[list[str], list[str]]:
    """``(columns shown, columns no run listed holds)``: a logged key or config value every run lacks is unknown.

    >>> runs = pl.DataFrame({"name": ["a"], "train/loss": [1.0], "config.x": [None]})
    >>> known_columns(runs, ["name", "train/loss", "lr", "config.x"])
    (['name', 'train/loss'], ['lr', 'config.x'])
    """
    unknown = [c for c in columns
               if c not in BUILT_IN and (c not in runs.columns or runs[c].null_count() == runs.height)]
    return [c for c in columns if c not in unknown], unknown


def with_keys(store: Store, runs: pl.DataFrame, keys: Sequence[str]) -> pl.DataFrame:
    """``runs`` (`theseus.store.Store.runs`) with a column per logged key of ``keys``: each run's latest value, from
    its last node holding it (a key no run logged is `theseus.store.UnknownKey`, naming close matches).

    >>> from theseus.store.store import _doc_store
    >>> store, n = _doc_store()
    >>> with_keys(store, store.runs(), ["loss"])["loss"].to_list()
    [1.5]
    """
    if not keys:
        return runs
    nodes = store.find().frame(keys=list(keys)).collect()
    latest = nodes.sort("seq").group_by("name", "nonce").agg(pl.col(k).drop_nulls().last() for k in keys)
    return runs.join(latest, on=["name", "nonce"], how="left", maintain_order="left")


def ago(stamp: int | None, now: int) -> str:
    """A write stamp (ns since the epoch) as a short time before ``now``: 12s, 3m, 5h, 2d ago; a date past 30 days.

    >>> s = 10**18
    >>> [ago(s, s + d * 10**9) for d in (0, 42, 180, 7200, 3 * 86400)], ago(None, s)
    (['now', '42s ago', '3m ago', '2h ago', '3d ago'], '-')
    """
    if stamp is None:
        return "-"
    seconds = max(0, (now - stamp) // 10**9)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if seconds >= size:
            if unit == "d" and seconds >= 30 * 86400:
                return dt.datetime.fromtimestamp(stamp / 1e9).strftime("%Y-%m-%d")
            return f"{seconds // size}{unit} ago"
    return "now"


def status(row: dict[str, Any], now: int | None = None) -> str:
    """A run's status by the store's one rule (`theseus.store.status`): the ``status`` column of
    `theseus.store.Store.runs`, else the rule applied at ``now`` (ns; default: the clock).

    >>> status({"_status": "failed"}), status({"_finished": True}), status({"status": "stale"})
    ('failed', 'finished', 'stale')
    >>> status({"_status": "running", "_written": 0}, now=10**18)
    'stale'
    """
    if row.get("status") is not None:
        return row["status"]
    now = time.time_ns() if now is None else now
    return run_status(row.get(schema.STATUS), row.get(schema.FINISHED), row.get(WRITTEN), now)


def fmt(value: Any) -> str:
    """A value as a cell: floats to 4 significant digits, None as -.

    >>> fmt(11.4123), fmt(None), fmt(3072)
    ('11.41', '-', '3072')
    """
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def cell(row: dict[str, Any], column: str, now: int) -> str:
    """The text of ``column`` for one run of `theseus.store.Store.runs`.

    >>> cell({"_written": 10**18}, "written", 10**18 + 5 * 10**9), cell({"train/loss": 2.12345}, "train/loss", 0)
    ('5s ago', '2.123')
    """
    if column == "status":
        return status(row, now)
    if column == "written":
        return ago(row.get(WRITTEN), now)
    if column == "job":
        return row.get("_job") or "-"
    if column == "tags":
        return ",".join(marks.tags_of(row.get(schema.TAGS))) or "-"
    if column == "note":
        return row.get(schema.NOTE) or "-"
    return fmt(row.get(column))


def _table(runs: pl.DataFrame, title: str, columns: Sequence[str], now: int) -> Table:
    table = Table(title=title, box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, collapse_padding=True,
                  title_justify="left")
    longest = max([len("name"), *(len(n) for n in runs["name"].to_list())]) if runs.height else len("name")
    for column in columns:
        numeric = column in _NUMERIC or column not in BUILT_IN
        table.add_column(column, justify="right" if numeric else "left", no_wrap=True,
                         min_width=longest if column == "name" else None, overflow="ellipsis")
    for row in runs.iter_rows(named=True):
        table.add_row(*[cell(row, c, now) for c in columns])
    return table


def natural_width(table: Table) -> int:
    """The width ``table`` takes when nothing constrains it (no column cut).

    >>> t = Table("name", box=None, pad_edge=False); t.add_row("general.default.run")
    >>> natural_width(t)
    19
    """
    console = Console(width=100_000)
    return Measurement.get(console, console.options, table).maximum


def runs_table(runs: pl.DataFrame, root: str, columns: Sequence[str], *, width: int | None = None,
               now: int | None = None, fit: bool = True) -> Table:
    """The table of ``runs`` (`theseus.store.Store.runs`) with ``columns``: with ``fit``, only the leading columns
    whose full width fits ``width`` (the name always; the caption names those left out). A logged-key column no
    run holds is left out.

    >>> import polars as pl
    >>> runs = pl.DataFrame({"name": ["p.g.a-rather-long-run-name"], "nonce": ["abc123"], "nodes": [3],
    ...                      "_written": [0], "_status": ["running"]})
    >>> [c.header for c in runs_table(runs, "/r", ["name", "nonce", "status", "nodes"], width=40, now=0).columns]
    ['name', 'nonce']
    """
    now = dt.datetime.now().timestamp() * 1e9 if now is None else now
    now = int(now)
    title = f"runs in {root}"
    columns = [c for c in columns if (MARKS[c] in runs.columns if c in MARKS else c in BUILT_IN or c in runs.columns)]
    shown = list(columns)
    if fit and width is not None:
        shown = list(columns[:1])
        for column in columns[1:]:
            if natural_width(_table(runs, title, [*shown, column], now)) > width:
                break
            shown.append(column)
    table = _table(runs, title, shown, now)
    hidden = [c for c in columns if c not in shown]
    if hidden:
        table.caption = f"not shown: {', '.join(hidden)} (--wide, --columns, or a wider terminal)"
        table.caption_justify = "left"
    return table


def runs_json(runs: pl.DataFrame, keys: Sequence[str] = ()) -> list[dict[str, Any]]:
    """One plain dict per run for scripts: name, nonce, status, job, nodes, last seq, last write (ISO 8601, UTC),
    and the latest value of each metric and of ``keys``.

    >>> import polars as pl
    >>> runs = pl.DataFrame({"name": ["p.g.r"], "nonce": ["abc123"], "nodes": [2], "last seq": [1],
    ...                      "_written": [10**18], "train/loss": [2.5]})
    >>> runs_json(runs)[0]["last_write"], runs_json(runs)[0]["train/loss"]
    ('2001-09-09T01:46:40Z', 2.5)
    """
    out = []
    for row in runs.iter_rows(named=True):
        stamp = row.get(WRITTEN)
        written = (dt.datetime.fromtimestamp(stamp / 1e9, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
                   if stamp is not None else None)
        item = {"name": row["name"], "nonce": row["nonce"], "status": status(row), "job": row.get("_job"),
                "nodes": row.get("nodes"), "last_seq": row.get("last seq"), "last_write": written,
                "tags": marks.tags_of(row.get(schema.TAGS)), "note": row.get(schema.NOTE),
                "hidden": row.get(schema.HIDDEN) is True}
        item.update({k: v for k, v in row.items() if not k.startswith("_") and k not in (
            "name", "nonce", "nodes", "last seq")})
        item.update({k: row.get(k) for k in keys})
        out.append(item)
    return out
