"""The entry point every launcher starts on each process of a launched run.

::

    python -m theseus.dispatch.bootstrap SPEC_JSON_PATH --coordinator HOST:PORT --num-processes N --process-id I

The process count, index and coordinator may also come from the environment
(``THESEUS_NUM_PROCESSES``, ``THESEUS_PROCESS_ID``, ``THESEUS_COORDINATOR``) or,
under ``srun``, from ``SLURM_NTASKS`` / ``SLURM_PROCID`` (the coordinator is then
``THESEUS_COORDINATOR``, or the first host of ``SLURM_JOB_NODELIST`` with the port
``THESEUS_COORDINATOR_PORT``).

The command supervises a worker: it starts ``python -m theseus.dispatch.bootstrap
--worker ...`` in a child, copies the child's output (stdout and stderr, native
XLA lines included) to its own stdout and to a temporary file, forwards
SIGTERM/SIGINT, and when the child ends (success, failure, crash or kill) it:

- publishes the output into the root as ``objects/<first node>/logs/process-<i>.log``
  (``theseus logs ROOT NONCE`` prints it);
- on process 0, when the child failed without recording it (killed, aborted by
  ``jax.distributed`` when a peer died), records the run as failed with the tail
  of the output;
- exits with the child's code: 0 done, 1 the run failed (recorded), 2 bad input
  (unknown job key, invalid config, bad spec: nothing was written to the root),
  75 (``EXIT_PREEMPTED``) the job stopped on SIGTERM after committing a checkpoint
  (recorded ``preempted``): a start of the same spec with ``auto_resume`` resumes it.

With ``auto_resume`` in the spec, a start that finds the spec's lineage already written
(a requeued SLURM job, a relaunch) continues it from its latest committed checkpoint,
and does nothing when that lineage finished.

The worker calls ``jax.distributed.initialize`` when N > 1, before anything
touches a JAX backend, with short initialization / heartbeat timeouts
(``THESEUS_INIT_TIMEOUT``, default 120 s; ``THESEUS_HEARTBEAT_TIMEOUT``, 30 s), a
coordinator bound to 127.0.0.1 when the address is local; builds the job from the
spec (a fresh run, or restored from ``base_node``: continued when ``resume``,
else branched), with the spec's nonce so every process writes the same nodes,
and runs it; the experiments the spec carries (the user's files, ``theseus --import``)
are imported first. ``training.per_device_batch_size=-1`` is resolved by autobatch in the
job's setup: each process probes its own devices and every process uses the smallest size
any of them fits (`theseus.train.autobatch.agreed_batch_size`).

``bootstrap_script(...)`` is the shell snippet that prepares a remote host (unpack
the code tarball into ``<work_dir>/<revision>``, ``uv sync`` the spec's groups)
and then runs this command there; the SSH, SLURM, TPU and Volcano launchers share it.

>>> info = process_info([], {"SLURM_PROCID": "1", "SLURM_NTASKS": "2", "THESEUS_COORDINATOR": "n1:7777"})
>>> info.process_id, info.num_processes, info.coordinator
(1, 2, 'n1:7777')
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import traceback
from collections.abc import Mapping, Sequence

from loguru import logger

from theseus import config as configs
from theseus import errors, logs
from theseus.dispatch.spec import LaunchSpec
from theseus.experiments import import_shipped, job_source
from theseus.jobs import EXIT_PREEMPTED, Preempted, get_job
from theseus.store import EmptyResult, Store, layout
from theseus.store import fs as rootfs
from theseus.store.node import Node

__all__ = ["BadInput", "ProcessInfo", "bootstrap_script", "check_spec", "log_path", "main", "process_info",
           "publish_log"]

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2
ENDINGS = (EXIT_OK, EXIT_FAILED, EXIT_PREEMPTED)  # the worker's codes the supervisor passes on as they are
TAIL_LINES = 60


class BadInput(errors.BadInput):
    """Input refused before anything is written to the root (exit code 2)."""


class Terminated(BaseException):
    """The worker got SIGTERM (its deadline passed or the launch was cancelled); the job records it as failed."""


def _terminated(signum, frame) -> None:
    raise Terminated(f"stopped by signal {signum}: the launch's deadline passed or it was cancelled")


@dataclasses.dataclass(frozen=True)
class ProcessInfo:
    """Where this process stands in the launch: ``process_id`` of ``num_processes``, and the coordinator.

    >>> ProcessInfo(0, 1).distributed
    False
    """

    process_id: int = 0
    num_processes: int = 1
    coordinator: str | None = None

    @property
    def distributed(self) -> bool:
        """True when ``jax.distributed`` must be initialized (more than one process)."""
        return self.num_processes > 1

    def args(self) -> list[str]:
        """Command-line arguments that reproduce this info.

        >>> ProcessInfo(1, 2, "127.0.0.1:5000").args()
        ['--coordinator', '127.0.0.1:5000', '--num-processes', '2', '--process-id', '1']
        """
        out = ["--coordinator", self.coordinator] if self.coordinator else []
        return out + ["--num-processes", str(self.num_processes), "--process-id", str(self.process_id)]


def _int(name: str, value: str | int) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        raise BadInput(f"{name} must be an integer, got {value!r}") from None


def _slurm_first_host(nodelist: str) -> str:
    """The first host of a SLURM node list (``scontrol show hostnames``, else the plain first name)."""
    try:
        out = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True,
                             timeout=30, check=True).stdout.split()
        if out:
            return out[0]
    except (OSError, subprocess.SubprocessError):
        pass
    first = nodelist.split(",")[0]
    if "[" in first:  # node[01-04] -> node01
        prefix, rest = first.split("[", 1)
        first = prefix + rest.split("-")[0].split(",")[0].rstrip("]")
    return first


def process_info(args: Sequence[str] | argparse.Namespace = (), environ: Mapping[str, str] | None = None,
                 ) -> ProcessInfo:
    """This process's index, the process count and the coordinator: arguments, then THESEUS_*, then SLURM_*.

    ``args`` is a parsed namespace or a list of ``--coordinator/--num-processes/--process-id``
    arguments. With more than one process a coordinator is required.

    >>> try:
    ...     process_info(["--num-processes", "2", "--process-id", "0"], {})
    ... except BadInput as e:
    ...     print(e)
    2 processes need a coordinator address: --coordinator HOST:PORT or THESEUS_COORDINATOR
    >>> process_info([], {}).num_processes
    1
    """
    env = os.environ if environ is None else environ
    if not isinstance(args, argparse.Namespace):
        parser = argparse.ArgumentParser(add_help=False)
        _add_process_args(parser)
        args = parser.parse_args(list(args))
    count = args.num_processes or env.get("THESEUS_NUM_PROCESSES") or env.get("SLURM_NTASKS") or 1
    index = args.process_id if args.process_id is not None else (
        env.get("THESEUS_PROCESS_ID") or env.get("SLURM_PROCID") or 0)
    count, index = _int("the process count", count), _int("the process id", index)
    if count < 1 or not 0 <= index < count:
        raise BadInput(f"process id {index} is not in [0, {count}) (process count {count})")
    coordinator = args.coordinator or env.get("THESEUS_COORDINATOR")
    if not coordinator and env.get("SLURM_JOB_NODELIST") and env.get("THESEUS_COORDINATOR_PORT"):
        coordinator = f"{_slurm_first_host(env['SLURM_JOB_NODELIST'])}:{env['THESEUS_COORDINATOR_PORT']}"
    if count > 1 and not coordinator:
        raise BadInput(f"{count} processes need a coordinator address: --coordinator HOST:PORT or THESEUS_COORDINATOR")
    if coordinator and (":" not in coordinator or not coordinator.rsplit(":", 1)[1].isdigit()):
        raise BadInput(f"coordinator must be HOST:PORT, got {coordinator!r}")
    return ProcessInfo(index, count, coordinator)


def _add_process_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--coordinator", default=None, help="HOST:PORT of process 0's coordinator")
    parser.add_argument("--num-processes", type=int, default=None)
    parser.add_argument("--process-id", type=int, default=None)


def log_path(spec: LaunchSpec, process_id: int) -> str:
    """Root-relative path of process ``process_id``'s output for this launch.

    >>> spec = LaunchSpec("k/x", "run", "", "/r", nonce="abcdef")
    >>> log_path(spec, 1)
    'objects/Z2VuZXJhbC5kZWZhdWx0LnJ1bjphYmNkZWY6MA/logs/process-1.log'
    """
    return f"{layout.objects(spec.first_node().id)}/{layout.PROCESS_LOGS}/process-{process_id}.log"


# ---------------------------------------------------------------------- the worker


def _read_spec(path: str) -> LaunchSpec:
    try:
        with open(path, encoding="utf-8") as f:
            return LaunchSpec.from_json(f.read())
    except FileNotFoundError:
        raise BadInput(f"no launch spec at {path}") from None
    except ValueError as e:
        raise BadInput(f"{path}: {e}") from None


def check_spec(spec: LaunchSpec, num_processes: int = 1):
    """The job class and validated config of ``spec`` for ``num_processes`` processes; bad input raises BadInput.

    Runs before anything starts (launchers call it too): it imports the spec's experiments
    (the user's files: a process that imported them already reuses their modules), then
    refuses an experiment that fails to import, an unknown job key, config that does not
    validate. Autobatch (``per_device_batch_size=-1``) runs on any number of processes:
    each probes its own devices and all use the smallest size any of them fits.

    >>> spec = LaunchSpec("gpt/train/pretrain", "t", "training:\\n  per_device_batch_size: -1\\n", "/r")
    >>> check_spec(spec, 2)[1].training.per_device_batch_size  # resolved by the job, on every process
    -1
    >>> try:
    ...     check_spec(spec.replace(config_yaml="training:\\n  tokenz: 5\\n"), 2)
    ... except BadInput as e:
    ...     print(str(e).split(";")[0])
    unknown config key 'training.tokenz'
    """
    try:
        import_shipped(spec.experiments)
        cls = get_job(spec.job_key)
        return cls, configs.from_yaml(cls.Config, spec.config_yaml)
    except errors.BadInput as e:  # what the spec got wrong; any other error is a bug, left to propagate
        raise BadInput(str(e)) from None


def _initialize(info: ProcessInfo) -> None:
    """``jax.distributed.initialize`` with short timeouts; the coordinator binds to 127.0.0.1 when local."""
    import jax  # lazily: the supervisor and the launchers that import this module never need JAX

    host, port = info.coordinator.rsplit(":", 1)
    wanted = {
        "coordinator_address": info.coordinator,
        "num_processes": info.num_processes,
        "process_id": info.process_id,
        "initialization_timeout": int(os.environ.get("THESEUS_INIT_TIMEOUT", "120")),
        "heartbeat_timeout_seconds": int(os.environ.get("THESEUS_HEARTBEAT_TIMEOUT", "30")),
        "shutdown_timeout_seconds": int(os.environ.get("THESEUS_SHUTDOWN_TIMEOUT", "120")),
    }
    if host in ("127.0.0.1", "localhost"):
        wanted["coordinator_bind_address"] = f"127.0.0.1:{port}"
    accepted = inspect.signature(jax.distributed.initialize).parameters
    jax.distributed.initialize(**{k: v for k, v in wanted.items() if k in accepted})


def _record_failure(spec: LaunchSpec, cfg_yaml: str, error: str, source: str | None = None) -> None:
    """Record the launched run as failed at its first node (job key, config and the class's source too)."""
    node = spec.first_node()
    with Store(spec.root).writer() as w:
        w.job(node, spec.job_key, cfg_yaml, source=source)
        w.failed(node, error)


def run_worker(spec: LaunchSpec, info: ProcessInfo) -> int:
    """Initialize ``jax.distributed`` (N > 1), build the job from ``spec`` and run it; the exit code.

    >>> import signal, tempfile
    >>> from theseus.store import Store
    >>> before = signal.getsignal(signal.SIGTERM)  # run_worker takes SIGTERM over: restored below
    >>> spec = LaunchSpec("data/tokenize/pydoc", "tok", "data:\\n  max_samples: 3\\n", tempfile.mkdtemp())
    >>> run_worker(spec, ProcessInfo()), Store(spec.root).find().nonce(spec.nonce).last().name
    (0, 'general.default.tok')
    >>> run_worker(LaunchSpec("k/nope", "run", "", spec.root), ProcessInfo())  # an unknown job key: refused
    2
    >>> _ = signal.signal(signal.SIGTERM, before)
    """
    signal.signal(signal.SIGTERM, _terminated)
    try:
        return _work(spec, info)
    except Terminated as e:
        print(f"[theseus bootstrap] {e}", file=sys.stderr, flush=True)
        return 128 + signal.SIGTERM


@dataclasses.dataclass(frozen=True)
class Written:
    """What earlier starts of a spec wrote of its lineage: whether it finished, its latest checkpoint node
    and the seq of its last node (past the checkpoint when a start was killed before it could commit one)."""

    finished: bool
    checkpoint: Node | None
    last_seq: int


def restart_point(spec: LaunchSpec) -> Written | None:
    """The spec's lineage as earlier starts left it; None when none wrote it (this is the first start).

    >>> import tempfile
    >>> spec = LaunchSpec("data/tokenize/pydoc", "tok", "data:\\n  max_samples: 3\\n", tempfile.mkdtemp())
    >>> restart_point(spec) is None
    True
    >>> with Store(spec.root).writer() as w:
    ...     w.job(spec.first_node(), spec.job_key, spec.config_yaml)
    >>> restart_point(spec)
    Written(finished=False, checkpoint=None, last_seq=0)
    """
    first = spec.first_node()
    store = Store(spec.root)
    try:
        record = store.run_record(first.nonce, name=first.name)
        lineage = store.find().name(first.name).nonce(first.nonce)
        checkpoints, last = lineage.checkpoint().all(), lineage.last()
    except (EmptyResult, FileNotFoundError):  # no record of it, or no root yet: nothing was written
        return None
    return Written(bool(record.get("_finished")), checkpoints[-1] if checkpoints else None, last.seq)


def _work(spec: LaunchSpec, info: ProcessInfo) -> int:
    logs.setup(os.environ.get("THESEUS_LOG_LEVEL") or "INFO")
    try:
        cls, cfg = check_spec(spec, info.num_processes)
    except BadInput as e:
        print(f"error: {e}", file=sys.stderr, flush=True)
        return EXIT_BAD_INPUT
    if info.distributed:
        _initialize(info)
        signal.signal(signal.SIGTERM, _terminated)  # JAX's preemption notifier took SIGTERM over: take it back
    logger.info(f"BOOTSTRAP | process {info.process_id}/{info.num_processes} | {spec.job_key} "
                f"{spec.run_name} nonce {spec.nonce} | root {spec.root}")
    base = Node.from_id(spec.base_node) if spec.base_node else None
    branch = base is not None and not spec.resume
    if spec.auto_resume:
        written = restart_point(spec)
        if written is not None and written.finished:
            logger.info(f"BOOTSTRAP | the run {spec.nonce} finished in an earlier start: nothing to resume")
            return EXIT_OK
        if written is not None and (written.checkpoint is None or written.checkpoint.seq < written.last_seq):
            # killed before it committed a checkpoint at its last node: continuing the lineage from an
            # earlier one would write its later nodes twice, so it is left for a resume that branches
            where = f"seq {written.checkpoint.seq}" if written.checkpoint is not None else "none"
            print(f"error: run {spec.nonce} went on to seq {written.last_seq} past its last checkpoint ({where}): "
                  f"not resumed automatically; `theseus run {spec.job_key} {spec.run_name} {spec.root} --resume` "
                  "continues it from that checkpoint", file=sys.stderr, flush=True)
            return EXIT_FAILED
        if written is not None:
            logger.info(f"BOOTSTRAP | resuming {spec.nonce} from its checkpoint at seq {written.checkpoint.seq}")
            base, branch = written.checkpoint, False
    try:
        job = cls.create(spec.root, spec.run_name, cfg, base=base, branch=branch, nonce=spec.nonce)
    except Exception:
        text = traceback.format_exc()
        print(text, file=sys.stderr, flush=True)
        if info.process_id == 0:
            _record_failure(spec, configs.to_yaml(cfg), text, job_source(cls))
        return EXIT_FAILED
    try:
        job()
    except Preempted as e:  # recorded by the job's lifecycle (process 0)
        print(f"[theseus bootstrap] {e}", file=sys.stderr, flush=True)
        return EXIT_PREEMPTED
    except Exception:  # recorded by the job's lifecycle (process 0)
        traceback.print_exc()
        return EXIT_FAILED
    finally:
        close = getattr(job, "close", None)
        if callable(close):
            close()
    logger.info(f"BOOTSTRAP | process {info.process_id} | done at node {job.node.id}")
    return EXIT_OK


# ---------------------------------------------------------------------- the supervisor


def _pump(stream, sinks) -> None:
    for chunk in iter(lambda: stream.readline(), b""):
        for sink in sinks:
            try:
                sink.write(chunk)
                sink.flush()
            except (OSError, ValueError):
                pass


def publish_log(spec: LaunchSpec, process_id: int, data: bytes) -> str:
    """Publish ``data`` as process ``process_id``'s output of the launch; returns the path.

    Published files are never rewritten: a second output of the same process and
    launch (a relaunch of the same spec) becomes ``process-<i>.2.log``, and so on.

    >>> import tempfile
    >>> spec = LaunchSpec("k/x", "run", "", tempfile.mkdtemp(), nonce="abcdef")
    >>> [publish_log(spec, 0, b"out").rsplit("/", 1)[1] for _ in range(2)]
    ['process-0.log', 'process-0.2.log']
    """
    store = Store(spec.root)
    base = log_path(spec, process_id)
    path, n = store.path(base), 1
    while store.fs.exists(path):
        n += 1
        path = store.path(base[: -len(".log")] + f".{n}.log")
    rootfs.publish(store.fs, path, data)
    return path


def _tail(data: bytes, lines: int = TAIL_LINES) -> str:
    return "\n".join(data.decode(errors="replace").splitlines()[-lines:])


def _record_crash(spec: LaunchSpec, returncode: int, output: bytes) -> bool:
    """On process 0: record the run as failed when the worker ended badly without recording it."""
    try:
        status = Store(spec.root).run_record(spec.nonce).get("_status")
    except EmptyResult:
        status = None
    if status in ("failed", "finished", "preempted"):
        return False  # the job recorded its own end
    how = f"killed by signal {-returncode}" if returncode < 0 else f"exited with code {returncode}"
    _record_failure(spec, spec.config_yaml, f"process 0 {how}; last lines of its output:\n{_tail(output)}")
    return True


def supervise(spec_path: str, info: ProcessInfo, timeout: float | None = None) -> int:
    """Run the worker in a child, tee its output, publish it into the root; the worker's exit code.

    >>> supervise("/nonexistent/spec.json", ProcessInfo())
    Traceback (most recent call last):
    ...
    theseus.dispatch.bootstrap.BadInput: no launch spec at /nonexistent/spec.json
    """
    spec = _read_spec(spec_path)
    command = [sys.executable, "-m", "theseus.dispatch.bootstrap", "--worker", spec_path, *info.args()]
    env = {**os.environ, **spec.env, "PYTHONUNBUFFERED": "1"}
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)

    def forward(signum, frame):  # to the worker while it runs; ignored while the output is published
        if child.poll() is None:
            child.send_signal(signum)

    previous = {signum: signal.signal(signum, forward) for signum in (signal.SIGTERM, signal.SIGINT)}
    try:
        output, returncode = _watch(child, timeout)
        if returncode == EXIT_BAD_INPUT:
            return returncode  # refused before anything was written; the message is on stdout
        try:
            path = publish_log(spec, info.process_id, output)
            print(f"[theseus bootstrap] process {info.process_id} output published to {path}", flush=True)
            if returncode != EXIT_OK and info.process_id == 0 and _record_crash(spec, returncode, output):
                print(f"[theseus bootstrap] recorded the run {spec.nonce} as failed (code {returncode})", flush=True)
        except Exception as e:  # never hide the worker's own exit code
            print(f"[theseus bootstrap] could not publish the output into {spec.root}: {e}", flush=True)
        return returncode if returncode in ENDINGS else EXIT_FAILED
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _watch(child: subprocess.Popen, timeout: float | None) -> tuple[bytes, int]:
    """Tee the child's output to stdout and memory until it exits (stopping it at ``timeout``)."""
    with tempfile.TemporaryFile() as capture:
        out = getattr(sys.stdout, "buffer", sys.stdout)
        pump = threading.Thread(target=_pump, args=(child.stdout, [out, capture]), daemon=True)
        pump.start()
        try:
            returncode = child.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            child.terminate()
            try:
                returncode = child.wait(timeout=15)
            except subprocess.TimeoutExpired:
                child.kill()
                returncode = child.wait()
            pump.join(timeout=10)
            note = f"\n[theseus bootstrap] deadline of {timeout:.0f} s passed: worker stopped\n".encode()
            capture.write(note)
            out.write(note)
            out.flush()
        pump.join(timeout=10)
        capture.seek(0)
        return capture.read(), returncode



# ---------------------------------------------------------------------- remote hosts


def bootstrap_script(spec: LaunchSpec, work_dir: str, tarball: str, spec_path: str, *, args: Sequence[str] = (),
                     python: str = "python3", env: Mapping[str, str] | None = None, sync: bool = True) -> str:
    """A bash script that prepares a host and runs the bootstrap there.

    It unpacks ``tarball`` (the ``package_code`` tar.gz, already on the host) into
    ``<work_dir>/<spec.revision>`` once (atomically: into a temporary folder, then
    renamed, so concurrent processes on one host agree), exports ``spec.env`` and
    ``env``, then with ``sync=True`` runs ``uv sync`` with the spec's groups (only
    those: ``--no-default-groups``; uv itself is installed with ``python -m pip``
    into ``<work_dir>/.uv`` when the host has none) and ``exec uv run --no-sync python
    -m theseus.dispatch.bootstrap SPEC_PATH ARGS``; with ``sync=False`` it runs
    ``python`` directly with the unpacked code first on ``PYTHONPATH`` (a host whose
    interpreter already has the dependencies).

    >>> spec = LaunchSpec("k/x", "run", "", "/r", nonce="abcdef", revision="abc", groups=("cpu",))
    >>> script = bootstrap_script(spec, "/w", "/w/abc.tar.gz", "/w/spec.json", args=["--process-id", "0"])
    >>> "sync --no-default-groups --group cpu" in script, script.splitlines()[-1]
    (True, 'exec "$UV" run --no-sync python -m theseus.dispatch.bootstrap /w/spec.json --process-id 0')
    """
    if not spec.revision:
        raise BadInput("the spec has no revision: package the code first (package_code) and set spec.revision")
    q = shlex.quote
    lines = ["#!/usr/bin/env bash", "set -euo pipefail"]
    for key, value in {**spec.env, **(env or {})}.items():
        lines.append(f"export {key}={q(value)}")
    lines += [
        f"WORK_ROOT={q(work_dir)}",
        f"CODE=\"$WORK_ROOT\"/{q(spec.revision)}",
        'mkdir -p "$WORK_ROOT"',
        'if [ ! -d "$CODE" ]; then',
        '  TMP=$(mktemp -d "$WORK_ROOT/.unpack.XXXXXX")',
        f'  tar -xzf {q(tarball)} -C "$TMP"',
        '  mv -T "$TMP" "$CODE" 2>/dev/null || rm -rf "$TMP"  # another process unpacked it first',
        "fi",
        'cd "$CODE"',
    ]
    command = " ".join(q(a) for a in ["-m", "theseus.dispatch.bootstrap", spec_path, *args])
    if sync:
        groups = " ".join(f"--group {q(g)}" for g in spec.groups)
        lines += [
            'UV=$(command -v uv || true)',
            'if [ -z "$UV" ]; then',
            '  if [ ! -x "$WORK_ROOT/.uv/bin/uv" ]; then',
            f'    {q(python)} -m venv "$WORK_ROOT/.uv" && "$WORK_ROOT/.uv/bin/python" -m pip install -q uv',
            "  fi",
            '  UV="$WORK_ROOT/.uv/bin/uv"',
            "fi",
            f'"$UV" sync --no-default-groups {groups}'.rstrip() if groups else '"$UV" sync',
            f'exec "$UV" run --no-sync python {command}',
        ]
    else:
        lines += ['export PYTHONPATH="$CODE${PYTHONPATH:+:$PYTHONPATH}"', f"exec {q(python)} {command}"]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------- command line


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m theseus.dispatch.bootstrap SPEC [--coordinator --num-processes --process-id --timeout]``.

    >>> main(["/nonexistent/spec.json"])
    error: no launch spec at /nonexistent/spec.json
    2
    """
    parser = argparse.ArgumentParser(prog="python -m theseus.dispatch.bootstrap",
                                     description="Run one process of a launched theseus job.")
    parser.add_argument("spec", help="path of the launch spec (JSON)")
    _add_process_args(parser)
    parser.add_argument("--timeout", type=float, default=None, help="stop the worker after this many seconds")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    try:
        info = process_info(args)
        if args.worker:
            return run_worker(_read_spec(args.spec), info)
        return supervise(args.spec, info, args.timeout)
    except BadInput as e:
        print(f"error: {e}", flush=True)
        return EXIT_BAD_INPUT


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
