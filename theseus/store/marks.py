"""A person's marks on a run: its tags, a note, whether it is hidden (``theseus tag`` / ``note`` / ``hide``).

Marks are records like any other, written through the writer (``Writer.marks``) on the run's
last node: nothing is changed or deleted, and the latest record of each key is the run's.
``_tags`` holds the run's whole tag set as a JSON list, so removing a tag is one more record
of the set without it. Marks say nothing of whether the run is alive: its last write, the clock
of its status, leaves them out (``theseus.store.summary.run_written``), so tagging, annotating or
hiding a stale run leaves it stale, and ``theseus ls``'s ``written`` stays the run's own last write.

Two processes tagging one run at once take turns on a local root (an exclusive lock on the run's
log folder while one reads the set and writes it with its tags), so neither loses the other's
tags. An object store (gs://) has no lock: there each reads the set again after its write and
writes again until its tags are in it, which two taggers of one run in the same instant can
still defeat (the later set wins; ``theseus show`` lists the tags).

``theseus ls`` and the UI leave out hidden runs, and the evaluation runs (job ``gpt/evaluate``)
as a group, unless asked (``--all``, ``?all=1``).

>>> from theseus.store.store import _doc_store
>>> store, n = _doc_store()
>>> mark(store, n.nonce, tags=["baseline", "lr-sweep"], note="first try")
{'tags': ['baseline', 'lr-sweep'], 'note': 'first try', 'hidden': False}
>>> mark(store, n.nonce, tags=["best"], untag=["lr-sweep"], hidden=True)["tags"]
['baseline', 'best']
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
from collections.abc import Iterator
from typing import Any

import polars as pl

from theseus.errors import BadInput, TheseusError
from theseus.store import fs as rootfs
from theseus.store import layout, schema
from theseus.store.node import check_nonce

TAG = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$")
EVALUATE_JOB = "gpt/evaluate"  # its runs are listed only when asked, as hidden ones
ATTEMPTS = 8  # writes of one tag set before giving up on concurrent taggers that keep overwriting it


class Contended(TheseusError, RuntimeError):
    """Other processes kept rewriting a run's tags for every attempt: the outside world, not bad input nor a bug.

    >>> isinstance(Contended("run abcdef: other processes kept rewriting its tags"), RuntimeError)
    True
    """


def check_tag(tag: object) -> str:
    """A valid tag (1-64 letters, digits and ``_.-``, starting with a letter or digit), or a ValueError naming it.

    >>> check_tag("lr-sweep")
    'lr-sweep'
    >>> check_tag("a b")
    Traceback (most recent call last):
    ...
    theseus.errors.BadInput: invalid tag 'a b': tags are 1-64 letters, digits and '_.-', starting with a letter or digit
    """
    if not isinstance(tag, str) or not TAG.match(tag):
        raise BadInput(f"invalid tag {tag!r}: tags are 1-64 letters, digits and '_.-', "
                         "starting with a letter or digit")
    return tag


def tags_of(text: str | None) -> list[str]:
    """The tags of a ``_tags`` record (sorted; none for None or a record that is not a list of valid tags:
    a root copied from elsewhere is read, never trusted).

    >>> tags_of('["b", "a"]'), tags_of(None), tags_of("not json")
    (['a', 'b'], [], [])
    """
    try:
        found = json.loads(text) if text else []
    except ValueError:
        return []
    if not isinstance(found, list):
        return []
    return sorted({t for t in found if isinstance(t, str) and TAG.match(t)})


def marks_of(latest: dict[str, Any]) -> dict[str, Any]:
    """``{"tags", "note", "hidden"}`` of a run from its latest values (``{key: value}``).

    >>> marks_of({"_tags": '["x"]', "_hidden": True})
    {'tags': ['x'], 'note': None, 'hidden': True}
    """
    return {"tags": tags_of(latest.get(schema.TAGS)), "note": latest.get(schema.NOTE),
            "hidden": latest.get(schema.HIDDEN) is True}


def listed_by_default(hidden: bool | None, job: str | None) -> bool:
    """Whether ``theseus ls`` and the UI list a run unless asked for every run: not hidden, not an evaluation.

    >>> listed_by_default(None, "gpt/train/pretrain"), listed_by_default(True, None)
    (True, False)
    >>> listed_by_default(None, EVALUATE_JOB)
    False
    """
    return hidden is not True and job != EVALUATE_JOB


def without_hidden(runs: pl.DataFrame) -> pl.DataFrame:
    """``runs`` (`theseus.store.Store.runs`) less the hidden runs and the evaluation runs.

    >>> runs = pl.DataFrame({"nonce": ["a", "b", "c"], "_hidden": [None, True, False],
    ...                      "_job": ["x", "y", EVALUATE_JOB]})
    >>> without_hidden(runs)["nonce"].to_list()
    ['a']
    """
    keep = pl.lit(True)
    if schema.HIDDEN in runs.columns:
        keep &= ~pl.col(schema.HIDDEN).fill_null(False)
    if schema.JOB in runs.columns:
        keep &= pl.col(schema.JOB).ne_missing(EVALUATE_JOB)
    return runs.filter(keep)


def with_tag(runs: pl.DataFrame, tags: list[str]) -> pl.DataFrame:
    """``runs`` (`theseus.store.Store.runs`) tagged with every one of ``tags``.

    >>> runs = pl.DataFrame({"nonce": ["a", "b"], "_tags": ['["x", "y"]', None]})
    >>> with_tag(runs, ["x"])["nonce"].to_list(), with_tag(runs, ["x", "z"]).height
    (['a'], 0)
    """
    wanted = {check_tag(t) for t in tags}
    if not wanted:
        return runs
    if schema.TAGS not in runs.columns:
        return runs.clear()
    keep = [wanted <= set(tags_of(text)) for text in runs[schema.TAGS].to_list()]
    return runs.filter(pl.Series(keep, dtype=pl.Boolean))


def mark(store: Any, nonce: str, *, tags: list[str] = (), untag: list[str] = (), note: str | None = None,
         hidden: bool | None = None, name: str | None = None) -> dict[str, Any]:
    """Add ``tags``, remove ``untag``, set ``note`` and ``hidden`` (those given) on the run ``nonce`` of
    ``store`` (a `theseus.store.Store`; ``name`` picks one of runs sharing the nonce) and return its marks.

    No such run is a ``theseus.store.EmptyResult`` naming the nonce; nothing is written then.

    >>> from theseus.store.store import _doc_store
    >>> store, n = _doc_store()
    >>> mark(store, n.nonce, tags=["a"]) == mark(store, n.nonce, tags=["a"])  # twice is once
    True
    """
    check_nonce(nonce)
    tags, untag = [check_tag(t) for t in tags], [check_tag(t) for t in untag]
    if note is not None and not isinstance(note, str):
        raise TypeError(f"a note is text, got {note!r}")
    found = store.find().nonce(nonce)
    tip = (found if name is None else found.name(name)).last()  # no such run: EmptyResult, before any write
    with _run_turn(store, tip.name, nonce), store.writer() as writer:
        record = store.run_record(nonce, name=tip.name)  # read in our turn: no tagger writes meanwhile
        for _ in range(ATTEMPTS):
            now = tags_of(record.get(schema.TAGS))
            wanted = sorted((set(now) | set(tags)) - set(untag))
            changed = json.dumps(wanted) if wanted != now else None
            writer.marks(tip, tags=changed, note=note, hidden=hidden)
            note = hidden = None  # written: a retry only writes the tags again
            record = store.run_record(nonce, name=tip.name)
            found = set(tags_of(record.get(schema.TAGS)))
            if set(tags) <= found and not found & set(untag):
                break
        else:
            raise Contended(f"run {nonce}: other processes kept rewriting its tags; run the command again")
    return marks_of(record)


@contextlib.contextmanager
def _run_turn(store: Any, name: str, nonce: str) -> Iterator[None]:
    """Hold the turn to mark run ``name:nonce``: an exclusive lock on its log folder (local roots only;
    object stores have no lock, so there this holds nothing)."""
    if not rootfs.is_local(store.fs):
        yield
        return
    fd = os.open(store.path(layout.LOG, f"name={name}", f"nonce={nonce}"), os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # released when the descriptor closes
        yield
    finally:
        os.close(fd)


__all__ = ["EVALUATE_JOB", "Contended", "check_tag", "listed_by_default", "mark", "marks_of", "tags_of", "with_tag",
           "without_hidden"]
