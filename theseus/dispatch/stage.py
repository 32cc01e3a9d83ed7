"""What a launch puts on a host and runs there: the staged files, the launch script and each process's environment.

The SSH and SLURM launchers ship ``stage_files`` into a fresh ``new_stage``
folder; the Volcano pods and the TPU workers receive only the code tarball, so
their ``launch_script`` inlines the spec. Every path ends in the shared
bootstrap script (``theseus.dispatch.bootstrap.bootstrap_script``).

>>> from theseus.dispatch.spec import LaunchSpec
>>> job_name(LaunchSpec("k/x", "train-gpt", "", "/r", nonce="949e88"))
'theseus-train-gpt-949e88-0'
"""

from __future__ import annotations

import os
import posixpath
import re
import secrets
import shlex
from collections.abc import Mapping

from theseus.dispatch.bootstrap import bootstrap_script
from theseus.dispatch.spec import LaunchSpec

__all__ = ["COORDINATOR_PORT", "device_env", "exports", "job_name", "launch_script", "new_stage", "stage_files"]

COORDINATOR_PORT = 8476  # the jax.distributed coordinator's port where the launcher cannot probe one


def device_env(chip: str, chips_per_process: int) -> dict[str, str]:
    """Environment that gives each process its devices: ``chips_per_process`` CPU devices for chip ``cpu``.

    >>> device_env("cpu", 2)
    {'JAX_PLATFORMS': 'cpu', 'XLA_FLAGS': '--xla_force_host_platform_device_count=2'}
    >>> device_env("h100", 8)
    {}
    """
    if chip == "cpu":
        return {"JAX_PLATFORMS": "cpu", "XLA_FLAGS": f"--xla_force_host_platform_device_count={chips_per_process}"}
    return {}


def exports(env: Mapping[str, str], uv: str | None = None) -> list[str]:
    """Shell ``export`` lines for ``env`` (values quoted), and ``uv``'s folder first on PATH when it is a path.

    >>> for line in exports({"A": "x y"}, "/opt/uv/bin/uv"): print(line)
    export A='x y'
    export PATH=/opt/uv/bin:"$PATH"
    """
    out = [f"export {k}={shlex.quote(v)}" for k, v in env.items()]
    if uv and os.sep in uv:
        out.append(f'export PATH={shlex.quote(os.path.dirname(uv))}:"$PATH"')
    return out


def new_stage(work_dir: str, nonce: str) -> str:
    """A fresh launch folder on the host: ``<work_dir>/launches/<nonce>-<token>`` (a relaunch never reuses one).

    >>> new_stage("/w", "abcdef").startswith("/w/launches/abcdef-")
    True
    """
    return f"{work_dir}/launches/{nonce}-{secrets.token_hex(3)}"


def stage_files(spec: LaunchSpec, tarball: bytes, work_dir: str, stage: str,
                python: str = "python3") -> dict[str, bytes]:
    """The files a launch ships into ``stage``: ``code.tar.gz``, ``spec.json`` and ``bootstrap.sh``.

    The bootstrap script (``theseus.dispatch.bootstrap.bootstrap_script``) unpacks the
    code into ``<work_dir>/<revision>``, syncs the spec's uv groups and runs the
    bootstrap, which reads its process id, count and coordinator from the environment.

    >>> spec = LaunchSpec("k/x", "r", "", "/root", nonce="abcdef", revision="abc")
    >>> files = stage_files(spec, b"tgz", "/w", "/w/s")
    >>> sorted(files), "tar -xzf /w/s/code.tar.gz" in files["bootstrap.sh"].decode()
    (['bootstrap.sh', 'code.tar.gz', 'spec.json'], True)
    """
    script = bootstrap_script(spec, work_dir, f"{stage}/code.tar.gz", f"{stage}/spec.json", python=python)
    return {"code.tar.gz": tarball, "spec.json": spec.to_json().encode(), "bootstrap.sh": script.encode()}


def job_name(spec: LaunchSpec) -> str:
    """The name of a launch's Volcano Job or TPU slice: ``theseus-<run>-<nonce>-<seq of the first node>``,
    a DNS label short enough for pod names.

    >>> job_name(LaunchSpec("k/x", "My_Run-v2", "", "/r", nonce="abcdef"))
    'theseus-my-run-v2-abcdef-0'
    """
    node = spec.first_node()
    slug = re.sub(r"[^a-z0-9]+", "-", node.run.lower()).strip("-")[:24].strip("-") or "run"
    return f"theseus-{slug}-{node.nonce}-{node.seq}"


def launch_script(spec: LaunchSpec, work_dir: str, tarball: str, preamble: list[str] = (),
                  env: dict[str, str] | None = None) -> str:
    """A bash script that writes ``spec`` (inlined JSON) under ``work_dir``, then runs the bootstrap script.

    ``preamble`` lines run first (they set the process id and coordinator); ``env`` is
    exported before the bootstrap. Used by the Volcano pods and the TPU workers, which
    receive no files but the code tarball.

    >>> spec = LaunchSpec("k/x", "r", "", "/r", nonce="abcdef", revision="abc")
    >>> script = launch_script(spec, "/w", "/w/abc.tar.gz", ["export THESEUS_PROCESS_ID=0"])
    >>> script.splitlines()[:3]
    ['set -euo pipefail', 'export THESEUS_PROCESS_ID=0', 'mkdir -p /w/specs']
    >>> f"theseus.dispatch.bootstrap /w/specs/{spec.first_node().id}.json" in script
    True
    """
    spec_path = posixpath.join(work_dir, "specs", f"{spec.first_node().id}.json")
    marker = "THESEUS_SPEC_JSON"  # no line of indented JSON can be this bare word
    q = shlex.quote
    lines = ["set -euo pipefail", *preamble, f"mkdir -p {q(posixpath.dirname(spec_path))}",
             f"cat > {q(spec_path)} <<'{marker}'", spec.to_json(), marker,
             bootstrap_script(spec, work_dir, tarball, spec_path, env=env)]
    return "\n".join(lines)
