"""Finding a root's segments: the log's ``name=``/``nonce=`` folders listed, listings reused while
folder ctimes prove them current, and the one rule for a read that finds a listed segment gone.

Segments are found by listing ``log/name=*/nonce=*/`` on every query. On local
filesystems whose folder ctimes move with every entry added or removed (ext4, xfs,
btrfs, tmpfs...; ``theseus.store.mounts``), :class:`Listings` reuses a folder's listing while its
ctime is unchanged (one ``stat`` instead of a listing), and a view records the ctimes of the
folders it saw (:func:`record_listings`) for Stores that have listed nothing yet.
"""

from __future__ import annotations

import fnmatch
import os
import re
import time
from collections.abc import Iterator, Mapping
from typing import Callable, TypeVar

import fsspec

from theseus.store import fs as rootfs
from theseus.store.layout import LOG
from theseus.store.mounts import ctime_proves_listings
from theseus.store.node import FULL_NAME_PATTERN, NONCE_PATTERN


def run_dir(root: str, name: str, nonce: str) -> str:
    """The folder of one run's segments.

    >>> run_dir("/r", "a.b.c", "949e88")
    '/r/log/name=a.b.c/nonce=949e88'
    """
    return f"{root}/{LOG}/name={name}/nonce={nonce}"


def list_segments(fs: fsspec.AbstractFileSystem, root: str, name: str = "*", nonce: str = "*",
                  listings: Listings | None = None) -> list[str]:
    """Published segment paths under ``root`` for a name/nonce glob (temporaries never match).

    >>> fs, root = rootfs.open_root("/tmp/theseus-empty-doc")
    >>> list_segments(fs, root)
    []
    """
    return sorted(p for paths in list_runs(fs, root, name, nonce, listings).values() for p in paths)


def list_runs(fs: fsspec.AbstractFileSystem, root: str, name: str = "*", nonce: str = "*",
              listings: Listings | None = None) -> dict[tuple[str, str], list[str]]:
    """Published segments by run, ``{(name, nonce): [path, ...]}``, runs and paths sorted.

    ``listings`` (local roots) reuses folder listings its ctime check proves current.

    >>> fs, root = rootfs.open_root("/tmp/theseus-empty-doc")
    >>> list_runs(fs, root)
    {}
    """
    if not rootfs.is_local(fs):
        try:
            found = fs.glob(f"{root}/{LOG}/name={name}/nonce={nonce}/*.parquet")
        except FileNotFoundError:
            return {}
        return by_run([p for p in found if not os.path.basename(p).startswith(".")
                       and partition_ok("name=", p.split("/")[-3]) and partition_ok("nonce=", p.split("/")[-2])])
    listings = listings or Listings(None)
    now = time.time_ns()  # before any folder is stat'ed
    log = f"{root}/{LOG}"
    runs = {}
    literal = not is_glob(nonce)
    access, exists, probe = os.access, os.F_OK, f"nonce={nonce}"
    for name_dir in _matching(listings, now, log, "name=", name, not is_glob(name)):
        base = f"{log}/{name_dir}/"
        if literal:  # one nonce: probe each name's folder for it (the common point query)
            nonce_dirs = [probe] if access(base + probe, exists) else []
        else:
            nonce_dirs = _matching(listings, now, base[:-1], "nonce=", nonce, False)
        for nonce_dir in nonce_dirs:
            files = listings.get(base + nonce_dir, _published, now)
            if files:
                runs[(name_dir[5:], nonce_dir[6:])] = list(files)
    return runs


def _published(folder: str, names: list[str]) -> tuple[str, ...]:
    """The segment paths among a run folder's entries, sorted (temporaries never match)."""
    return tuple(f"{folder}/{f}" for f in sorted(names) if f[0] != "." and f.endswith(".parquet"))


def is_glob(pattern: str) -> bool:
    """True when a name or nonce pattern matches more than itself.

    >>> is_glob("a.b.*"), is_glob("949e88")
    (True, False)
    """
    return any(c in pattern for c in "*?[")


def _matching(listings: Listings, now: int, folder: str, prefix: str, glob: str, literal: bool) -> list[str]:
    """Entries ``prefix + value`` of ``folder`` whose value matches ``glob``, sorted."""
    if literal:
        return [prefix + glob] if os.access(f"{folder}/{prefix}{glob}", os.F_OK) else []
    entries = listings.get(folder, _prefixed[prefix], now)
    if glob == "*":
        return entries
    return [e for e in entries if fnmatch.fnmatchcase(e[len(prefix):], glob)]


def partition_ok(prefix: str, entry: str) -> bool:
    """True for a ``name=<full run name>`` or ``nonce=<nonce>`` folder, as writers make them; readers
    skip any other folder of the log (no run can have its records), and ``theseus audit`` reports it.

    >>> partition_ok("name=", "name=a.b.c"), partition_ok("name=", "name="), partition_ok("nonce=", "nonce=../x")
    (True, False, False)
    """
    return _PARTITIONS[prefix].fullmatch(entry) is not None


_PARTITIONS = {"name=": re.compile(f"name={FULL_NAME_PATTERN}"), "nonce=": re.compile(f"nonce={NONCE_PATTERN}")}
_prefixed = {p: (lambda folder, names, match=_PARTITIONS[p].fullmatch: tuple(sorted([e for e in names if match(e)])))
             for p in ("name=", "nonce=")}
LISTING_MARGIN_NS = 1_000_000_000  # a ctime proves a listing only when older than this at listing time


class Listings:
    """Folder listings of a local root, reused while the folder's ctime proves them current.

    A folder's ctime is set by the kernel whenever an entry is added, removed or renamed
    (and by ``utime``/``chmod``); no call sets it to a chosen value (``rsync -a`` and
    ``touch -d`` set mtime, and bump ctime to now; a folder made anew gets a new one). So a
    listing stays current exactly as long as the folder's ctime is unchanged, provided later
    changes cannot get the same ctime: the folder is stat'ed *before* it is listed, and the
    listing is kept only
    when that ctime was already ``LISTING_MARGIN_NS`` older than the clock then (kernel
    timestamps come from a coarse clock, a few ms behind; a change after the stat gets a
    later one). Folders changed in the last second are listed on every call. ``seed``
    (``{folder: (ctime, prepare, value)}`` from the view's record of the folders it saw,
    same rule; see :class:`RecordedListings`) answers for folders not listed yet.
    Only on filesystems in ``CTIME_FILESYSTEMS``; elsewhere (or with ``root`` None) every
    call lists.

    >>> import tempfile
    >>> root = tempfile.mkdtemp()
    >>> listings = Listings(root)
    >>> open(f"{root}/a", "w").close()
    >>> listings.get(root, lambda folder, names: sorted(names))
    ['a']
    >>> open(f"{root}/b", "w").close()  # a change within the second is seen
    >>> listings.get(root, lambda folder, names: sorted(names))
    ['a', 'b']
    """

    def __init__(self, root: str | None):
        self.root = root
        self.seed = None  # a callable returning {folder: (ctime, prepare, value)}, merged on first use
        self._enabled: bool | None = None if root is not None else False
        self._known: dict[str, tuple[int, object, object]] = {}  # folder -> (ctime, prepare, value)

    @property
    def enabled(self) -> bool:
        """Whether ctimes prove listings here (decided once the root exists)."""
        if self._enabled is None:
            self._enabled = ctime_proves_listings(self.root)
        return bool(self._enabled)

    def listed(self, folder: str, prepare, ctime: int):
        """``prepare``'s value of the folder's listing when one was kept at ``ctime`` (else None).

        >>> import tempfile
        >>> root = tempfile.mkdtemp()
        >>> Listings(root).listed(root, sorted, 0) is None
        True
        """
        known = self._known.get(folder)
        return known[2] if known is not None and known[0] == ctime and known[1] is prepare else None

    def get(self, folder: str, prepare, now: int | None = None):
        """``prepare(folder, names)`` of the folder's entries (an empty list for a missing folder).

        ``now``: ``time.time_ns()`` taken before this call (default: now).
        """
        if not (self._enabled or self.enabled):
            return prepare(folder, _scandir(folder))
        now = time.time_ns() if now is None else now
        try:
            ctime = os.stat(folder).st_ctime_ns
        except (FileNotFoundError, NotADirectoryError):
            return prepare(folder, [])
        known = self._known.get(folder)
        if known is None and self.seed is not None:
            seed, self.seed = self.seed, None
            for path, entry in seed().items():
                self._known.setdefault(path, entry)
            known = self._known.get(folder)
        if known is not None and known[0] == ctime and known[1] is prepare:
            return known[2]
        value = prepare(folder, _scandir(folder))
        if ctime < now - LISTING_MARGIN_NS:
            self._known[folder] = (ctime, prepare, value)
        else:
            self._known.pop(folder, None)
        return value


def record_listings(listings: Listings, root: str, runs: dict[tuple[str, str], list[str]],
                    own: list[tuple[str, str]]) -> dict | None:
    """The ctimes that prove the log folders list exactly ``runs`` (for a view's footer): of the
    log folder, of every run's name folder, and of the run folders of ``own`` (the view's runs).

    ``{"log": ctime, "names": {name: ctime}, "runs": [ctime per run of own]}``, each None where
    the folder lists something else or changed within ``LISTING_MARGIN_NS``; None when
    ctimes prove nothing on this filesystem. :class:`RecordedListings` answers from it. A folder
    whose ctime is that of a listing ``listings`` holds is not listed again.
    """
    if not listings.enabled:
        return None
    now = time.time_ns()  # before any stat
    log = f"{root}/{LOG}"
    nonces: dict[str, list[str]] = {}
    for name, nonce in runs:
        nonces.setdefault(name, []).append(nonce)

    def proven(folder: str, prepare, expected) -> int | None:
        try:
            ctime = os.stat(folder).st_ctime_ns
        except OSError:
            return None
        if ctime >= now - LISTING_MARGIN_NS:
            return None
        found = listings.listed(folder, prepare, ctime)
        return ctime if (found if found is not None else prepare(folder, _scandir(folder))) == expected else None

    return {
        "log": proven(log, _prefixed["name="], tuple(sorted(f"name={n}" for n in nonces))),
        "names": {n: proven(f"{log}/name={n}", _prefixed["nonce="], tuple(sorted(f"nonce={x}" for x in v)))
                  for n, v in nonces.items()},
        "runs": [proven(run_dir(root, *run), _published, tuple(runs[run])) for run in own],
    }


def recorded_runs(listings: Listings, root: str, record: dict | None, runs: list[tuple[str, str]],
                  segments: list[list[str]], name: str = "*",
                  nonce: str = "*") -> RecordedRuns | None:
    """What :func:`list_runs` returns for ``name``/``nonce``, taken from a view's record of the
    log folders (:func:`record_listings`; ``runs`` and ``segments``: the view's runs by number
    and their segment file names) when one stat per folder proves the record still holds: the
    log folder, each matching name's folder and each matching run's folder have the ctimes
    recorded. None when one does not (a folder changed, or was not proven when recorded) or
    ctimes prove nothing here: then list. One pass of stats, none of the per-folder caching
    of :class:`Listings`: a query over a compacted root of 1,000 runs is mostly these stats.

    >>> import tempfile
    >>> recorded_runs(Listings(tempfile.mkdtemp()), "/r", None, [], [])  # no record: list
    """
    if record is None or record["log"] is None or not listings.enabled:
        return None
    log, stat, names, ctimes = f"{root}/{LOG}", os.stat, record["names"], record["runs"]
    every_name, every_nonce = name == "*", nonce == "*"
    found, last, wanted = {}, None, False
    try:
        if stat(log).st_ctime_ns != record["log"]:  # a name was added or removed
            return None
        for number, (run_name, run_nonce) in enumerate(runs):
            if run_name != last:  # runs are sorted by name: each name's folder is stat'ed once
                last, wanted = run_name, every_name or fnmatch.fnmatchcase(run_name, name)
                if wanted and (names.get(run_name) is None
                               or stat(f"{log}/name={run_name}").st_ctime_ns != names[run_name]):
                    return None  # a nonce was added or removed under this name
            if not wanted or not (every_nonce or fnmatch.fnmatchcase(run_nonce, nonce)):
                continue
            if ctimes[number] is None or stat(f"{log}/name={run_name}/nonce={run_nonce}").st_ctime_ns != ctimes[number]:
                return None  # a segment was added or removed in this run
            found[(run_name, run_nonce)] = number
    except OSError:
        return None
    return RecordedRuns(root, found, segments)


class RecordedRuns(Mapping):
    """:func:`recorded_runs`' answer, ``{(name, nonce): [segment path, ...]}``: a run's paths are
    spelled when asked for, since a query the view answers reads none of them.

    >>> runs = RecordedRuns("/r", {("a", "1"): 0}, [["s-1.parquet"]])
    >>> dict(runs)
    {('a', '1'): ['/r/log/name=a/nonce=1/s-1.parquet']}
    """

    def __init__(self, root: str, numbers: dict[tuple[str, str], int], segments: list[list[str]]):
        self._root, self._numbers, self._segments = root, numbers, segments

    def __getitem__(self, run: tuple[str, str]) -> list[str]:
        folder = run_dir(self._root, *run)
        return [f"{folder}/{f}" for f in self._segments[self._numbers[run]]]

    def __iter__(self) -> Iterator[tuple[str, str]]:
        return iter(self._numbers)

    def __len__(self) -> int:
        return len(self._numbers)

    def __contains__(self, run: object) -> bool:
        return run in self._numbers


class RecordedListings:
    """A :class:`Listings` seed from :func:`record_listings`' record: called, it returns
    ``{folder: (ctime, prepare, value)}`` for each log folder as recorded, for the caller
    to trust only while the folder's ctime is unchanged.

    ``runs`` maps each recorded run to its number, ``segments`` (per number) its file names.
    """

    def __init__(self, root: str, record: dict, runs: dict[tuple[str, str], int], segments: list[list[str]]):
        self.root, self.record, self.runs, self.segments = root, record, runs, segments

    def __call__(self) -> dict[str, tuple[int, object, tuple[str, ...]]]:
        log, record, table = f"{self.root}/{LOG}", self.record, {}
        by_name: dict[str, list[str]] = {}
        for (name, nonce), number in self.runs.items():
            by_name.setdefault(name, []).append(f"nonce={nonce}")
            ctime = record["runs"][number]
            if ctime is not None:
                folder = f"{log}/name={name}/nonce={nonce}"
                table[folder] = (ctime, _published, tuple([f"{folder}/{f}" for f in self.segments[number]]))
        for name, nonces in by_name.items():
            ctime = record["names"].get(name)
            if ctime is not None:
                table[f"{log}/name={name}"] = (ctime, _prefixed["nonce="], tuple(sorted(nonces)))
        if record["log"] is not None:
            table[log] = (record["log"], _prefixed["name="], tuple(sorted([f"name={n}" for n in by_name])))
        return table


def _scandir(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except (FileNotFoundError, NotADirectoryError):
        return []


def partition_of(path: str) -> tuple[str, str]:
    """``(name, nonce)`` of a segment path.

    >>> partition_of("/r/log/name=a.b.c/nonce=949e88/s-1.parquet")
    ('a.b.c', '949e88')
    """
    parts = path.rstrip("/").split("/")
    return parts[-3].removeprefix("name="), parts[-2].removeprefix("nonce=")


def by_run(paths: list[str]) -> dict[tuple[str, str], list[str]]:
    """Segment paths grouped by run, ``{(name, nonce): [path, ...]}`` (sorted).

    >>> by_run(["/r/log/name=a.b.c/nonce=949e88/s-2.parquet", "/r/log/name=a.b.c/nonce=949e88/s-1.parquet"])
    {('a.b.c', '949e88'): ['/r/log/name=a.b.c/nonce=949e88/s-1.parquet', '/r/log/name=a.b.c/nonce=949e88/s-2.parquet']}
    """
    runs: dict[tuple[str, str], list[str]] = {}
    for path in sorted(paths):
        runs.setdefault(partition_of(path), []).append(path)
    return dict(sorted(runs.items()))


VANISHED_RETRIES = 30  # fresh listings tried when compactions keep retiring segments mid-read
T = TypeVar("T")


def vanished(error: BaseException) -> bool:
    """True when ``error`` says a listed file is gone (retired by a compaction), not that one is bad:
    a ``FileNotFoundError``, what Polars, PyArrow, fsspec and the OS raise for a missing file, local
    or on an object store. Told by the type alone: an error that merely mentions a missing file in
    its message (a damaged segment's) is not a vanished one, and is never retried.

    >>> from theseus.store.segments import CorruptSegment
    >>> vanished(FileNotFoundError("s-1.parquet")), vanished(CorruptSegment("s-1.parquet: truncated"))
    (True, False)
    >>> vanished(OSError("parquet: no such file in the footer's list"))
    False
    """
    return isinstance(error, FileNotFoundError)


def retry_vanished(read: Callable[[], T]) -> T:
    """``read()``, called again while it fails because a segment it listed has vanished.

    The one rule for every reader that lists segments and then reads them: a concurrent
    compaction publishes the merged segment before it retires the old ones, so ``read``
    (which must list afresh on each call) finds every record on a later try.

    >>> tries = []
    >>> def read():
    ...     tries.append(1)
    ...     if len(tries) < 3:
    ...         raise FileNotFoundError("log/name=a/nonce=b/s-1.parquet")
    ...     return len(tries)
    >>> retry_vanished(read)
    3
    """
    for attempt in range(VANISHED_RETRIES):
        try:
            return read()
        except Exception as e:
            if not vanished(e) or attempt == VANISHED_RETRIES - 1:
                raise
            time.sleep(0.002 * attempt)  # a compaction between listing and read: let it finish
    raise AssertionError("unreachable")
