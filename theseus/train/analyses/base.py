"""What every analysis of ``theseus.train.analyses`` shares: its result, its input, and how it is published.

An `ArrayAnalysis` computes an `AnalysisResult` (scalars, NumPy arrays, one PNG picture) from an
`EvalContext`; run at a validation step it publishes the arrays (``.npy``) and the picture under
``objects/<node-id>/analysis/<name>/`` with `publish_folder`, which writes ``MANIFEST.json`` (sizes
and sha256, the format of checkpoint manifests) last, and returns its scalars as the node's keys
``analysis/<name>/<metric>``. ``theseus analyze`` computes one on a checkpoint with options
(``layer``, ``head``, ``sample``) without publishing anything.

>>> import numpy as np
>>> written = {}
>>> context = EvalContext(step=1, params={}, config=None, sources=(), mean_loss=lambda d: 0.0,
...                       write=lambda name, data: written.setdefault(name, data) and f"analysis/{name}")
>>> result = AnalysisResult({"mean": 0.5}, {"values": np.ones(2)}, b"png")
>>> publish_folder(context, "toy", result.files("toy"))
'analysis/toy'
>>> sorted(written)
['toy/MANIFEST.json', 'toy/toy.png', 'toy/values.npy']
"""

from __future__ import annotations

import dataclasses
import io
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from theseus.errors import BadInput
from theseus.store.manifest import MANIFEST, FileEntry, encode
from theseus.train.evaluations import Analysis, EvalContext

__all__ = ["ROWS", "TOKENS", "AnalysisResult", "ArrayAnalysis", "analysis_input", "npy_bytes", "publish_folder"]

#: rows of the first validation batch an analysis reads, and tokens of each (a causal model's
#: numbers on a prefix are those of the whole row at the same positions, so a short prefix
#: keeps the attention maps small without changing them)
ROWS = 2
TOKENS = 64


@dataclasses.dataclass(frozen=True)
class AnalysisResult:
    """What an analysis found: ``scalars`` (metric -> float), ``arrays`` (name -> NumPy array) and
    ``picture`` (PNG bytes).

    >>> sorted(AnalysisResult({}, {"a": np.zeros(1)}, b"").files("norms"))
    ['a.npy', 'norms.png']
    """

    scalars: Mapping[str, float]
    arrays: Mapping[str, np.ndarray]
    picture: bytes

    def files(self, name: str) -> dict[str, bytes]:
        """The files of the result: ``<array>.npy`` for each array and ``<name>.png``."""
        out = {f"{key}.npy": npy_bytes(value) for key, value in self.arrays.items()}
        out[f"{name}.png"] = bytes(self.picture)
        return out


def npy_bytes(array: Any) -> bytes:
    """``array`` in NumPy's ``.npy`` format (no pickles: object arrays are refused).

    >>> np.load(io.BytesIO(npy_bytes(np.arange(3)))).tolist()
    [0, 1, 2]
    """
    buffer = io.BytesIO()
    np.save(buffer, np.asarray(array), allow_pickle=False)
    return buffer.getvalue()


def publish_folder(context: EvalContext, name: str, files: Mapping[str, bytes]) -> str:
    """Publish ``files`` (file name -> bytes) as ``analysis/<name>/`` of the node, ``MANIFEST.json`` last.

    Each file is published atomically by ``context.write``; the manifest, which lists every file
    with its size and sha256, seals the folder: a folder without one is incomplete, and
    ``theseus audit`` checks every file against it. Returns the folder, relative to the root.

    >>> publish_folder(EvalContext(1, {}, None, (), lambda d: 0.0, write=lambda n, d: n), "x", {MANIFEST: b""})
    Traceback (most recent call last):
    ...
    theseus.errors.BadInput: the manifest lists 'MANIFEST.json' twice or lists itself
    """
    entries = [FileEntry.of_bytes(file, data) for file, data in files.items()]
    manifest = encode(entries)  # checks the names before anything is written
    for file, data in files.items():
        context.write(f"{name}/{file}", data)
    path = context.write(f"{name}/{MANIFEST}", manifest)
    return path.rsplit("/", 1)[0]


def analysis_input(context: EvalContext, rows: int = ROWS, tokens: int = TOKENS) -> dict[str, np.ndarray]:
    """The first ``rows`` rows and ``tokens`` tokens of the first validation batch of the job's data
    (``x``, ``y``, ``padding_mask``).

    >>> batch = {"x": np.arange(12).reshape(3, 4), "y": np.ones((3, 4)), "padding_mask": np.ones((3, 4), bool)}
    >>> context = EvalContext(1, {}, None, (), lambda d: 0.0, batch=lambda d: batch)
    >>> analysis_input(context, rows=2, tokens=3)["x"].tolist()
    [[0, 1, 2], [4, 5, 6]]
    """
    batch = context.batch(None)
    return {key: np.asarray(batch[key])[:rows, :tokens] for key in ("x", "y", "padding_mask") if key in batch}


class ArrayAnalysis(Analysis):
    """Base of the analyses that publish arrays and a picture: ``compute(context, **options)`` is theirs.

    ``OPTIONS`` names the options ``compute`` accepts (``theseus analyze --layer/--head/--sample``);
    another is a ValueError naming the ones it takes.

    >>> ArrayAnalysis.check_options({"layer": 1})
    Traceback (most recent call last):
    ...
    theseus.errors.BadInput: analysis '' takes no option layer (it takes none)
    """

    OPTIONS: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def check_options(cls, options: Mapping[str, Any]) -> dict[str, Any]:
        """The options that were given (not None), each one ``OPTIONS`` names, as non-negative ints."""
        given = {key: value for key, value in options.items() if value is not None}
        for key, value in given.items():
            if key not in cls.OPTIONS:
                takes = ", ".join(cls.OPTIONS) or "none"
                raise BadInput(f"analysis {cls.name!r} takes no option {key} (it takes {takes})")
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
                raise BadInput(f"option {key} of analysis {cls.name!r} must be a non-negative integer, "
                                 f"got {value!r}")
        return {key: int(value) for key, value in given.items()}

    @classmethod
    def compute(cls, context: EvalContext, **options: Any) -> AnalysisResult:
        """The scalars, arrays and picture of the current parameters."""
        raise NotImplementedError(f"{cls.__name__} must implement compute()")

    @classmethod
    def run(cls, context: EvalContext) -> dict[str, float]:
        """Compute with the default options, publish the folder, return ``analysis/<name>/<metric>`` keys."""
        result = cls.compute(context)
        publish_folder(context, cls.name, result.files(cls.name))
        return {f"analysis/{cls.name}/{key}": float(value) for key, value in result.scalars.items()}
