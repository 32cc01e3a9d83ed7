"""The run's random keys: the base key, its ``rng.json`` sidecar, and the keys derived from it.

Step k uses ``fold_in(base, k)``; the parameter-init key is ``fold_in(base, INIT_SALT)``
(no step reaches it). ``rng.json`` holds plain ints, never pickles.

>>> import jax
>>> key_from_json(key_to_json(jax.random.PRNGKey(7))).tolist()
[0, 7]
"""

from __future__ import annotations

import json
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from theseus.errors import BadInput

__all__ = ["INIT_SALT", "RNG_FORMAT", "init_key", "key_from_json", "key_to_json"]

RNG_FORMAT = "theseus.rng/1"
INIT_SALT = 2**31 - 1


def key_to_json(key: Any, seed: int | None = None) -> str:
    """The ``rng.json`` sidecar of a base key: plain ints, no pickles.

    >>> import jax
    >>> key_to_json(jax.random.PRNGKey(3), seed=3)
    '{"format": "theseus.rng/1", "impl": "threefry2x32", "seed": 3, "key": [0, 3]}'
    """
    data = jax.random.key_data(key) if jnp.issubdtype(key.dtype, jax.dtypes.prng_key) else key
    ints = [int(v) for v in np.asarray(data).reshape(-1)]
    return json.dumps({"format": RNG_FORMAT, "impl": "threefry2x32", "seed": seed, "key": ints})


def key_from_json(text: str | bytes) -> jax.Array:
    """The base key stored by `key_to_json`.

    >>> key_from_json('{"format": "theseus.rng/1", "key": [0, 7]}').tolist()
    [0, 7]
    """
    data = json.loads(text)
    if data.get("format") != RNG_FORMAT:
        raise BadInput(f"not a theseus rng file (format {data.get('format')!r})")
    return jnp.asarray(np.asarray(data["key"], dtype=np.uint32))


def init_key(base: jax.Array) -> jax.Array:
    """The key the fresh parameters are drawn from.

    >>> import jax
    >>> bool((init_key(jax.random.PRNGKey(0)) != jax.random.fold_in(jax.random.PRNGKey(0), 0)).any())
    True
    """
    return jax.random.fold_in(base, INIT_SALT)
