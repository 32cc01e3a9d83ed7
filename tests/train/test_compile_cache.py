"""The persistent compilation cache: a second start of a Trainer compiles nothing the first one compiled.

JAX opens its cache once per process, so every start runs in its own interpreter,
as a real second start does: a small jitted program for the cache's own rules, a
Trainer (slow: a tiny GPT's start) for what a training job gets from it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from theseus.train.compile_cache import ENV_VAR, cache_folder, enable_compilation_cache

MARK = "@@RESULT@@"

# the cache enabled as the Trainer does, then one small program: the folder in use and the cache events
JIT = f"""
import collections, json
import jax, jax.numpy as jnp
events = collections.Counter()
jax.monitoring.register_event_listener(lambda event, **kwargs: events.update([event.rsplit("/", 1)[-1]]))
from theseus.train.compile_cache import enable_compilation_cache
folder = enable_compilation_cache()
jax.jit(lambda x: x * 2 + 1)(jnp.ones(3)).block_until_ready()
print({MARK!r} + json.dumps({{"folder": folder, "hits": events["cache_hits"], "misses": events["cache_misses"]}}))
"""

# one Trainer start in a fresh interpreter: the cache events JAX reports, the folder in use, the losses
TRAIN = f"""
import collections, json
import jax
events = collections.Counter()
jax.monitoring.register_event_listener(lambda event, **kwargs: events.update([event.rsplit("/", 1)[-1]]))
from theseus.train.trainer import Trainer, tiny_example
root, config = tiny_example()
trainer = Trainer(config, root, peak_flops=1e12, progress=False)
losses = [trainer.tick()["train/loss"] for _ in range(2)]
print({MARK!r} + json.dumps({{"folder": jax.config.jax_compilation_cache_dir, "losses": losses,
                              "hits": events["cache_hits"], "misses": events["cache_misses"]}}))
"""


def start(code: str, env: dict[str, str]) -> subprocess.Popen:
    """``code`` in a fresh interpreter on one CPU device, with ``env`` over a copy of this environment
    (a value of None removes the variable)."""
    full = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": "--xla_force_host_platform_device_count=1"}
    for name, value in env.items():
        if value is None:
            full.pop(name, None)
        else:
            full[name] = value
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], env=full, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def finish(proc: subprocess.Popen) -> tuple[dict, str]:
    """What ``proc`` printed after MARK, and its stderr; AssertionError with both when it failed."""
    out, err = proc.communicate(timeout=300)
    lines = [line[len(MARK):] for line in out.splitlines() if line.startswith(MARK)]
    assert proc.returncode == 0 and lines, f"rc={proc.returncode}\n{out[-3000:]}\n{err[-5000:]}"
    return json.loads(lines[-1]), err


def run(code: str, **env: str | None) -> tuple[dict, str]:
    return finish(start(code, env))


def entries(folder) -> set[str]:
    return set(os.listdir(folder)) if os.path.isdir(folder) else set()


def test_a_second_process_reads_what_the_first_wrote(tmp_path):
    cache = tmp_path / "cache"
    first, _ = run(JIT, **{ENV_VAR: str(cache)})
    written = entries(cache)
    second, _ = run(JIT, **{ENV_VAR: str(cache)})
    assert first["folder"] == second["folder"] == str(cache)
    assert first["misses"] == len(written) > 0 and first["hits"] == 0
    assert second["misses"] == 0 and second["hits"] == first["misses"] and entries(cache) == written


@pytest.mark.slow
def test_a_second_start_reads_every_program_the_first_compiled(tmp_path):
    cache = tmp_path / "cache"
    first, _ = run(TRAIN, **{ENV_VAR: str(cache)})
    written = entries(cache)
    second, _ = run(TRAIN, **{ENV_VAR: str(cache)})
    assert first["folder"] == second["folder"] == str(cache)
    assert first["misses"] > 0 and first["hits"] == 0 and len(written) == first["misses"]
    assert second["misses"] == 0 and second["hits"] == first["misses"]
    assert entries(cache) == written  # nothing new compiled, nothing new written
    assert second["losses"] == first["losses"]


@pytest.mark.slow
def test_two_starts_at_once_share_one_folder(tmp_path):
    """Two processes filling one empty folder at the same time both train, and a third start compiles nothing."""
    cache = str(tmp_path / "cache")
    procs = [start(TRAIN, {ENV_VAR: cache}) for _ in range(2)]
    results = [finish(p)[0] for p in procs]
    assert results[0]["losses"] == results[1]["losses"]
    third, _ = run(TRAIN, **{ENV_VAR: cache})
    assert third["misses"] == 0 and third["hits"] > 0 and third["losses"] == results[0]["losses"]


def test_turned_off_compiles_without_a_cache_and_writes_nowhere(tmp_path):
    result, _ = run(JIT, **{ENV_VAR: "off", "XDG_CACHE_HOME": str(tmp_path / "xdg"), "HOME": str(tmp_path)})
    assert result["folder"] is None and result["misses"] == result["hits"] == 0
    assert os.listdir(tmp_path) == []


def test_the_default_folder_is_under_xdg_cache_home(tmp_path):
    result, _ = run(JIT, **{ENV_VAR: None, "XDG_CACHE_HOME": str(tmp_path / "xdg")})
    assert result["folder"] == str(tmp_path / "xdg" / "theseus" / "jax")
    assert len(entries(result["folder"])) == result["misses"] > 0


@pytest.mark.slow
def test_a_folder_that_cannot_be_created_warns_and_the_run_trains(tmp_path):
    (tmp_path / "file").write_text("a file where the cache's parent folder should be")
    result, err = run(TRAIN, **{ENV_VAR: str(tmp_path / "file" / "cache")})
    assert result["folder"] is None and result["misses"] == 0 and len(result["losses"]) == 2
    assert "COMPILE CACHE | cannot use" in err and str(tmp_path / "file" / "cache") in err


def test_a_url_is_refused_with_a_warning(tmp_path):
    code = f"""
    import json
    from loguru import logger
    warnings = []
    logger.add(warnings.append, level="WARNING", format="{{message}}")
    from theseus.train.compile_cache import enable_compilation_cache
    print({MARK!r} + json.dumps({{"folder": enable_compilation_cache("gs://bucket/jax"), "warnings": warnings}}))
    """
    result, _ = run(code)
    assert result["folder"] is None
    assert "must be a local folder" in result["warnings"][0]


def test_a_cache_folder_the_user_set_for_jax_is_kept_with_its_settings(tmp_path):
    code = f"""
    import json
    import jax
    from theseus.train.compile_cache import enable_compilation_cache
    folder = enable_compilation_cache()
    print({MARK!r} + json.dumps({{"folder": folder, "again": enable_compilation_cache(),
                                  "min_secs": jax.config.jax_persistent_cache_min_compile_time_secs}}))
    """
    theirs, ours = tmp_path / "theirs", tmp_path / "ours"
    result, _ = run(code, JAX_COMPILATION_CACHE_DIR=str(theirs), **{ENV_VAR: str(ours)})
    assert result["folder"] == result["again"] == str(theirs)
    assert result["min_secs"] == 1.0  # JAX's default, untouched
    assert not ours.exists()


def test_the_folder_comes_from_the_environment():
    assert cache_folder({ENV_VAR: "/srv/jax", "XDG_CACHE_HOME": "/x"}) == "/srv/jax"
    assert [cache_folder({ENV_VAR: value}) for value in ("off", " OFF ", "0", "")] == [None] * 4
    assert cache_folder({ENV_VAR: "rel/cache"}) == os.path.abspath("rel/cache")
    assert cache_folder({ENV_VAR: "~/jax"}) == os.path.expanduser("~/jax")
    assert cache_folder({"XDG_CACHE_HOME": ""}) == os.path.join(os.path.expanduser("~"), ".cache", "theseus", "jax")


def test_an_empty_folder_argument_is_an_error():
    with pytest.raises(ValueError, match="compilation cache folder is empty"):
        enable_compilation_cache("  ")
