"""The index of one root: the caches every read of it shares.

A :class:`Index` owns what a Store learns about its root as it reads: the segment
footers (segments are immutable, so a footer never goes stale), the folder listings
their ctimes prove current, the newest view parsed, and the views found unreadable
(ignored until a compaction replaces them). The Store holds one and passes it to the
modules that read the root (``scope``, ``cursor``, ``writer``, ``compact``,
``build``), so that they depend on these caches and not on the Store.
"""

from __future__ import annotations

from collections.abc import Mapping

import fsspec
from loguru import logger

from theseus.store import fs as rootfs
from theseus.store.footers import FooterCache
from theseus.store.listing import Listings, RecordedListings, list_runs, list_segments, recorded_runs
from theseus.store.segments import CorruptSegment
from theseus.store.view_file import View, list_views, read_view
from theseus.store.view_files import Views


class Index:
    """The caches of the reads of one root (``root``: its path on ``fs``, without protocol).

    >>> import tempfile
    >>> index = Index(*rootfs.open_root(tempfile.mkdtemp()))
    >>> index.runs(), index.view()
    ({}, None)
    """

    def __init__(self, fs: fsspec.AbstractFileSystem, root: str):
        self.fs, self.root = fs, root
        self.footers = FooterCache(fs)
        self.listings = Listings(root if rootfs.is_local(fs) else None)  # folder listings their ctime proves
        self._views: dict[str, View] = {}  # the live view files parsed, by path (views are immutable)
        self._composite: tuple[tuple[str, ...], Views] | None = None  # the live views read as one
        self._ignored: set[str] = set()  # views that cannot be read: replaced by the next compaction
        self.summaries: dict[tuple[str, ...], object] = {}  # run summaries by segment list (summary.summarize)
        self._exists = False  # the root was seen to exist (reads of a missing root raise; writes create it)

    def path(self, *parts: str) -> str:
        """A path under the root (without protocol), for ``fs``.

        >>> Index(*rootfs.open_root("/tmp/r")).path("log", "x")
        '/tmp/r/log/x'
        """
        return "/".join([self.root, *parts]) if parts else self.root

    def url(self, *parts: str) -> str:
        """Like :meth:`path` but with the protocol, for other libraries.

        >>> Index(*rootfs.open_root("/tmp/r")).url("objects")
        '/tmp/r/objects'
        """
        return rootfs.url(self.fs, self.path(*parts))

    def require_root(self) -> None:
        """Raise MissingFile (a FileNotFoundError) naming the root when it does not exist (checked until it does).

        >>> Index(*rootfs.open_root("/no/such/theseus-root")).require_root()
        Traceback (most recent call last):
        theseus.errors.MissingFile: ...
        """
        if not self._exists:
            rootfs.require_root(self.fs, self.root)
            self._exists = True

    def segments(self, name: str = "*", nonce: str = "*") -> list[str]:
        """Published segment paths of the runs matching ``name`` and ``nonce`` (globs), sorted.

        >>> from theseus.store.store import _doc_store
        >>> store, n = _doc_store()
        >>> [p.rsplit("/", 2)[1] for p in Index(store.fs, store.path()).segments()] == [f"nonce={n.nonce}"]
        True
        """
        return list_segments(self.fs, self.root, name, nonce, self.listings)

    def runs(self, name: str = "*", nonce: str = "*") -> dict[tuple[str, str], list[str]]:
        """Published segments by run, ``{(name, nonce): [path, ...]}``, runs and paths sorted.

        >>> from theseus.store.store import _doc_store
        >>> store, n = _doc_store()
        >>> list(Index(store.fs, store.path()).runs("*", n.nonce)) == [(n.name, n.nonce)]
        True
        """
        return list_runs(self.fs, self.root, name, nonce, self.listings)

    def recorded_runs(self, view: Views | None, name: str = "*",
                      nonce: str = "*") -> Mapping[tuple[str, str], list[str]] | None:
        """:meth:`runs`, answered from the view's record of the log folders when their ctimes
        prove it still holds (None: list them).

        >>> Index(*rootfs.open_root("/tmp/r")).recorded_runs(None) is None  # no view: list
        True
        """
        if view is None:
            return None
        return recorded_runs(self.listings, self.root, view.listing, view.names, view.segments, name, nonce)

    def view(self) -> Views | None:
        """The live views, parsed and read as one (None when there is none or none can be read).

        >>> from theseus.store.store import _doc_store
        >>> store, n = _doc_store()
        >>> _ = store.compact()
        >>> list(Index(store.fs, store.path()).view().runs) == [(n.name, n.nonce)]
        True
        """
        paths = [p for p in list_views(self) if p not in self._ignored]
        parsed = {}
        for path in paths:
            view = self._views.get(path)
            if view is None:
                try:
                    view = read_view(self, path)
                except FileNotFoundError:
                    continue  # merged into a newer view meanwhile
                except CorruptSegment as e:
                    self.ignore_view(path, e)
                    continue
            parsed[path] = view
        self._views = parsed  # files no longer listed are retired: forget them
        if not parsed:
            return None
        key = tuple(parsed)
        if self._composite is None or self._composite[0] != key:
            views = Views.of(list(parsed.values()))
            self._composite = (key, views)
            if views.listing is not None:  # the folders it saw, for listings their ctime proves unchanged
                self.listings.seed = RecordedListings(self.root, views.listing, views.runs, views.segments)
        return self._composite[1]

    def ignore_view(self, path: str, error: Exception) -> None:
        """Stop reading the view ``path`` (it cannot be read), with a logged warning: queries fold
        the log, which holds every record the view does, and the next compaction replaces it.

        >>> index = Index(*rootfs.open_root("/tmp/r"))
        >>> index.ignore_view("/tmp/r/view/v-1-ab.parquet", ValueError("bad page"))
        >>> index.ignores("/tmp/r/view/v-1-ab.parquet")
        True
        """
        if path not in self._ignored:
            self._ignored.add(path)
            self._views.pop(path, None)
            text = str(error).splitlines()[0] if str(error) else type(error).__name__
            where = "" if path in text else f"{self.url(path[len(self.root) + 1:])}: "  # a CorruptSegment names it
            logger.warning(f"ignoring an unreadable view: {where}{text}; queries read the log instead, "
                           "and `theseus compact` replaces the view")

    def ignores(self, path: str) -> bool:
        """Whether the view ``path`` was found unreadable (a compaction retires it).

        >>> Index(*rootfs.open_root("/tmp/r")).ignores("/tmp/r/view/v-1-ab.parquet")
        False
        """
        return path in self._ignored
