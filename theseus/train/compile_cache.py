"""JAX's persistent compilation cache, on by default: a second start of a job compiles nothing it compiled before.

The cache lives outside the root (compiled programs depend on the machine, not on
the run): ``$XDG_CACHE_HOME/theseus/jax``, else ``~/.cache/theseus/jax``. The
environment variable ``THESEUS_COMPILATION_CACHE`` names another folder, or turns
the cache off with ``off``, ``0`` or an empty value. Every program is cached,
however small or quick to compile, since a tiny model's start is made of many
small programs.

JAX writes an entry straight to its final name, so a process reading an entry that
another one is still writing fails to decompress it: JAX warns and compiles
instead, and the result is still correct. Several processes may share one folder.

>>> cache_folder({"THESEUS_COMPILATION_CACHE": "/tmp/jax-cache"})
'/tmp/jax-cache'
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from typing import Any

import jax
from loguru import logger

from theseus.errors import BadInput

ENV_VAR = "THESEUS_COMPILATION_CACHE"
OFF_VALUES = ("off", "0", "")


def cache_folder(environ: Mapping[str, str] | None = None) -> str | None:
    """The folder the cache uses under ``environ`` (default ``os.environ``); None when it is turned off.

    ``THESEUS_COMPILATION_CACHE`` wins (``off``, ``0`` or empty: None; a relative
    path is made absolute, ``~`` expanded); else ``$XDG_CACHE_HOME/theseus/jax``;
    else ``~/.cache/theseus/jax``.

    >>> cache_folder({"XDG_CACHE_HOME": "/var/cache/me"})
    '/var/cache/me/theseus/jax'
    >>> cache_folder({"THESEUS_COMPILATION_CACHE": "off", "XDG_CACHE_HOME": "/var/cache/me"}) is None
    True
    >>> cache_folder({}).endswith(os.path.join(".cache", "theseus", "jax"))
    True
    """
    environ = os.environ if environ is None else environ
    if ENV_VAR in environ:
        value = environ[ENV_VAR].strip()
        if value.lower() in OFF_VALUES:
            return None
        return _absolute(value)
    base = environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "theseus", "jax")


def _absolute(folder: str) -> str:
    """``folder`` with ``~`` expanded, made absolute (so the cache does not follow the working directory);
    a URL as it is."""
    return folder if "://" in folder else os.path.abspath(os.path.expanduser(folder))


def _writable_folder(folder: str) -> str | None:
    """Why ``folder`` cannot hold the cache (created when missing), or None when it can."""
    if "://" in folder:  # JAX opens a URL through etils, outside this check: refused rather than half-supported
        return "it is a URL; the compilation cache must be a local folder"
    try:
        os.makedirs(folder, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as error:
        return f"{type(error).__name__}: {error}"
    return None


def enable_compilation_cache(folder: str | None = None, *, log: Any = logger) -> str | None:
    """Point JAX's persistent compilation cache at ``folder`` (default: `cache_folder()`); returns the folder in use.

    A ``folder`` given here is used as it is (``THESEUS_COMPILATION_CACHE`` only picks
    the default). Call it before compiling: programs compiled earlier are not cached. Idempotent:
    once a cache folder is set in this process (by this function or by the user,
    through ``jax_compilation_cache_dir`` or ``JAX_COMPILATION_CACHE_DIR``), that
    folder and its settings are kept and returned, since JAX opens its cache once
    per process. Returns None and changes nothing when the cache is turned off
    (``THESEUS_COMPILATION_CACHE=off`` or ``jax_enable_compilation_cache`` false),
    or, with a warning to ``log``, when the folder cannot be created or written:
    the run goes on compiling everything.

    >>> folder = enable_compilation_cache()
    >>> enable_compilation_cache() == folder
    True
    """
    if folder is not None and not str(folder).strip():
        raise BadInput("the compilation cache folder is empty: pass a folder, or None for the default")
    configured = jax.config.jax_compilation_cache_dir
    if configured:
        return configured
    if not jax.config.jax_enable_compilation_cache:
        return None
    folder = cache_folder() if folder is None else _absolute(os.fspath(folder))
    if folder is None:
        return None
    problem = _writable_folder(folder)
    if problem is not None:
        log.warning(f"COMPILE CACHE | cannot use {folder} ({problem}); compiling without a persistent cache "
                    f"(set {ENV_VAR} to another folder, or to 'off')")
        return None
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)  # -1: no size floor, none set by JAX either
    jax.config.update("jax_compilation_cache_dir", folder)
    log.debug(f"COMPILE CACHE | compiled programs are cached in {folder}")
    return folder
