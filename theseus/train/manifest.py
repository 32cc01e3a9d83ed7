"""Writing, reading and verifying the MANIFEST.json that seals an artifact folder.

A folder (local path or fsspec URL such as ``gs://bucket/prefix``) is complete
exactly when ``MANIFEST.json`` is present; its name and format are ``store/manifest.py``'s.
The manifest is written last and atomically (``store/fs.py``'s ``write_atomic``): locally
to a temporary name in the same folder, fsync'd, then renamed; on object stores with one
upload (an object is visible only when its upload completes). Only JSON is read back.

A reader opens a sealed folder as a `Sealed`: the manifest and the regular files present
(one listing), so a missing file, a link, a FIFO or a file of another size is refused before
anything reads it, and every file read is checked against its sha256 from the bytes read.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor

import fsspec

from theseus.errors import BadInput, CorruptData, MissingFile
from theseus.store.fs import (  # write_atomic: used by the examples
    NotPlainFile,
    check_regular,
    hash_file,
    join,
    read_bytes,
    read_regular,
    walk_files,
    write_atomic,
)
from theseus.store.manifest import MANIFEST, FileEntry, encode, parse

__all__ = ["MANIFEST", "DamagedFolder", "FileEntry", "Sealed", "read_manifest", "verify", "write_atomic",
           "write_manifest"]

#: the most entries (files and folders) one listing of a sealed folder looks at
_LISTING_LIMIT = 10**7


class DamagedFolder(CorruptData):
    """A file of a sealed folder is missing, not a regular file, or not the bytes its MANIFEST lists.

    >>> issubclass(DamagedFolder, ValueError)  # bad input to every command: one line, exit status 2
    True
    """


def write_manifest(folder: str, entries: Iterable[FileEntry]) -> None:
    """Seal ``folder``: write ``MANIFEST.json`` listing ``entries``, atomically, last.

    >>> import tempfile; d = tempfile.mkdtemp(); write_atomic(d + "/a", b"x")
    >>> write_manifest(d, [FileEntry.of_bytes("a", b"x")]); sorted(read_manifest(d))
    ['a']
    """
    try:
        raw = encode(entries)
    except ValueError as e:
        raise BadInput(f"manifest of {folder}: {e}") from None
    write_atomic(join(folder, MANIFEST), raw)


def read_manifest(folder: str) -> dict[str, FileEntry]:
    """The files listed by ``folder``'s manifest, by relative path.

    Raises MissingFile, a FileNotFoundError, ("incomplete checkpoint: no MANIFEST.json in ...") when
    the folder was never sealed (an interrupted save), CorruptData when the
    manifest is malformed, DamagedFolder when it is not a regular file.

    >>> import tempfile; read_manifest(tempfile.mkdtemp())  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    theseus.errors.MissingFile: incomplete checkpoint: no MANIFEST.json in ...
    """
    try:
        raw = read_bytes(join(folder, MANIFEST))
    except FileNotFoundError:
        raise MissingFile(f"incomplete checkpoint: no {MANIFEST} in {folder}") from None
    except NotPlainFile as e:  # a FIFO would block the read, a link may lead anywhere
        raise DamagedFolder(str(e)) from None
    try:
        return parse(raw)
    except ValueError as e:
        raise CorruptData(f"malformed {MANIFEST} in {folder}: {e}") from None


class Sealed:
    """A sealed folder opened for reading: its manifest (``listed``) and the regular files present (``present``,
    relative path -> size), each read or handed-in byte string checked against the manifest.

    >>> import tempfile; d = tempfile.mkdtemp(); write_atomic(d + "/a", b"x")
    >>> write_manifest(d, [FileEntry.of_bytes("a", b"x")])
    >>> Sealed(d).read("a")
    b'x'
    >>> Sealed(d).check_bytes("a", b"y")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    theseus.train.manifest.DamagedFolder: corrupt file .../a: sha256 a1fce436... != 2d711642... in MANIFEST.json
    """

    def __init__(self, folder: str):
        self.folder = folder.rstrip("/")
        self.listed = read_manifest(self.folder)
        self.fs, self.path = fsspec.core.url_to_fs(self.folder)
        self.present = dict(walk_files(self.fs, self.path, _LISTING_LIMIT)[0])

    def where(self, rel: str) -> str:
        """The location of ``rel`` in the folder.

        >>> import tempfile; d = tempfile.mkdtemp(); write_manifest(d, []); Sealed(d).where("a") == d + "/a"
        True
        """
        return join(self.folder, rel)

    def entry(self, rel: str) -> FileEntry:
        """``rel``'s manifest entry once the file is checked present, a regular file and of its size.

        >>> import tempfile; d = tempfile.mkdtemp(); write_manifest(d, [FileEntry.of_bytes("a", b"x")])
        >>> Sealed(d).entry("a")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        theseus.train.manifest.DamagedFolder: missing file .../a (listed in MANIFEST.json)
        """
        where = self.where(rel)
        listed = self.listed.get(rel)
        if listed is None:
            raise DamagedFolder(f"{where} is not listed in {MANIFEST}: not read")
        size = self.present.get(rel)
        if size is None:
            try:  # not listed as a regular file with one link: say what it is
                check_regular(self.fs, join(self.path, rel))
            except FileNotFoundError:
                raise DamagedFolder(f"missing file {where} (listed in {MANIFEST})") from None
            except NotPlainFile as e:
                raise DamagedFolder(str(e)) from None
            raise DamagedFolder(f"{where} has more than one hard link (one may be outside the root): not read")
        if size != listed.size:
            raise DamagedFolder(f"corrupt file {where}: size {size} != {listed.size} in {MANIFEST}")
        return listed

    def check_bytes(self, rel: str, data: bytes | memoryview) -> None:
        """DamagedFolder unless ``data`` (what was read of ``rel``) has the size and sha256 the manifest lists."""
        listed = self.listed.get(rel)
        if listed is None:
            raise DamagedFolder(f"{self.where(rel)} is not listed in {MANIFEST}: not read")
        size = memoryview(data).nbytes
        if size != listed.size:
            raise DamagedFolder(f"corrupt file {self.where(rel)}: read {size} bytes, {listed.size} in {MANIFEST}")
        digest = hashlib.sha256(data).hexdigest()
        if digest != listed.sha256:
            raise DamagedFolder(f"corrupt file {self.where(rel)}: sha256 {digest[:8]}... != {listed.sha256[:8]}... "
                                f"in {MANIFEST}")

    def read(self, rel: str, check: bool = True) -> bytes:
        """The bytes of ``rel``, a listed regular file; with ``check``, the sha256 of the bytes read too.

        >>> import tempfile; d = tempfile.mkdtemp(); write_manifest(d, [])
        >>> Sealed(d).read("job.json")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        theseus.train.manifest.DamagedFolder: .../job.json is not listed in MANIFEST.json: not read
        """
        self.entry(rel)
        try:
            data = read_regular(self.fs, join(self.path, rel))
        except FileNotFoundError:
            raise DamagedFolder(f"missing file {self.where(rel)} (listed in {MANIFEST})") from None
        except NotPlainFile as e:
            raise DamagedFolder(str(e)) from None
        if check:
            self.check_bytes(rel, data)
        return data

    def hash_file(self, rel: str) -> None:
        """Read ``rel`` and check it against the manifest (for the files a reader does not read whole itself).

        >>> import tempfile; d = tempfile.mkdtemp(); write_atomic(d + "/a", b"x")
        >>> write_manifest(d, [FileEntry.of_bytes("a", b"x")]); Sealed(d).hash_file("a")
        """
        listed = self.entry(rel)
        size, digest = hash_file(self.where(rel))
        if (size, digest) != (listed.size, listed.sha256):
            raise DamagedFolder(f"corrupt file {self.where(rel)}: sha256 {digest[:8]}... != {listed.sha256[:8]}... "
                                f"in {MANIFEST}")


def verify(folder: str, threads: int = 8) -> None:
    """Check every file listed in ``folder``'s manifest: a regular file, same size, same sha256.

    Raises DamagedFolder naming the first bad file (and how many more there are).

    >>> import tempfile; d = tempfile.mkdtemp(); write_atomic(d + "/a", b"x")
    >>> write_manifest(d, [FileEntry.of_bytes("a", b"x")]); verify(d)
    """
    sealed = Sealed(folder)

    def check(rel: str) -> str | None:
        try:
            sealed.hash_file(rel)
        except DamagedFolder as e:
            return str(e)
        return None

    with ThreadPoolExecutor(threads) as pool:
        problems = [p for p in pool.map(check, sorted(sealed.listed)) if p]
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise DamagedFolder(problems[0] + more)
