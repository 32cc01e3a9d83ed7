"""The job registry and the Job lifecycle.

A job is a class registered under a key (``data/tokenize/fineweb``,
``gpt/train/pretrain``) with a typed default config and a lifecycle that
writes every moment of a run to the store:

- ``Job.create(store, run_name, config)`` validates the config, makes the first
  node (seq 0 of a fresh lineage, or the node after ``base`` when restored) and
  calls ``setup()``. Nothing is written to the root: bad input fails here.
- ``job()`` runs it: records the job key and config YAML at the first node
  (status ``running``), calls ``run()``, then records ``finished`` on the
  current node; an exception records ``failed`` with the traceback text and is
  re-raised, except ``Preempted`` (a job that stopped early on request after
  committing a checkpoint), which records the status ``preempted``.
- ``tick()`` moves to the next node (seq + 1, parent = the previous id);
  ``save()`` writes this node's artifacts.

Writing a job
-------------
Subclass ``Job``, register it with ``@job("group/verb/name", "One line.")`` (or
let the class docstring's first line be the description) and make sure its
module is imported: a built-in job's module is listed in ``JOB_MODULES``; a user's
experiment file is imported with ``theseus --import FILE`` or
``theseus.experiments.import_experiment(path)``. Every run records its job key and
where the class came from (``_job_source``, see ``theseus.experiments.job_source``).
A subclass implements:

- ``Config``: a dataclass of typed defaults (nested dataclasses for sections,
  every field with a default). ``self.config`` is a struct-mode OmegaConf view
  of it: editable in ``setup()`` (e.g. resolve ``-1`` to a probed value), read-only
  from then on, and recorded as YAML when the run starts.
- ``run(self)``: the work. Write records with ``self.writer.write(self.node, {...})``
  (scalars only), call ``self.tick()`` whenever something new happens (one
  step, one progress report), log with ``self.log``. Its return value is what
  ``job()`` returns.
- optionally ``setup(self)``: check inputs and build state; nothing is written
  yet, so raise on bad input here. ``self.base`` is ``None`` for a fresh run, or
  the ``Node`` to restore from (then ``self.node`` is ``base.next()``, or seq 0 of
  a branch); the default ``setup`` refuses a base, so a restorable job
  overrides it without calling super().
- optionally ``save(self)``: checkpoint this node: ``folder = super().save()``
  writes config.yaml and job.json into ``store.objects(node)``; then write the
  state there, and call ``self.writer.checkpoint(self.node, relative_path)``
  last (commit order).
- optionally ``tick(self)`` (do one unit of work, then ``super().tick()``) and
  ``sync(self)`` (a multi-host barrier); set ``self.primary = False`` in
  ``setup()`` on processes that must not write log records.

Do not override ``__init__``. A job gets: ``self.store`` (the ``Store``),
``self.config`` (``DictConfig``), ``self.node`` (the current ``Node``),
``self.base`` (``Node | None``), ``self.writer`` (the store writer, only while
``job()`` runs), ``self.log`` (the loguru logger), ``self.name`` (the full run
name ``project.group.run``; ``self.node.run`` is the last part), ``self.key``
and ``self.description``. Its log lines follow ``JOB <run> | ...``.

>>> import tempfile, dataclasses
>>> @dataclasses.dataclass
... class CountConfig:
...     n: int = 3
>>> @job("doc/count", "Count to n, one node per number.")
... class Count(Job):
...     Config = CountConfig
...     def run(self):
...         for i in range(self.config.n):
...             self.writer.write(self.node, {"count/i": i})
...             self.tick()
...         return self.node.seq
>>> Count.create(tempfile.mkdtemp(), "count-run", {"n": 2})()
2
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import json
import os
import re
import traceback
from collections.abc import Iterable, Iterator
from typing import Any, ClassVar

from loguru import logger
from omegaconf import DictConfig, OmegaConf

from theseus import config as configs
from theseus.errors import BadInput, TheseusError
from theseus.experiments import import_hint, job_source
from theseus.registry import Registry, import_registering
from theseus.store import Store, nonces
from theseus.store import fs as rootfs
from theseus.store.claim import claim
from theseus.store.layout import CONFIG_FILE, JOB_FILE
from theseus.store.node import Node
from theseus.store.status import PREEMPTED

__all__ = ["EXIT_PREEMPTED", "JOB_MODULES", "Job", "NotRestorable", "Preempted", "UnknownJobError", "get_job",
           "import_registering", "job", "job_json", "key_of", "missing_job", "registry"]

#: Modules imported (once, when the registry is first read) to register the built-in jobs.
#: A module that does not exist yet is skipped; add yours here or import it before use.
JOB_MODULES: list[str] = ["theseus.data.jobs", "theseus.data.preference", "theseus.train.jobs",
                          "theseus.train.dpo_jobs", "theseus.train.sft", "theseus.train.lora_jobs",
                          "theseus.train.lora_dpo_jobs", "theseus.replay.evaluate", "theseus.hf.jobs",
                          "theseus.hf.peft_jobs"]

_LOADED: set[str] = set()
_DRAWS = 8  # nonces a job draws for a new lineage before a clash is an error (clashes are rare: one in a row is chance)
_KEY = re.compile(r"^[a-z0-9][a-z0-9_\-]*(/[a-z0-9][a-z0-9_\-]*)*$")


#: The exit code of a process whose job was preempted (SIGTERM) and committed a checkpoint to resume from:
#: EX_TEMPFAIL of sysexits.h, "try again later"; distinct from a failure (1) and from a kill (143, 137).
EXIT_PREEMPTED = 75


class Preempted(TheseusError):
    """The job stopped before its end on request (SIGTERM) after committing a checkpoint at ``node``.

    Of the error family but of no kind: not bad input, and not a bug either.

    ``job()`` records the run's status ``preempted`` (not failed) and re-raises it; resuming the
    run (``theseus run ... --resume``, ``q.find()...resume()``) continues from ``node``.

    >>> e = Preempted(Node("general.default.r", "abcdef", 0).next(), step=1)
    >>> e.step, str(e).startswith("preempted after step 1")
    (1, True)
    """

    def __init__(self, node: Node, step: int):
        super().__init__(f"preempted after step {step}; the checkpoint at node {node.id} "
                         f"({node.name}:{node.nonce}:{node.seq}) resumes it")
        self.node, self.step = node, step


class NotRestorable(BadInput, NotImplementedError):
    """A job asked to restore from a node that only runs afresh (bad input, not a bug).

    >>> issubclass(NotRestorable, NotImplementedError) and issubclass(NotRestorable, BadInput)
    True
    """


class UnknownJobError(BadInput, KeyError):
    """A job key that is not registered; the message names close matches.

    >>> try:
    ...     get_job("data/tokenize/finweb")
    ... except UnknownJobError as e:
    ...     print(e)
    unknown job 'data/tokenize/finweb'; did you mean data/tokenize/fineweb? (`theseus jobs` lists them all)
    """

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "unknown job"


def job(key: str, description: str | None = None):
    """Class decorator: register a ``Job`` subclass under ``key``.

    ``description`` is the one line ``theseus jobs`` prints (default: the first
    line of the class docstring).

    >>> import dataclasses
    >>> @dataclasses.dataclass
    ... class NoConfig:
    ...     pass
    >>> @job("doc/noop")
    ... class Noop(Job):
    ...     '''Do nothing, successfully.'''
    ...     Config = NoConfig
    ...     def run(self):
    ...         return None
    >>> registry("doc/noop")["doc/noop"].description
    'Do nothing, successfully.'
    """
    if not isinstance(key, str) or not _KEY.match(key):
        raise BadInput(f"invalid job key {key!r}: use lowercase words separated by '/', e.g. 'data/tokenize/fineweb'")

    def check(cls: type) -> None:
        if not (isinstance(cls.Config, type) and dataclasses.is_dataclass(cls.Config)):
            raise TypeError(f"job {key!r}: {cls.__name__}.Config must be a dataclass of typed defaults")

    return _JOBS.register(key, description, check, key=key)


def load_job_modules(modules: Iterable[str] | None = None) -> None:
    """Import the modules that register jobs (``JOB_MODULES`` by default); missing ones are skipped.

    >>> load_job_modules(); "data/tokenize/pydoc" in registry()
    True
    """
    import_registering(JOB_MODULES if modules is None else modules, _LOADED)


def registry(prefix: str = "", load: bool = True) -> dict[str, type[Job]]:
    """The registered jobs whose key starts with ``prefix``, sorted by key; with ``load=False`` only those
    registered so far, ``JOB_MODULES`` not imported (they import JAX: ``theseus jobs`` reads its built-in
    jobs from `theseus.catalog` instead).

    >>> sorted(registry("data/tokenize/"))[:2]
    ['data/tokenize/addition', 'data/tokenize/alpaca']
    >>> set(registry(load=False)) >= set(registry("data/"))   # loaded above, so registered now
    True
    """
    if load:
        load_job_modules()
    return _JOBS.sorted(prefix)


def get_job(key: str, source: str | None = None) -> type[Job]:
    """The job class registered under ``key``; an unknown key names close matches.

    ``source`` is where a run recorded the class came from (``_job_source``): when the
    key is not registered, the error says what to import instead of guessing keys.

    >>> cls = get_job("data/tokenize/fineweb")
    >>> cls.key, issubclass(cls, Job)
    ('data/tokenize/fineweb', True)
    >>> get_job("mylab/train/mix", "/home/me/mix.py:Mix")
    Traceback (most recent call last):
    ...
    theseus.jobs.UnknownJobError: job 'mylab/train/mix' is not registered in this process (its run records it as /home/me/mix.py:Mix): import /home/me/mix.py first: ...
    """  # noqa: E501 - a doctest's expected output, printed on one line
    jobs = registry()
    if key in jobs:
        return jobs[key]
    if source:
        raise UnknownJobError(_not_registered(key, source))
    near = _close_keys(str(key), list(jobs))
    hint = f"; did you mean {', '.join(near)}?" if near else ""
    raise UnknownJobError(f"unknown job {key!r}{hint} (`theseus jobs` lists them all)")


def key_of(cls: type) -> str:
    """The registry key of job class ``cls``; a class that is not registered is a clear error.

    >>> key_of(get_job("data/tokenize/pydoc"))
    'data/tokenize/pydoc'
    >>> class Unregistered(get_job("data/tokenize/pydoc")):
    ...     pass
    >>> key_of(Unregistered)
    Traceback (most recent call last):
    ...
    theseus.errors.BadInput: job class Unregistered is not registered: decorate it with @job('some/key') (its base class is registered as 'data/tokenize/pydoc')
    """  # noqa: E501 - a doctest's expected output, printed on one line
    if not (isinstance(cls, type) and issubclass(cls, Job)):
        raise TypeError(f"expected a job key (str) or a registered subclass of theseus.jobs.Job, got {cls!r}")
    if not _JOBS.holds(cls.__dict__.get("key", ""), cls):
        base = f" (its base class is registered as {cls.key!r})" if cls.key and "key" not in cls.__dict__ else ""
        raise BadInput(f"job class {cls.__qualname__} is not registered: decorate it with @job('some/key'){base}")
    return cls.key


def missing_job(key: str | None, source: str | None) -> str | None:
    """Why a run of job ``key`` recorded from ``source`` cannot be rebuilt in this process, or None.

    Imports nothing (a root is data): a key registered in this process, or one whose
    source is a built-in job module (``JOB_MODULES``: ``registry()`` loads those), is
    fine; so is a run that recorded no source (nothing could be named).

    >>> missing_job("mylab/train/mix", "/home/me/mix.py:Mix")
    "job 'mylab/train/mix' is not registered in this process (its run records it as /home/me/mix.py:Mix): import /home/me/mix.py first: ..."
    >>> missing_job("gpt/train/pretrain", "theseus.train.jobs:Pretrain") is None
    True
    """  # noqa: E501 - a doctest's expected output, printed on one line
    if not key or not source or key in _JOBS or source.rpartition(":")[0] in JOB_MODULES:
        return None
    return _not_registered(key, source)


def _not_registered(key: str, source: str) -> str:
    return f"job {key!r} is not registered in this process (its run records it as {source}): {import_hint(source)}"


def _close_keys(key: str, keys: list[str], n: int = 3) -> list[str]:
    """Registered keys like ``key``: by the whole key, or by its last part (``finweb`` ~ ``fineweb``)."""
    tail = key.rsplit("/", 1)[-1]
    scored = []
    for k in keys:
        whole = difflib.SequenceMatcher(None, key, k).ratio()
        last = difflib.SequenceMatcher(None, tail, k.rsplit("/", 1)[-1]).ratio()
        score = max(whole if whole >= 0.85 else 0, last if last >= 0.7 else 0, 1.0 if tail and tail in k else 0)
        if score:
            scored.append((-score, k))
    return [k for _, k in sorted(scored)[:n]]


def job_json(key: str, node: Node, base: str | None, *, step: int | None = None, **more: Any) -> str:
    """The text of ``job.json``, the file that names the node an artifact or checkpoint folder was saved
    for: the job's ``key``, ``node``'s name, nonce, seq, id and parent, the ``step`` (checkpoints only),
    the ``base`` node id, then ``more`` fields (an import names its source folder). Every writer of
    ``job.json`` goes through here, so the audit and the restore checks read one shape.

    >>> node = Node("tok", "ab12cd", 0).next()
    >>> spec = json.loads(job_json("data/tokenize/pydoc", node, None, step=7))
    >>> spec["node"] == node.id, spec["seq"], spec["parent"] == node.parent, spec["step"], spec["base"]
    (True, 1, True, 7, None)
    >>> list(json.loads(job_json("k", node, None, imported="/m")))  # no step: not a checkpoint's
    ['key', 'name', 'nonce', 'seq', 'node', 'parent', 'base', 'imported']
    """
    spec: dict[str, Any] = {"key": key, "name": node.name, "nonce": node.nonce, "seq": node.seq, "node": node.id,
                            "parent": node.parent}
    if step is not None:
        spec["step"] = step
    return json.dumps({**spec, "base": base, **more}, indent=2)


def _as_store(store: Store | str | os.PathLike) -> Store:

    return store if isinstance(store, Store) else Store(os.fspath(store))


class _NullWriter:
    """The writer of a non-primary process: accepts every call, writes nothing."""

    def __getattr__(self, name: str):
        return lambda *args, **kwargs: None

    def __enter__(self) -> _NullWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


class Job:
    """Base class of every job; see the module docstring for how to write one.

    >>> import tempfile
    >>> job = get_job("data/tokenize/pydoc").create(tempfile.mkdtemp(), "tok", {"data": {"max_samples": 5}})
    >>> job.node.seq, job.node.name
    (0, 'general.default.tok')
    """

    key: ClassVar[str] = ""
    description: ClassVar[str] = ""
    Config: ClassVar[type] = None  # a dataclass of typed defaults, set by each subclass
    #: Whether this process writes log records (set it in ``setup()``, e.g. ``jax.process_index() == 0``);
    #: other processes get a writer that drops records.
    primary: bool = True
    #: Whether a checkpoint restored in ``setup()`` is first checked against its MANIFEST (``create(verify=...)``).
    verify: bool = True

    def __init__(self, store: Store, node: Node, config: DictConfig, base: Node | None = None):
        """Use ``Job.create``; this only stores the attributes."""
        self.store = store
        self.node = node
        self.config = config
        self.base = base
        self.name = node.name
        self.writer = None
        self.log = logger.bind(job=self.key, run=node.run)
        self._ran = False
        self._claimed = False
        self._redraw = False

    # -- building -----------------------------------------------------------

    @classmethod
    def defaults(cls) -> DictConfig:
        """A fresh, editable struct-mode config of this job's defaults.

        >>> get_job("data/tokenize/fineweb").defaults().data.fineweb.snapshot
        'CC-MAIN-2022-21'
        """
        if cls.Config is None:
            raise TypeError(f"{cls.__name__} has no Config dataclass")
        return configs.structured(cls.Config)

    @classmethod
    def create(cls, store: Store | str | os.PathLike, name: str, config: Any = None, *,
               overrides: Iterable[str] = (), base: Node | None = None, branch: bool = False,
               nonce: str | None = None, verify: bool = True) -> Job:
        """Validate ``config``, make the first node and ``setup()`` the job; nothing is written.

        ``config`` is a DictConfig, a dict or YAML text of values over the
        defaults (``None``: the defaults); ``overrides`` are ``key=value``
        strings applied after it. With ``base`` (a ``Node``) the job is restored
        from that node: it continues base's lineage at ``base.next()``, or starts
        a new lineage with parent ``base`` when ``branch=True``. ``nonce`` fixes the
        nonce of a new lineage (the processes of a multi-host launch must agree on
        their node ids); by default it is fresh. ``verify=False`` skips checking a
        restored checkpoint's files against its MANIFEST (sha256 of every byte).
        A run that continues base's lineage claims it when it starts (``job()``):
        a second resume of the same node then stops with ``ResumeConflict``.

        >>> import tempfile
        >>> job = get_job("data/tokenize/pydoc").create(tempfile.mkdtemp(), "tok", overrides=["data.max_samples=5"])
        >>> job.config.data.max_samples
        5
        """
        if "key" not in cls.__dict__:
            raise TypeError(f"{cls.__name__} is not registered: decorate it with @job('some/key')")
        cfg = cls.defaults()
        if config is not None:
            cfg = configs.merge(cfg, config)
        cfg = configs.apply_overrides(cfg, list(overrides))
        if base is not None and not isinstance(base, Node):
            base = Node.from_id(base) if isinstance(base, str) else base
        if base is not None and not branch:
            node = base.next()
            if nonce is not None and nonce != base.nonce:
                raise BadInput(f"resuming {base.id} continues nonce {base.nonce!r}; got nonce {nonce!r} "
                                 "(branch=True starts a new lineage with its own nonce)")
        elif nonce is None:
            node = Node.start(name, parent=base)
        else:
            node = Node(name, nonce, 0, base.id if base is not None else None)
        if not isinstance(verify, bool):
            raise TypeError(f"verify must be True or False, got {verify!r}")
        self = cls(_as_store(store), node, cfg, base=base)
        self.verify = verify
        self._redraw = node.seq == 0 and nonce is None  # a nonce it drew: taken in the root, it draws again
        self.log.debug(f"JOB {node.run} | building state")
        if base is None:
            self.log.debug(f"JOB {node.run} | starting anew")
        else:
            self.log.debug(f"JOB {node.run} | restoring from nodeid={base.id}")
        self.setup()
        OmegaConf.set_readonly(self.config, True)
        return self

    def setup(self) -> None:
        """Check inputs and build state before anything is written (override it).

        Raise on bad input: nothing has been written yet. ``self.base`` is None for
        a fresh run, else the node to restore from; the default refuses to restore.

        >>> import tempfile
        >>> job = get_job("data/tokenize/pydoc").create(tempfile.mkdtemp(), "tok")  # create() ran setup()
        >>> job.store.find().all()  # nothing written
        []
        >>> job.base = job.node
        >>> Job.setup(job)
        Traceback (most recent call last):
        ...
        theseus.jobs.NotRestorable: job 'data/tokenize/pydoc' cannot be restored from a node; run it afresh
        """
        if self.base is not None:
            raise NotRestorable(f"job {self.key!r} cannot be restored from a node; run it afresh")

    # -- running ------------------------------------------------------------

    def run(self) -> Any:
        """The work of the job (override). ``self.writer`` is open while it runs.

        >>> import tempfile
        >>> Job.run(get_job("data/tokenize/pydoc").create(tempfile.mkdtemp(), "tok"))
        Traceback (most recent call last):
        ...
        NotImplementedError: TokenizePydoc must implement run()
        """
        raise NotImplementedError(f"{type(self).__name__} must implement run()")

    def sync(self) -> None:
        """Wait for every process of the run (override for multi-host jobs; a no-op here).

        >>> import tempfile
        >>> job = get_job("data/tokenize/pydoc").create(tempfile.mkdtemp(), "tok")
        >>> job.sync() is None and job.store.find().all() == []  # returns at once, writes nothing
        True
        """

    def __call__(self) -> Any:
        """Run the job: record job + config at the first node, ``run()``, record finished/failed.

        >>> import tempfile
        >>> job = get_job("data/tokenize/pydoc").create(tempfile.mkdtemp(), "tok", {"data": {"max_samples": 5}})
        >>> job()["samples"]
        5
        """
        if self._ran:
            raise RuntimeError(f"job {self.name} has already run; create() a new one")
        self._ran = True
        run = self.node.run
        self.log.info(f"JOB {run} | starting")
        with self.recording() as w:
            try:
                self.log.debug(f"JOB {run} | pre-start sync")
                self.sync()
                self.log.info(f"JOB {run} | synchronized and starting with nodeid={self.node.id}")
                result = self.run()
                w.finished(self.node)
            except Preempted as e:
                self.log.warning(f"JOB {run} | {e}")
                w.status(e.node, PREEMPTED)
                raise
            except BaseException as e:
                text = traceback.format_exc()
                self.log.error(f"JOB {run} | failed at nodeid={self.node.id}: {type(e).__name__}: {e}")
                try:
                    w.failed(self.node, text)
                except Exception as record_error:  # never hide the job's own error
                    self.log.error(f"JOB {run} | could not record the failure: {record_error}")
                raise
        self.log.debug(f"JOB {run} | finished, waiting for everyone...")
        self.sync()
        self.log.info(f"JOB {run} | finished")
        return result

    @contextlib.contextmanager
    def recording(self, first: bool = True) -> Iterator[Any]:
        """This run's writer, open and claimed (before its first record: a refused resume writes nothing), as
        ``self.writer`` while the block runs; with ``first`` the job record (job and config at the first node)
        is written first. What ``job()`` runs in, and what a step taken outside ``job()`` reuses (a training
        job's ``tick()``). Only the primary process writes; the others get a writer that drops records.

        >>> import tempfile
        >>> job = get_job("data/tokenize/pydoc").create(tempfile.mkdtemp(), "tok")
        >>> with job.recording() as w:
        ...     opened = job.writer is w
        >>> opened, job.writer is None, job.store.find().first().seq
        (True, True, 0)
        """
        with (self.store.writer() if self.primary else _NullWriter()) as w:
            self.claim(w)
            self.writer = w
            try:
                if first:
                    w.job(self.node, self.key, configs.to_yaml(self.config), source=job_source(type(self)))
                yield w
            finally:
                self.writer = None

    def claim(self, writer) -> None:
        """Claim this run's first node (once, on the writing process): its lineage when it
        continues base's, its nonce when it starts a new lineage.

        ``job()`` calls it before the first record. A second resume of the same node
        raises ``theseus.store.claim.ResumeConflict`` here. A fresh run or a branch claims
        its nonce in the root (``theseus.store.nonces``): when another lineage holds it, a
        nonce the job drew is drawn again (``self.node`` changes), and a nonce it was given
        (``create(nonce=...)``) raises ``NonceTaken``, before anything is written.

        >>> import tempfile
        >>> job = get_job("data/tokenize/pydoc").create(tempfile.mkdtemp(), "tok")
        >>> with job.store.writer() as w:
        ...     job.claim(w)
        >>> job.store.find().all(), nonces.holders(job.store._index, job.node.nonce)  # claimed, nothing written
        ([], {'general.default.tok': 'claim'})
        """
        if self._claimed or not self.primary:
            self._claimed = True
            return
        if self.base is not None and self.node.nonce == self.base.nonce:
            claim(self.store, writer, self.node)
        else:
            for draws in range(_DRAWS, 0, -1):
                try:
                    writer.begin(self.node)
                    break
                except nonces.NonceTaken as e:
                    if not self._redraw:
                        raise nonces.NonceTaken(f"{e}. This job was given its nonce (create(nonce=...), a launch "
                                                "spec): give another one, or none to have one drawn") from None
                    if draws == 1:
                        raise
                    node = Node.start(self.node.name, parent=self.node.parent)
                    self.log.info(f"JOB {self.node.run} | {e}; drawing again: nonce {node.nonce}")
                    self.node = node
        self._claimed = True

    def tick(self) -> Node:
        """Move to the next node (seq + 1, parent = the current id) and return it.

        >>> import tempfile
        >>> job = get_job("data/tokenize/pydoc").create(tempfile.mkdtemp(), "tok")
        >>> job.tick().seq
        1
        """
        self.node = self.node.next()
        return self.node

    def save(self) -> str:
        """Write this node's job spec (``config.yaml``, ``job.json``) into its artifact
        folder and return the folder. Subclasses that checkpoint call this first,
        write their state, then ``self.writer.checkpoint(self.node, relative_path)``.

        >>> import tempfile
        >>> job = get_job("data/tokenize/pydoc").create(tempfile.mkdtemp(), "tok")
        >>> sorted(os.listdir(job.save()))
        ['config.yaml', 'job.json']
        """

        folder = self.store.objects(self.node)
        if not self.primary:
            return folder
        spec = job_json(self.key, self.node, self.base.id if self.base else None)
        rootfs.publish(self.store.fs, f"{folder}/{CONFIG_FILE}", configs.to_yaml(self.config).encode())
        rootfs.publish(self.store.fs, f"{folder}/{JOB_FILE}", spec.encode())
        return folder

    def __repr__(self) -> str:
        n = self.node
        return f"<{type(self).__module__}.{type(self).__name__} {self.key} {n.name}:{n.nonce}:{n.seq} node={n.id}>"


_JOBS = Registry("job key", Job, "@job")  # the only global mutable state of the job system, filled by @job
_REGISTRY: dict[str, type[Job]] = _JOBS.classes  # the registered jobs by key (tests save and restore it)
