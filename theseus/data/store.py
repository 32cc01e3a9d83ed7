"""Tokenized datasets on disk: ``<root>/data/<dataset>/``.

A dataset folder holds NumPy ``.npy`` arrays and a ``meta.json``:

- contiguous: ``train.npy``, ``val.npy``: uint32 token streams (documents joined by eot);
- padded: ``train.npy``, ``val.npy``: uint32 ``[rows, block_size]``, plus
  ``train_mask.npy``, ``val_mask.npy``: bool loss masks of the same shape;
  a packed one (several conversations per row) also ``train_segments.npy``,
  ``val_segments.npy``: int32 segment ids (0 padding, 1.. per conversation).

A dataset exists exactly when its ``meta.json`` exists; ``meta.json`` is written
last. ``DatasetWriter`` streams arrays into a hidden staging folder
(``<root>/data/.<dataset>.tmp-<random>/``; for a remote root, a local temporary
folder) and publishes on success: locally by renaming the folder into place, on
an object store by uploading the arrays, then ``meta.json``. On any error the
staging folder is removed and nothing becomes visible. Only JSON and ``.npy``
are ever read back (no pickles).
"""

from __future__ import annotations

import datetime
import difflib
import hashlib
import json
import os
import re
import shutil
import tempfile
import uuid

import numpy as np

from theseus.errors import AlreadyExists, BadInput, NotFound
from theseus.store import fs as rootfs
from theseus.store.layout import DATA

META = "meta.json"
FORMAT = "theseus.dataset/1"
KINDS = ("contiguous", "padded")
SPLITS = ("train", "val")
TOKEN_DTYPE = np.dtype("<u4")
MASK_DTYPE = np.dtype("|b1")
SEGMENT_DTYPE = np.dtype("<i4")
HEADER_BYTES = 128  # fixed .npy header size, so the shape can be rewritten in place at the end
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._=+-]*$")
_BLOCK = 16 << 20


class DatasetNotFound(NotFound, FileNotFoundError):
    """A tokenized dataset that is not (or not completely) under ``<root>/data``."""


def check_name(dataset: str) -> str:
    """``dataset`` if it is a valid folder name (letters, digits, ``._=+-``, not hidden).

    >>> check_name("fineweb")
    'fineweb'
    """
    if not isinstance(dataset, str) or not _NAME.match(dataset):
        raise BadInput(f"invalid dataset name {dataset!r}: use letters, digits and ._=+- (not starting with . or -)")
    return dataset


def data_dir(root: str) -> str:
    """The folder (path or URL) holding the datasets of ``root``.

    >>> data_dir("/tmp/root"), data_dir("gs://bucket/prefix")
    ('/tmp/root/data', 'gs://bucket/prefix/data')
    """
    return f"{os.fspath(root).rstrip('/')}/{DATA}"


def _npy_header(dtype: np.dtype, shape: tuple) -> bytes:
    header = {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False, "shape": tuple(shape)}
    text = repr(header).encode("latin1")
    pad = HEADER_BYTES - 10 - len(text) - 1
    if pad < 0:
        raise BadInput(f"shape {shape} too large for the .npy header")
    return b"\x93NUMPY\x01\x00" + (HEADER_BYTES - 10).to_bytes(2, "little") + text + b" " * pad + b"\n"


class NpyAppender:
    """A ``.npy`` file written in chunks along axis 0: memory stays bounded by one chunk.

    >>> import tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "a.npy")
    >>> w = NpyAppender(path, np.uint32); w.append(np.arange(3)); w.append(np.arange(2)); _ = w.close()
    >>> np.load(path).tolist()
    [0, 1, 2, 0, 1]
    """

    def __init__(self, path: str, dtype, row_shape: tuple = ()):
        self.path, self.dtype, self.row_shape = path, np.dtype(dtype), tuple(row_shape)
        self.rows = 0
        self.sha256 = hashlib.sha256()
        self.file = open(path, "wb")
        self.file.write(_npy_header(self.dtype, (0, *self.row_shape)))

    def append(self, array) -> None:
        """Append ``array`` (shape ``[n, *row_shape]``, cast to the file's dtype)."""
        array = np.ascontiguousarray(array, dtype=self.dtype)
        if array.shape[1:] != self.row_shape:
            raise BadInput(f"{os.path.basename(self.path)}: rows of shape {self.row_shape} expected, "
                             f"got {array.shape[1:]}")
        data = memoryview(array).cast("B")
        self.sha256.update(data)
        self.file.write(data)
        self.rows += array.shape[0]

    def close(self) -> dict:
        """Write the final header, fsync, close; return ``{"shape", "sha256"}``."""
        self.file.seek(0)
        self.file.write(_npy_header(self.dtype, (self.rows, *self.row_shape)))
        self.file.flush()
        os.fsync(self.file.fileno())
        self.file.close()
        return {"shape": [self.rows, *self.row_shape], "sha256": self.sha256.hexdigest()}

    def discard(self) -> None:
        """Close without finishing (the caller removes the file)."""
        self.file.close()


class DatasetWriter:
    """Writes one dataset into a staging folder and publishes it whole on ``commit()``.

    Use it as a context manager: a clean exit commits, an exception removes
    everything written. An existing dataset raises ``FileExistsError`` at
    construction unless ``overwrite=True``.

    >>> import tempfile
    >>> root = tempfile.mkdtemp()
    >>> with DatasetWriter(root, "toy", "contiguous") as w:
    ...     w.append("train", np.arange(10)); w.append("val", np.arange(3))
    >>> open_dataset(root, "toy").tokens("train").tolist()
    [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]
    """

    def __init__(self, root: str, dataset: str, kind: str, overwrite: bool = False, source: str = ""):
        if kind not in KINDS:
            raise BadInput(f"unknown dataset kind {kind!r}; valid kinds: {', '.join(KINDS)}")
        self.root, self.dataset, self.kind = os.fspath(root), check_name(dataset), kind
        self.overwrite = overwrite
        self.fs, base = rootfs.open_root(self.root)
        self.local = rootfs.is_local(self.fs)
        self.final = f"{base}/{DATA}/{dataset}"
        self._check_free()
        self.meta: dict = {"source": source}
        self.tokenizer: dict | None = None
        self.block_size: int | None = None
        self.packed: bool | None = None  # set by the first append of a padded dataset
        self.files: dict[str, NpyAppender] = {}
        if self.local:
            os.makedirs(f"{base}/{DATA}", exist_ok=True)
            self.staging = f"{base}/{DATA}/.{dataset}.tmp-{uuid.uuid4().hex[:12]}"
            os.makedirs(self.staging)
        else:
            self.staging = tempfile.mkdtemp(prefix=f"theseus-{dataset}-")
        self.done = False

    def _check_free(self) -> None:
        if self.fs.exists(f"{self.final}/{META}") and not self.overwrite:
            raise AlreadyExists(f"dataset {self.dataset!r} exists at {data_dir(self.root)}/{self.dataset}; "
                                "pass overwrite=True")

    def set_tokenizer(self, tokenizer) -> None:
        """Record ``tokenizer`` (an object with ``describe()``, or a dict) in meta.json.

        >>> w = DatasetWriter(tempfile.mkdtemp(), "t", "contiguous")  # doctest: +SKIP
        >>> w.set_tokenizer(get_tokenizer())                          # doctest: +SKIP
        """
        self.tokenizer = dict(tokenizer if isinstance(tokenizer, dict) else tokenizer.describe())

    def update(self, **fields) -> None:
        """Add fields to meta.json (a summary, a source description...).

        >>> w = DatasetWriter(tempfile.mkdtemp(), "t", "contiguous"); w.update(summary={"samples": 3}); w.abort()
        """
        self.meta.update(fields)

    def _file(self, name: str, dtype, row_shape: tuple) -> NpyAppender:
        if name not in self.files:
            self.files[name] = NpyAppender(os.path.join(self.staging, name + ".npy"), dtype, row_shape)
        return self.files[name]

    def append(self, split: str, tokens, mask=None, segments=None) -> None:
        """Append tokens to ``split``: a 1-D array (contiguous), or ``[rows, block_size]``
        tokens with a bool ``mask`` of the same shape (padded), and for a packed dataset the
        ``segments`` ids of the same shape (every append of a dataset gives them, or none does).

        >>> w = DatasetWriter(tempfile.mkdtemp(), "p", "padded")
        >>> w.append("train", np.zeros((2, 4)), np.ones((2, 4), bool)); w.abort()
        """
        if self.done:
            raise BadInput(f"dataset writer for {self.dataset!r} is already closed")
        if split not in SPLITS:
            raise BadInput(f"unknown split {split!r}; valid splits: {', '.join(SPLITS)}")
        tokens = np.asarray(tokens)
        if self.kind == "contiguous":
            if tokens.ndim != 1 or mask is not None:
                raise BadInput(f"a contiguous dataset takes 1-D token arrays without mask, got shape {tokens.shape}")
            self._file(split, TOKEN_DTYPE, ()).append(tokens)
            return
        mask = None if mask is None else np.asarray(mask)
        if tokens.ndim != 2 or mask is None or mask.shape != tokens.shape:
            raise BadInput("a padded dataset takes [rows, block_size] tokens and a mask of the same shape, "
                             f"got {tokens.shape} and {None if mask is None else mask.shape}")
        if self.block_size is None:
            self.block_size, self.packed = tokens.shape[1], segments is not None
        if self.packed != (segments is not None) or (segments is not None and np.shape(segments) != tokens.shape):
            raise BadInput(f"dataset {self.dataset!r}: {'every' if self.packed else 'no'} append of a "
                           f"{'packed' if self.packed else 'padded'} dataset takes segments of the tokens' shape")
        self._file(split, TOKEN_DTYPE, (self.block_size,)).append(tokens)
        self._file(split + "_mask", MASK_DTYPE, (self.block_size,)).append(mask)
        if segments is not None:
            self._file(split + "_segments", SEGMENT_DTYPE, (self.block_size,)).append(segments)

    def commit(self) -> dict:
        """Finish the arrays, write meta.json and publish; return the meta dict."""
        if self.done:
            raise BadInput(f"dataset writer for {self.dataset!r} is already closed")
        try:
            meta = self._finish()
            self._publish()
        except BaseException:
            self.abort()
            raise
        self.done = True
        return meta

    def _finish(self) -> dict:
        if self.kind == "padded" and self.block_size is None:
            raise BadInput(f"padded dataset {self.dataset!r} has no rows; nothing to write")
        names = list(SPLITS) + ([f"{s}_mask" for s in SPLITS] if self.kind == "padded" else [])
        names += [f"{s}_segments" for s in SPLITS] if self.packed else []
        row = () if self.kind == "contiguous" else (self.block_size,)
        arrays = {}
        for name in names:
            dtype = {"mask": MASK_DTYPE, "segments": SEGMENT_DTYPE}.get(name.rpartition("_")[2], TOKEN_DTYPE)
            arrays[name] = self._file(name, dtype, row).close()
        content = hashlib.sha256("".join(f"{n}:{a['sha256']}\n" for n, a in arrays.items()).encode())
        meta = {
            "format": FORMAT,
            "name": self.dataset,
            "kind": self.kind,
            "tokenizer": self.tokenizer,
            "dtype": TOKEN_DTYPE.name,
            "block_size": self.block_size,
            **({"packed": True} if self.packed else {}),
            "counts": {s: arrays[s]["shape"][0] for s in SPLITS},
            "arrays": arrays,
            "content_hash": content.hexdigest(),
            "created": datetime.datetime.now(datetime.timezone.utc).isoformat(),
            **self.meta,
        }
        with open(os.path.join(self.staging, META), "w") as f:
            json.dump(meta, f, indent=2)
            f.flush()
            os.fsync(f.fileno())
        return meta

    def _publish(self) -> None:
        self._check_free()  # someone may have published meanwhile
        rootfs.publish_folder(self.fs, self.staging, self.final, META)

    def abort(self) -> None:
        """Drop everything written; the dataset (if it existed) is unchanged."""
        for f in self.files.values():
            if not f.file.closed:
                f.discard()
        shutil.rmtree(self.staging, ignore_errors=True)
        self.done = True

    def __enter__(self) -> "DatasetWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if self.done:
            return
        if exc_type is None:
            self.commit()
        else:
            self.abort()


class Dataset:
    """An opened dataset: ``meta`` (dict), ``kind``, ``block_size`` and its arrays.

    Arrays are memory-mapped (local roots) or read from a verified local cache
    (remote roots), opened on first use.

    >>> ds = open_dataset(root, "fineweb")    # doctest: +SKIP
    >>> ds.tokens("train")[:4]                # doctest: +SKIP
    memmap([...], dtype=uint32)
    """

    def __init__(self, name: str, location: str, meta: dict, folder: str):
        self.name, self.location, self.meta, self.folder = name, location, meta, folder
        self.kind = meta["kind"]
        self.block_size = meta.get("block_size")
        self.tokenizer = meta.get("tokenizer")
        self._arrays: dict[str, np.ndarray] = {}

    def _array(self, name: str) -> np.ndarray:
        if name not in self._arrays:
            info = self.meta["arrays"][name]
            path = os.path.join(self.folder, name + ".npy")
            if 0 in info["shape"]:
                array = np.load(path)
            else:
                array = np.load(path, mmap_mode="r")
            if list(array.shape) != list(info["shape"]):
                raise BadInput(f"dataset {self.name!r}: {name}.npy has shape {array.shape}, "
                                 f"meta.json says {info['shape']}")
            self._arrays[name] = array
        return self._arrays[name]

    def tokens(self, split: str = "train") -> np.ndarray:
        """The uint32 tokens of ``split``: 1-D (contiguous) or ``[rows, block_size]`` (padded).

        >>> open_dataset(root, "fineweb").tokens("val").dtype    # doctest: +SKIP
        dtype('uint32')
        """
        if split not in SPLITS:
            raise BadInput(f"unknown split {split!r}; valid splits: {', '.join(SPLITS)}")
        return self._array(split)

    def mask(self, split: str = "train") -> np.ndarray | None:
        """The bool loss mask of ``split`` (padded datasets), or None (contiguous).

        >>> open_dataset(root, "alpaca").mask("train").dtype    # doctest: +SKIP
        dtype('bool')
        """
        if split not in SPLITS:
            raise BadInput(f"unknown split {split!r}; valid splits: {', '.join(SPLITS)}")
        return self._array(split + "_mask") if self.kind == "padded" else None

    @property
    def packed(self) -> bool:
        """Whether the rows hold several conversations each, told apart by ``segments``.

        >>> open_dataset(root, "alpaca").packed    # doctest: +SKIP
        False
        """
        return bool(self.meta.get("packed"))

    def segments(self, split: str = "train") -> np.ndarray | None:
        """The int32 segment ids of ``split`` (packed datasets: 0 padding, 1.. per conversation), or None.

        >>> open_dataset(root, "chat").segments("train")[0]    # doctest: +SKIP
        array([1, 1, ..., 2, 2, 0, 0], dtype=int32)
        """
        if split not in SPLITS:
            raise BadInput(f"unknown split {split!r}; valid splits: {', '.join(SPLITS)}")
        return self._array(split + "_segments") if self.packed else None

    def __repr__(self) -> str:
        return f"Dataset({self.name!r}, kind={self.kind!r}, counts={self.meta['counts']}, at {self.location!r})"


def _not_found(root: str, dataset: str, hint: str | None) -> DatasetNotFound:
    """The error for a missing ``dataset``: the datasets the root has (the close names named), and the
    tokenize job ``hint`` to run, or, where no job has that key, the close keys and every tokenize job."""
    job = hint or f"data/tokenize/{dataset}"
    try:
        have = list_datasets(root)
    except Exception:
        have = []
    near = difflib.get_close_matches(dataset, have, n=3, cutoff=0.6)
    close = f"; did you mean {' or '.join(map(repr, near))}?" if near else ""
    available = f" (available: {', '.join(have)}{close})" if have else ""
    return DatasetNotFound(f"dataset {dataset!r} not found under {data_dir(root)}{available}; "
                           f"{_tokenize_advice(job, root)}")


def _tokenize_advice(job: str, root: str) -> str:
    """How to make the dataset: run ``job``, or, where no job is registered under that key, one of the
    registered ``data/tokenize/*`` jobs (the close keys named)."""
    from theseus.jobs import registry  # the tokenize jobs register there; read only on this error path

    prefix = "data/tokenize/"
    jobs = list(registry(prefix))
    if not jobs or job in jobs:
        return f"run the tokenize job first: theseus run {job} <run-name> {root}"
    names = [key.removeprefix(prefix) for key in jobs]  # matched without the prefix they all share
    near = [prefix + n for n in difflib.get_close_matches(job.removeprefix(prefix), names, n=3, cutoff=0.6)]
    close = f" (did you mean {' or '.join(near)}?)" if near else ""
    return (f"no tokenize job is registered as {job!r}{close}; the tokenize jobs are {', '.join(jobs)} "
            f"(`theseus jobs data/tokenize` describes them)")


def _cache_root(cache_dir: str | None) -> str:
    if cache_dir:
        return cache_dir
    return os.environ.get("THESEUS_DATA_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "theseus", "data")


def _fetch(fs, remote: str, local: str, sha256: str) -> None:
    if os.path.exists(local):
        return
    tmp = f"{local}.tmp-{uuid.uuid4().hex[:8]}"
    h = hashlib.sha256()
    with fs.open(remote, "rb") as src, open(tmp, "wb") as dst:
        header = src.read(HEADER_BYTES)
        dst.write(header)
        while chunk := src.read(_BLOCK):
            h.update(chunk)
            dst.write(chunk)
    if h.hexdigest() != sha256:
        os.remove(tmp)
        raise BadInput(f"{remote}: sha256 mismatch with meta.json (corrupt or partial upload)")
    os.replace(tmp, local)


def open_dataset(root: str, dataset: str, hint: str | None = None, cache_dir: str | None = None) -> Dataset:
    """Open dataset ``dataset`` of ``root`` (a path or fsspec URL).

    A missing dataset raises ``DatasetNotFound`` naming the tokenize job to run
    (``hint``, default ``data/tokenize/<dataset>``). Remote arrays are downloaded
    once into ``cache_dir`` (default ``$THESEUS_DATA_CACHE`` or
    ``~/.cache/theseus/data``), keyed by content hash and checked against meta.json.

    >>> import tempfile
    >>> try:
    ...     open_dataset(tempfile.mkdtemp(), "fineweb")
    ... except DatasetNotFound as e:
    ...     print(str(e).split("; ")[1].split(" <")[0])
    run the tokenize job first: theseus run data/tokenize/fineweb
    """
    check_name(dataset)
    root = os.fspath(root)
    fs, base = rootfs.open_root(root)
    folder = f"{base}/{DATA}/{dataset}"
    try:
        meta = json.loads(rootfs.read_regular(fs, f"{folder}/{META}"))  # never waits on a FIFO
    except FileNotFoundError:
        raise _not_found(root, dataset, hint) from None
    if meta.get("format") != FORMAT or meta.get("kind") not in KINDS:
        raise BadInput(f"{folder}/{META} is not a theseus dataset (format {meta.get('format')!r})")
    if not rootfs.is_local(fs):
        cache = os.path.join(_cache_root(cache_dir), meta["content_hash"])
        os.makedirs(cache, exist_ok=True)
        for name, info in meta["arrays"].items():
            _fetch(fs, f"{folder}/{name}.npy", os.path.join(cache, name + ".npy"), info["sha256"])
        return Dataset(dataset, data_dir(root) + "/" + dataset, meta, cache)
    return Dataset(dataset, folder, meta, folder)


def list_datasets(root: str) -> list[str]:
    """Names of the complete datasets (those with meta.json) of ``root``, sorted.

    >>> import tempfile
    >>> list_datasets(tempfile.mkdtemp())
    []
    """
    fs, base = rootfs.open_root(root)
    if not fs.exists(f"{base}/{DATA}"):
        return []
    names = []
    for entry in fs.ls(f"{base}/{DATA}", detail=False):
        name = entry.rstrip("/").rsplit("/", 1)[-1]
        if not name.startswith(".") and fs.exists(f"{base}/{DATA}/{name}/{META}"):
            names.append(name)
    return sorted(names)
