"""safetensors files read tensor by tensor and written tensor by tensor, one file or a sharded index.

The format is an 8-byte little-endian header length, a JSON header naming each tensor's dtype,
shape and byte range, then the raw bytes. Reading maps one tensor's bytes at a time
(`numpy.memmap`, unmapped when the caller drops the array), so a folder larger than memory
is read a tensor at a time; nothing is unpickled and a folder holding only PyTorch ``.bin``
pickles is refused.

>>> import tempfile, numpy as np
>>> folder = tempfile.mkdtemp()
>>> write_folder(folder, [("w", np.arange(6, dtype=np.float32).reshape(2, 3))])
['model.safetensors']
>>> [(name, array.shape) for name, array in SafetensorsFolder(folder).items()]
[('w', (2, 3))]
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Iterable, Iterator

import ml_dtypes
import numpy as np

from theseus.errors import BadInput, CorruptData, UnknownName
from theseus.store import direct_io

#: the single file of an unsharded folder, and the index of a sharded one
SINGLE = "model.safetensors"
INDEX = "model.safetensors.index.json"
#: safetensors dtype names and their NumPy dtypes
DTYPES = {
    "F64": np.dtype(np.float64), "F32": np.dtype(np.float32), "F16": np.dtype(np.float16),
    "BF16": np.dtype(ml_dtypes.bfloat16), "I64": np.dtype(np.int64), "I32": np.dtype(np.int32),
    "I16": np.dtype(np.int16), "I8": np.dtype(np.int8), "U8": np.dtype(np.uint8), "BOOL": np.dtype(np.bool_),
}
_NAMES = {dtype: name for name, dtype in DTYPES.items()}
#: the largest header a reader accepts (a corrupt length would otherwise ask for any amount of memory)
MAX_HEADER = 100 * 2**20
#: a sharded folder's shards hold at most this many bytes of tensors each, by default
SHARD_BYTES = 5 * 2**30

class NotSafetensors(CorruptData):
    """A folder or file that is not safetensors: pickled ``.bin`` weights, a bad header, a missing shard.

    >>> issubclass(NotSafetensors, ValueError) and issubclass(NotSafetensors, CorruptData)
    True
    """


def read_header(path: str) -> tuple[dict, int]:
    """``(header, data offset)`` of the safetensors file at ``path``: each tensor's dtype, shape and
    ``data_offsets`` relative to the data offset (``__metadata__`` left out).

    >>> import tempfile, numpy as np
    >>> folder = tempfile.mkdtemp(); _ = write_folder(folder, [("b", np.zeros(2, np.float16))])
    >>> header, start = read_header(folder + "/model.safetensors"); header["b"]["dtype"], header["b"]["shape"]
    ('F16', [2])
    """
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        raw = f.read(8)
        if len(raw) != 8:
            raise NotSafetensors(f"{path} is not a safetensors file: shorter than its 8-byte header length")
        (length,) = struct.unpack("<Q", raw)
        if length > min(MAX_HEADER, size - 8):
            raise NotSafetensors(f"{path} is not a safetensors file: header length {length} of a {size}-byte file")
        try:
            header = json.loads(f.read(length))
        except ValueError as e:
            raise NotSafetensors(f"{path} is not a safetensors file: its header is not JSON ({e})") from None
    if not isinstance(header, dict):
        raise NotSafetensors(f"{path} is not a safetensors file: its header is not a JSON object")
    header.pop("__metadata__", None)
    start = 8 + length
    for name, entry in header.items():
        try:
            dtype, shape, (begin, end) = DTYPES[entry["dtype"]], entry["shape"], entry["data_offsets"]
        except (KeyError, TypeError, ValueError):
            raise NotSafetensors(f"{path}: tensor {name!r} has a dtype theseus does not read or a malformed entry "
                                 f"({entry!r})") from None
        if end - begin != dtype.itemsize * int(np.prod(shape, dtype=np.int64)) or not 0 <= begin <= end \
                or start + end > size:
            raise NotSafetensors(f"{path}: tensor {name!r} has a byte range that does not fit its shape or the file")
    return header, start


class SafetensorsFolder:
    """The tensors of a Hugging Face folder's safetensors: ``model.safetensors`` or the shards its
    ``model.safetensors.index.json`` names. ``names`` lists them; ``read(name)`` maps one tensor
    (read-only, its pages mapped only while the array lives); ``items()`` yields them in file order;
    ``files`` are the safetensors files, relative to the folder.

    >>> import tempfile
    >>> folder = tempfile.mkdtemp(); open(folder + "/pytorch_model.bin", "wb").close()
    >>> SafetensorsFolder(folder)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    theseus.hf.safetensors_io.NotSafetensors: ... holds PyTorch pickles (pytorch_model.bin), which theseus never unpickles (no code from outside is executed): convert them to safetensors first
    """  # noqa: E501 - a doctest's expected output, printed on one line

    def __init__(self, folder: str):
        self.folder = os.fspath(folder)
        if os.path.isfile(os.path.join(self.folder, INDEX)):
            self.files, located = self._sharded()
        elif os.path.isfile(os.path.join(self.folder, SINGLE)):
            self.files, located = [SINGLE], None
        else:
            pickles = sorted(n for n in os.listdir(self.folder) if n.endswith((".bin", ".pt", ".pth", ".ckpt")))
            if pickles:
                raise NotSafetensors(f"{self.folder} holds PyTorch pickles ({', '.join(pickles)}), which theseus "
                                     "never unpickles (no code from outside is executed): convert them to "
                                     "safetensors first")
            raise NotSafetensors(f"{self.folder} has no {SINGLE} and no {INDEX}")
        self._where: dict[str, tuple[str, dict, int]] = {}
        for rel in self.files:
            header, start = read_header(os.path.join(self.folder, rel))
            for name, entry in header.items():
                if name in self._where:
                    raise NotSafetensors(f"{self.folder}: tensor {name!r} is in two files")
                if located is not None and located.get(name) != rel:
                    raise NotSafetensors(f"{self.folder}: tensor {name!r} is in {rel}, the index says "
                                         f"{located.get(name)}")
                self._where[name] = (rel, entry, start)
        if located is not None and set(located) - set(self._where):
            missing = sorted(set(located) - set(self._where))
            raise NotSafetensors(f"{self.folder}: the index names tensors no shard holds: {', '.join(missing[:5])}")
        self.names = sorted(self._where, key=lambda n: (self.files.index(self._where[n][0]),
                                                        self._where[n][1]["data_offsets"][0]))

    def _sharded(self) -> tuple[list[str], dict[str, str]]:
        where = os.path.join(self.folder, INDEX)
        try:
            with open(where) as f:
                weight_map = json.load(f)["weight_map"]
        except (ValueError, KeyError, TypeError) as e:
            raise NotSafetensors(f"{where} is not a safetensors index: {e}") from None
        if not isinstance(weight_map, dict):
            raise NotSafetensors(f"{where}: weight_map is not a mapping")
        files = sorted(set(weight_map.values()))
        for rel in files:
            if not isinstance(rel, str) or os.path.basename(rel) != rel or not rel.endswith(".safetensors"):
                raise NotSafetensors(f"{where} names {rel!r}: a shard is a .safetensors file of the folder")
            if not os.path.isfile(os.path.join(self.folder, rel)):
                raise NotSafetensors(f"{where} names {rel}, which is not in the folder")
        return files, dict(weight_map)

    def shape(self, name: str) -> tuple[int, ...]:
        """The shape of tensor ``name``, read from the header only."""
        return tuple(self._where[name][1]["shape"])

    def read(self, name: str) -> np.ndarray:
        """Tensor ``name`` as a read-only array mapped from its file."""
        try:
            rel, entry, start = self._where[name]
        except KeyError:
            raise UnknownName(f"{self.folder} holds no tensor {name!r}") from None
        dtype, shape = DTYPES[entry["dtype"]], tuple(entry["shape"])
        if not int(np.prod(shape, dtype=np.int64)):
            return np.zeros(shape, dtype)
        return np.memmap(os.path.join(self.folder, rel), dtype=dtype, mode="r",
                         offset=start + entry["data_offsets"][0], shape=shape)

    def items(self) -> Iterator[tuple[str, np.ndarray]]:
        """``(name, tensor)`` for every tensor, in file order (one mapped at a time)."""
        for name in self.names:
            yield name, self.read(name)


def _write_file(path: str, tensors: list[tuple[str, np.ndarray]], metadata: dict[str, str]) -> str:
    """One safetensors file of ``tensors`` (any layout: a transposed view is copied in order a block at a time),
    synced and renamed into place (`theseus.store.direct_io`); the sha256 of its bytes, hashed as they are written
    (no second read)."""
    header: dict = {"__metadata__": metadata} if metadata else {}
    offset = 0
    for name, array in tensors:
        size = array.dtype.itemsize * array.size
        header[name] = {"dtype": _NAMES[array.dtype], "shape": list(array.shape), "data_offsets": [offset,
                                                                                                offset + size]}
        offset += size
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # the data starts 8-byte aligned, as the reference writer does
    return direct_io.write_file(path, [struct.pack("<Q", len(raw)) + raw, *(a for _, a in tensors)])[1]


def write_folder(folder: str, tensors: Iterable[tuple[str, np.ndarray]], shard_bytes: int = SHARD_BYTES,
                 metadata: dict[str, str] | None = None, digests: dict[str, str] | None = None) -> list[str]:
    """Write ``tensors`` (``(name, array)`` pairs, consumed one shard at a time) as ``model.safetensors``, or, when
    they hold more than ``shard_bytes``, as ``model-0000k-of-0000n.safetensors`` shards and their index. Returns the
    files written, relative to ``folder``; ``digests``, when given, gets each safetensors file's sha256.

    >>> import tempfile, numpy as np
    >>> folder = tempfile.mkdtemp()
    >>> write_folder(folder, [("a", np.zeros(4, np.float32)), ("b", np.ones(4, np.float32))], shard_bytes=16)
    ['model-00001-of-00002.safetensors', 'model-00002-of-00002.safetensors', 'model.safetensors.index.json']
    >>> float(SafetensorsFolder(folder).read("b")[0])
    1.0
    """
    metadata = {"format": "pt", **(metadata or {})}
    os.makedirs(folder, exist_ok=True)
    shards: list[list[tuple[str, np.ndarray]]] = [[]]
    held = total = 0
    for name, array in tensors:
        array = np.asarray(array)
        if array.dtype not in _NAMES:
            raise BadInput(f"tensor {name!r} has dtype {array.dtype}, which safetensors does not hold")
        size = array.dtype.itemsize * array.size
        if shards[-1] and held + size > shard_bytes:
            shards.append([])
            held = 0
        shards[-1].append((name, array))
        held += size
        total += size
    digests = {} if digests is None else digests
    if len(shards) == 1:
        digests[SINGLE] = _write_file(os.path.join(folder, SINGLE), shards[0], metadata)
        direct_io.sync_folders(folder, [os.path.join(folder, SINGLE)])
        return [SINGLE]
    files, weight_map = [], {}
    for k, shard in enumerate(shards, 1):
        rel = f"model-{k:05d}-of-{len(shards):05d}.safetensors"
        digests[rel] = _write_file(os.path.join(folder, rel), shard, metadata)
        files.append(rel)
        weight_map.update({name: rel for name, _ in shard})
    index = json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2).encode()
    digests[INDEX] = direct_io.write_file(os.path.join(folder, INDEX), [index])[1]
    direct_io.sync_folders(folder, [os.path.join(folder, INDEX)])
    return [*files, INDEX]
