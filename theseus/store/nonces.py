"""A new lineage's nonce is unique in its root: claimed before the lineage's first record.

A nonce is 6 hex characters, so two lineages drawing the same one is a matter of
time (about 3% among 1,000 runs of a root); their records would then answer every
query by nonce as one run. So before a writer buffers its first record of a lineage
new to it, the root is asked who holds the nonce: its claims, one empty file per
lineage start under ``<root>/nonces/<nonce>/name=<name>/<writer>-<token>``, and the
runs of the log under it (roots written before claims, or by hand). The log and the
claims are the arbiter, as for a resume's claim (``theseus.store.claim``): no
conditional write is needed, so this works on any filesystem or object store.

A lineage is *fresh* when this process drew its nonce (``Node.start``, a job's new
lineage): then the nonce must be unused. A node built from a name and a nonce
(``Node(name, nonce, seq)``, ``Node.from_id``) names a lineage: its name may hold the
nonce already (it is continued), but no other name may. The writer

1. refuses (:class:`NonceTaken`, nothing written) when the nonce is held by another
   name, or at all for a fresh lineage; a named lineage its own name holds goes on (one
   with records even where another name shares the nonce: its nodes name it);
2. publishes its claim (an empty file: visible whole, never rewritten);
3. reads the claims again: another writer's claim of a fresh nonce, or another name's
   claim, makes it remove its own and refuse.

Of two claims, the one published second is read by its own writer together with
the first, so at most one of two concurrent starts goes on (both may refuse; a job
then draws again). A claim's file is the evidence until the lineage's first segment
is published, which the log shows from then on, so no fsync is needed; a claim that
cannot be published (a full or read-only disk) is left out, the check in step 1 standing,
and the writer keeps its records pending as it does for any segment it cannot publish.

>>> import tempfile
>>> from theseus.store import Node, Store
>>> store = Store(tempfile.mkdtemp())
>>> a = Node.start("doc-a")
>>> with store.writer() as w:
...     w.write(a, {"loss": 1.0})
>>> with store.writer() as w:
...     try:
...         w.write(Node("doc-b", a.nonce, 0), {"loss": 2.0})
...     except NonceTaken as e:
...         print("refused:", "general.default.doc-a" in str(e))
refused: True
"""

from __future__ import annotations

import os
import secrets

from theseus.errors import BadInput, Refused
from theseus.store import fs as rootfs
from theseus.store.index import Index
from theseus.store.layout import NONCES
from theseus.store.listing import partition_ok
from theseus.store.node import check_nonce, drew, normalize_name, take_drawn

__all__ = ["AmbiguousNonce", "NonceTaken", "begin", "claims", "holders", "one_name"]


class NonceTaken(Refused, ValueError):
    """A new lineage's nonce is already used in the root by another lineage; nothing was written.

    >>> issubclass(NonceTaken, ValueError)
    True
    """


class AmbiguousNonce(BadInput):
    """A nonce names several runs of the root (a collision): a reader that expects one run refuses it.

    >>> issubclass(AmbiguousNonce, ValueError)
    True
    """


def begin(index: Index, writer: str, name: str, nonce: str, fresh: bool | None = None) -> None:
    """Check, and claim when it is new to the root, the lineage ``name:nonce`` before ``writer``'s
    first record of it (the module doc's protocol); :class:`NonceTaken` when another lineage holds it.

    ``fresh`` None: fresh when this process drew the nonce (``Node.start``) and no writer claimed it
    yet; True: a new lineage whatever drew it (a job's first node).

    >>> import tempfile
    >>> index = Index(*rootfs.open_root(tempfile.mkdtemp()))
    >>> begin(index, "w1", "a.b.c", "949e88", fresh=True)
    >>> claims(index, "949e88")
    {'a.b.c': ['w1']}
    >>> begin(index, "w2", "a.b.c", "949e88")   # the same lineage, named: continued
    >>> try:
    ...     begin(index, "w3", "a.b.c", "949e88", fresh=True)
    ... except NonceTaken as e:
    ...     print("refused")
    refused
    """
    name, nonce = normalize_name(name), check_nonce(nonce)
    drawn = take_drawn(name, nonce)
    fresh = drawn if fresh is None else fresh
    try:
        _begin(index, writer, name, nonce, fresh)
    except BaseException:
        if drawn:  # refused (every later write of it is refused too) or not decided: still a new lineage
            drew(name, nonce)
        raise


def _begin(index: Index, writer: str, name: str, nonce: str, fresh: bool) -> None:
    held = holders(index, nonce)
    if not fresh and held.get(name) == "log":  # a run with records goes on, even where another shares its nonce
        return
    others = sorted(n for n in held if n != name)
    if others or (fresh and held):
        raise NonceTaken(_taken(index, name, nonce, others or [name], fresh))
    if held:  # this name holds the nonce: the lineage is continued
        return
    try:
        path = _publish(index, nonce, name, writer)
    except OSError:  # a full or read-only disk: the check stands, records stay pending as for any publish
        return
    found = claims(index, nonce)
    rivals = sorted(n for n, writers in found.items() if n != name or (fresh and set(writers) - {writer}))
    if rivals:
        _remove(index, path)
        raise NonceTaken(_taken(index, name, nonce, rivals, fresh, " at the same moment"))


def _taken(index: Index, name: str, nonce: str, others: list[str], fresh: bool, when: str = "") -> str:
    held = ", ".join(others)
    what = "a new lineage" if fresh else "lineage"
    return (f"nonce {nonce!r} is already used in {index.url()} by run {held}{when}: {what} {name}:{nonce} "
            "would be merged with it, so nothing was written; Node.start(name) draws another nonce "
            "(a job draws again by itself)")


def holders(index: Index, nonce: str) -> dict[str, str]:
    """``{name: how}`` of every run holding ``nonce`` in the root: ``"log"`` (it has records) or
    ``"claim"`` (a claim, no records yet).

    >>> from theseus.store.store import _doc_store
    >>> store, n = _doc_store()
    >>> holders(store._index, n.nonce) == {n.name: "log"}
    True
    """
    found = dict.fromkeys(claims(index, nonce), "claim")
    found.update(dict.fromkeys(logged(index, nonce), "log"))
    return found


def logged(index: Index, nonce: str) -> list[str]:
    """The names of the runs with records under ``nonce`` (one listing), sorted.

    >>> from theseus.store.store import _doc_store
    >>> store, n = _doc_store()
    >>> logged(store._index, n.nonce) == [n.name]
    True
    """
    try:
        runs = index.runs("*", check_nonce(nonce))
    except FileNotFoundError:  # no root, or no log yet
        return []
    return sorted({run_name for run_name, _ in runs})


def one_name(index: Index, nonce: str) -> str | None:
    """The name of the run with records under ``nonce`` (None for none); :class:`AmbiguousNonce`
    naming them when several names share it.

    >>> from theseus.store.store import _doc_store
    >>> store, n = _doc_store()
    >>> one_name(store._index, n.nonce) == n.name, one_name(store._index, "000000")
    (True, None)
    """
    names = logged(index, nonce)
    if len(names) > 1:
        raise AmbiguousNonce(ambiguous(nonce, names))
    return names[0] if names else None


def ambiguous(nonce: str, names: list[str]) -> str:
    """The message of an :class:`AmbiguousNonce`.

    >>> ambiguous("949e88", ["a.b.c", "a.b.d"])[:43]
    "nonce '949e88' names 2 runs: a.b.c, a.b.d ("
    """
    return (f"nonce {nonce!r} names {len(names)} runs: {', '.join(names)} (a nonce collision, see `theseus audit`); "
            "pass a node id of the run you mean, or its name with the nonce (find().name(NAME).nonce(NONCE), "
            "run_record(NONCE, name=NAME))")


def claims(index: Index, nonce: str) -> dict[str, list[str]]:
    """``{name: [writer, ...]}`` of the claims of ``nonce`` in the root (names sorted).

    >>> import tempfile
    >>> claims(Index(*rootfs.open_root(tempfile.mkdtemp())), "949e88")
    {}
    """
    folder = index.path(NONCES, check_nonce(nonce))
    if rootfs.is_local(index.fs):
        found = [(entry, claim) for entry in _listdir(folder) for claim in _listdir(f"{folder}/{entry}")]
    else:
        try:
            paths = index.fs.find(folder)
        except FileNotFoundError:
            paths = []
        found = [tuple(p[len(folder) + 1:].split("/")) for p in paths if p.startswith(folder + "/")]
    out: dict[str, list[str]] = {}
    for parts in found:
        if len(parts) == 2 and partition_ok("name=", parts[0]) and not parts[1].startswith("."):
            out.setdefault(parts[0][len("name="):], []).append(parts[1].rsplit("-", 1)[0])
        elif parts and not parts[-1].startswith("."):  # not a claim writers make: it holds the nonce for no name
            out.setdefault("(unknown)", []).append("/".join(parts))
    return {n: sorted(w) for n, w in sorted(out.items())}


def _listdir(folder: str) -> list[str]:
    try:
        return os.listdir(folder)
    except (FileNotFoundError, NotADirectoryError):
        return []


def _publish(index: Index, nonce: str, name: str, writer: str) -> str:
    """Publish ``writer``'s claim of ``name:nonce``: an empty file, whole as soon as it exists."""
    path = index.path(NONCES, nonce, f"name={name}", f"{writer}-{secrets.token_hex(4)}")
    if rootfs.is_local(index.fs):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
    else:
        index.fs.pipe_file(path, b"")
    return path


def _remove(index: Index, path: str) -> None:
    """Withdraw a refused claim (the nonce stays held by the rival's)."""
    try:
        if rootfs.is_local(index.fs):
            os.unlink(path)
        else:
            index.fs.rm_file(path)
    except FileNotFoundError:
        pass

