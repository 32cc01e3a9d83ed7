"""Counter-based hashing (splitmix64), vectorised in NumPy.

Everything random in the data pipeline (which document goes to validation,
where a training row starts, the order of padded rows) is a hash of integer
keys, so results are pure functions of their keys and identical on any
machine and NumPy version.
"""

from __future__ import annotations

import numpy as np

from theseus.errors import BadInput

_MASK64 = (1 << 64) - 1
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


def _u64(x) -> np.ndarray:
    if isinstance(x, (int, np.integer)):
        return np.array(int(x) & _MASK64, dtype=np.uint64)
    return np.asarray(x).astype(np.uint64)


def splitmix64(x) -> np.ndarray:
    """The splitmix64 finaliser of each uint64 in ``x`` (wrapping arithmetic).

    >>> hex(int(splitmix64(0)))
    '0xe220a8397b1dcdaf'
    """
    with np.errstate(over="ignore"):
        z = _u64(x) + _GOLDEN
        z = (z ^ (z >> np.uint64(30))) * _M1
        z = (z ^ (z >> np.uint64(27))) * _M2
    return z ^ (z >> np.uint64(31))


def hash64(*keys) -> np.ndarray:
    """A uint64 hash of integer keys (ints or arrays, broadcast together).

    >>> hash64(1, 2).dtype, hash64(1, np.arange(3)).shape
    (dtype('uint64'), (3,))
    """
    if not keys:
        raise BadInput("hash64 needs at least one key")
    h = splitmix64(keys[0])
    for k in keys[1:]:
        h = splitmix64(h ^ _u64(k))
    return h


def uniform(*keys) -> np.ndarray:
    """A float64 in [0, 1) for each combination of integer keys.

    >>> 0 <= float(uniform(2357, 0)) < 1
    True
    """
    return (hash64(*keys) >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))


def below(n: int, *keys) -> np.ndarray:
    """An int64 in [0, n) for each combination of keys (modulo bias < n / 2**64).

    >>> int(below(10, 1, 2)) in range(10)
    True
    """
    if n <= 0:
        raise BadInput(f"below needs n > 0, got {n}")
    return (hash64(*keys) % np.uint64(n)).astype(np.int64)
