"""Chart data: a key of a run against ``seq``, ``train/tokens`` or wall time, and where its
checkpoints were committed.

``x`` is ``seq`` (the node's seq), ``time`` (seconds since the run's first record, from the
write stamps of the key's records) or any logged key (``train/tokens``); a point is a node
holding both ``x`` and the key. ``since`` keeps the points after that seq only, so a chart
that follows a live run fetches only what is new.

>>> import tempfile
>>> from theseus.store import Node, Store
>>> from theseus.ui.follow import Follower
>>> store = Store(tempfile.mkdtemp())
>>> n = Node.start("doc.series.run")
>>> with store.writer() as w:
...     for k in range(3):
...         w.write(n, {"train/loss": 3.0 - k, "train/tokens": 64 * k}); n = n.next()
>>> follower = Follower(store); _ = follower.poll()
>>> s = series(follower.run(n.nonce), "train/loss", x="train/tokens")
>>> s["x"], s["y"], s["seq"]
([0.0, 64.0, 128.0], [3.0, 2.0, 1.0], [0, 1, 2])
>>> series(follower.run(n.nonce), "train/loss", since=1)["y"]
[1.0]
"""

from __future__ import annotations

import difflib
from typing import Any

import polars as pl

from theseus.errors import BadInput
from theseus.store import schema
from theseus.store.retired import kept_checkpoints
from theseus.ui.follow import RunLog

SEQ, TIME = "seq", "time"
X_AXES = (SEQ, "train/tokens", TIME)  # offered first; any logged key works


def series(run: RunLog, key: str, x: str = SEQ, since: int | None = None) -> dict[str, Any]:
    """``{"x", "y", "seq", "checkpoints", "version"}`` of ``key`` in ``run`` (see the module's docstring);
    ``checkpoints`` holds the x of each node with a committed checkpoint.

    >>> series(RunLog("a", "abcdef"), "train/loss")["y"]
    []
    """
    schema.check_user_key(key)
    if x not in (SEQ, TIME):
        schema.check_user_key(x)
    data = run.rows
    values = _numeric(data, key).rename({"value": "y", "stamp": "y_stamp"})
    if x == SEQ:
        points = values.with_columns(pl.col("seq").cast(pl.Float64).alias("x"))
    elif x == TIME:
        start = data["stamp"].min() if data.height else 0
        points = values.with_columns(((pl.col("y_stamp") - start) / 1e9).alias("x"))
    else:
        points = values.join(_numeric(data, x).rename({"value": "x"}).drop("stamp"), on="seq")
    points = points.filter(pl.col("x").is_not_null() & pl.col("y").is_not_null()).sort("seq")
    all_points = points
    if since is not None:
        points = points.filter(pl.col("seq") > since)
    marks = kept_checkpoints(data).select("seq")
    checkpoints = all_points.join(marks, on="seq")["x"].to_list()
    if x == SEQ:
        checkpoints = [float(s) for s in marks["seq"].to_list()]
    return {"nonce": run.nonce, "key": key, "x_key": x, "x": points["x"].to_list(), "y": points["y"].to_list(),
            "seq": points["seq"].to_list(), "checkpoints": checkpoints, "version": run.version}


def _numeric(data: pl.DataFrame, key: str) -> pl.DataFrame:
    """``seq, value, stamp`` of the nodes holding ``key`` as a number (bools as 0/1)."""
    rows = data.filter(pl.col("key") == key)
    value = pl.coalesce(pl.col("float"), pl.col("int").cast(pl.Float64), pl.col("bool").cast(pl.Float64))
    return rows.select("seq", value.alias("value"), "stamp")


def run_numeric_keys(run: RunLog) -> set[str]:
    """The user keys ``run`` logged as numbers (what a chart can draw).

    >>> run_numeric_keys(RunLog("a", "abcdef"))
    set()
    """
    return set(run.facts.numeric)  # worked out when the run was folded


def check_keys(keys: list[str], known: list[str]) -> None:
    """A ValueError naming each key no run logged as a number, with close matches (as the cursor does).

    >>> check_keys(["train/los"], ["train/loss", "val/loss"])
    Traceback (most recent call last):
    ...
    theseus.errors.BadInput: no run in this root logged 'train/los' as a number; did you mean 'train/loss', 'val/loss'?
    """
    for key in keys:
        if key not in known and key not in (SEQ, TIME):
            close = difflib.get_close_matches(key, known, n=5, cutoff=0.5)
            hint = f"; did you mean {', '.join(map(repr, close))}?" if close else ""
            raise BadInput(f"no run in this root logged {key!r} as a number{hint}")
