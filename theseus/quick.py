"""The quick session: find runs, build a job, edit its config, create and run it.

>>> import tempfile
>>> from theseus.quick import quick
>>> root = tempfile.mkdtemp()
>>> with quick(root) as q:
...     _ = q.build("data/tokenize/pydoc", "tokenize-pydoc")
...     q.config.data.max_samples = 10       # OmegaConf in struct mode: typos raise
...     job = q.create()                     # set up, not run: nothing written yet
...     summary = job()                      # run
...     run = q.find().job("data/tokenize/pydoc").last()
>>> summary["samples"], run.name
(10, 'general.default.tokenize-pydoc')

``init(root)`` returns the same session without a ``with`` block; call ``close()``.
``spec_from_quick(q)`` and ``build_spec(root, job_key, run_name, overrides)`` turn a
session's pending job into the ``LaunchSpec`` that ``theseus.dispatch`` runs elsewhere;
they live here, next to the session they read, so dispatch never imports the session.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from loguru import logger
from omegaconf import DictConfig

from theseus import config as configs
from theseus.dispatch.spec import LaunchSpec
from theseus.errors import BadInput
from theseus.experiments import shipped
from theseus.jobs import Job, get_job, key_of
from theseus.store import EmptyResult, Store, schema, trust
from theseus.store.cursor import Cursor
from theseus.store.node import Node, decode_id, normalize_name

__all__ = ["QuickJob", "QuickSession", "Restored", "SessionCursor", "build_spec", "init", "quick", "spec_from_quick"]


@dataclass(frozen=True)
class Restored:
    """What ``q.find()...resume()`` / ``branch()`` restored: the job ``key`` of run ``name``, its recorded
    ``config_yaml``, the ``node`` it restores from, whether it ``branch``es, whether it ``verify``s the checkpoint.

    >>> from theseus.store.node import Node
    >>> Restored("data/tokenize/pydoc", "general.default.t", "", Node.start("t"), False, True).branch
    False
    """

    key: str
    name: str
    config_yaml: str
    node: Node
    branch: bool
    verify: bool


@dataclass(frozen=True)
class SessionCursor(Cursor):
    """The store's cursor in a quick session (``q.find()``): the same queries, and ``resume()`` / ``branch()``
    restore the result's last node as the session's pending job.

    >>> import tempfile
    >>> with quick(tempfile.mkdtemp()) as q:
    ...     type(q.find().job("data/tokenize/pydoc").latest()).__name__   # every query keeps the session
    'SessionCursor'
    """

    session: QuickSession | None = field(default=None, compare=False)

    def resume(self, verify: bool = True) -> QuickSession:
        """Restore the last node of the result as the session's job to run (``QuickSession.resume_from``).

        ``verify=False`` skips checking the checkpoint's files against its MANIFEST.

        >>> import tempfile
        >>> with quick(tempfile.mkdtemp()) as q:
        ...     _ = q.build("data/tokenize/pydoc", "tok"); q.config.data.max_samples = 3; _ = q()
        ...     q.find().job("data/tokenize/pydoc").resume() is q
        True
        """
        return self.session.resume_from(self, verify=verify)

    def branch(self, verify: bool = True) -> QuickSession:
        """Start a new lineage from the last node of the result (``QuickSession.branch_from``).

        ``verify=False`` skips checking the checkpoint's files against its MANIFEST.

        >>> import tempfile
        >>> with quick(tempfile.mkdtemp()) as q:
        ...     _ = q.build("data/tokenize/pydoc", "tok"); q.config.data.max_samples = 3; _ = q()
        ...     q.find().job("data/tokenize/pydoc").branch().branched
        True
        """
        return self.session.branch_from(self, verify=verify)


class QuickSession:
    """A quick session on one root: ``find()`` runs, ``build()`` a job, edit ``config``, ``create()`` it.

    ``build(job_key, run_name)`` sets the pending job (with the job's default
    config); calling it again replaces the pending job. ``create()`` returns
    the job set up and ready (``job()`` runs it); each ``create()`` makes a new
    run (a fresh nonce) from the pending config.

    >>> import tempfile
    >>> q = init(tempfile.mkdtemp())
    >>> q.build("data/tokenize/fineweb", "tokenize-fineweb") is q
    True
    >>> q.config.data.max_tokens = int(1e7)
    >>> q.job_key, q.run_name, q.config.data.max_tokens
    ('data/tokenize/fineweb', 'tokenize-fineweb', 10000000)
    >>> q.close()
    """

    def __init__(self, root: str | os.PathLike):
        self.root = os.fspath(root)
        self.store = Store(self.root)
        self.job_key: str | None = None
        self.run_name: str | None = None
        self._config: DictConfig | None = None
        self.base: Node | None = None  # the node a resumed/branched job restores from
        self.branched = False
        self._restored: Restored | None = None  # set by resume()/branch()
        self.verify = True  # check a restored checkpoint against its MANIFEST (resume(verify=False) skips it)
        self._closed = False

    # -- finding --------------------------------------------------------------

    def find(self):
        """The store's query cursor (``store.find()``); see the cursor DSL.

        >>> import tempfile
        >>> with quick(tempfile.mkdtemp()) as q:
        ...     q.find().all()
        []
        """
        self._check_open()
        return SessionCursor(**vars(self.store.find()), session=self)

    # -- building -------------------------------------------------------------

    def build(self, job_key: str | type[Job] | None = None, run_name: str | None = None) -> QuickSession:
        """Make ``job_key`` (a registry key, or a registered ``Job`` subclass) the pending job of run
        ``run_name``, with default config.

        Returns the session (so ``q.build(...).create()`` works). An unknown key
        raises naming close matches; a class that is not registered raises too. A
        job of the user's own file works once the file is imported
        (``theseus.experiments.import_experiment(path)``, ``theseus --import FILE``).
        With no arguments it rebuilds the job last
        restored by ``q.find()...resume()`` / ``branch()``, keeping the edits made
        to ``q.config`` since.

        >>> import tempfile
        >>> with quick(tempfile.mkdtemp()) as q:
        ...     _ = q.build("data/tokenize/pydoc", "a")
        ...     _ = q.build("data/tokenize/addition", "b")   # replaces the pending job
        ...     print(q.job_key, q.run_name, "block_size" in q.config.data)
        ...     print(q.build(get_job("data/tokenize/pydoc"), "c").job_key)  # the class itself
        data/tokenize/addition b True
        data/tokenize/pydoc
        """
        self._check_open()
        if job_key is None and run_name is None:
            if self._restored is None:
                raise BadInput("nothing to rebuild: call q.find()...resume() (or branch()) first, "
                                 "or q.build(job_key, run_name) for a new job")
            key, name, config_yaml, base, branch, verify = dataclasses.astuple(self._restored)
            if self._config is not None and (self.job_key, self.run_name, self.base, self.branched, self.verify) == (
                    key, name, base, branch, verify):
                return self  # already the restored job: keep the edits made to q.config since resume()
            cls = get_job(key)
            self.job_key, self.run_name, self.base, self.branched, self.verify = key, name, base, branch, verify
            self._config = configs.from_yaml(cls.Config, config_yaml)
            return self
        if job_key is None or run_name is None:
            raise BadInput("q.build(job_key, run_name) needs both, "
                             "e.g. q.build('data/tokenize/fineweb', 'tokenize-fineweb')")
        if not isinstance(job_key, str):
            job_key = key_of(job_key)
        cls = get_job(job_key)
        normalize_name(run_name)  # checks the run name now, not at create()
        self.job_key, self.run_name = job_key, run_name
        self._config = cls.defaults()
        self.base, self.branched, self.verify = None, False, True
        return self

    def resume_from(self, cursor, verify: bool = True) -> QuickSession:
        """Hook of ``q.find()...resume()``: make the job of the cursor's last node pending, restored from it.

        The run continues that node's lineage (seq + 1); when the lineage already
        went on past that node it becomes a branch instead. ``q.config`` becomes the
        run's recorded config and ``q.build()`` with no arguments rebuilds it. A
        recorded config that is not plain data (YAML tags, resolvers such as
        ``${oc.env:...}``) is a ValueError naming the node. ``verify`` (default True):
        ``create()`` checks the checkpoint's files against its MANIFEST first.

        >>> import tempfile
        >>> with quick(tempfile.mkdtemp()) as q:
        ...     q.build("data/tokenize/pydoc", "tok").config.data.max_samples = 3
        ...     job = q.create(); _ = job()
        ...     _ = q.find().nonce(job.node.nonce).resume()   # calls resume_from
        ...     print(q.job_key, q.run_name, q.config.data.max_samples, q.base.nonce == job.node.nonce)
        data/tokenize/pydoc general.default.tok 3 True
        """
        return self._restore(cursor.last(), branch=False, verify=verify)

    def branch_from(self, cursor, verify: bool = True) -> QuickSession:
        """Hook of ``q.find()...branch()``: like ``resume_from``, but a new lineage
        (fresh nonce, seq 0, parent = the node).

        >>> import tempfile
        >>> with quick(tempfile.mkdtemp()) as q:
        ...     q.build("data/tokenize/pydoc", "tok").config.data.max_samples = 3
        ...     _ = q()
        ...     last = q.find().job("data/tokenize/pydoc").last()
        ...     _ = q.find().job("data/tokenize/pydoc").branch()   # calls branch_from
        ...     print(q.branched, q.base == last, q.run_name)
        True True general.default.tok
        """
        return self._restore(cursor.last(), branch=True, verify=verify)

    def _restore(self, node: Node, branch: bool = False, verify: bool = True) -> QuickSession:
        self._check_open()
        if not isinstance(verify, bool):
            raise TypeError(f"verify must be True or False, got {verify!r}")
        run = self.store.run_record(node.nonce, name=node.name)
        key, config_yaml = run.get(schema.JOB), run.get(schema.CONFIG)
        if not key:
            raise BadInput(f"node {node.id} belongs to a run with no recorded job; it cannot be resumed")
        get_job(key, run.get(schema.JOB_SOURCE))  # not registered here: names what to import, and nothing changes
        if config_yaml:  # a root may come from a stranger: its config is plain data or refused
            trust.plain_config(config_yaml, f"node {node.id} ({node.name}:{node.nonce}:{node.seq})")
        if not branch and self.store.find().name(node.name).nonce(node.nonce).last().seq > node.seq:
            # the lineage already went on past this node: continuing it would write a
            # second history over the same node ids, so the resumed run branches instead
            logger.info(f"RESUME | {node.id} is not the tip of {node.name}:{node.nonce}; "
                        "continuing as a branch (fresh nonce, parent = that node)")
            branch = True
        self._restored = Restored(key, node.name, config_yaml or "", node, branch, verify)
        self._config = None  # a new restore starts from the run's saved config
        return self.build()

    @property
    def config(self) -> DictConfig:
        """The pending job's config: an OmegaConf ``DictConfig`` in struct mode (edit it in place).

        >>> import tempfile
        >>> with quick(tempfile.mkdtemp()) as q:
        ...     q.build("data/tokenize/fineweb", "tokenize-fineweb").config.data.seed
        2357
        """
        if self._config is None:
            raise BadInput("no job built yet: call q.build(job_key, run_name) first (`theseus jobs` lists the keys)")
        return self._config

    def create(self) -> Job:
        """The pending job, created from ``config`` and set up (state built or restored), not run.

        Bad config, tokenizer, paths... raise here and write nothing. Call the
        returned job to run it.

        >>> import tempfile
        >>> with quick(tempfile.mkdtemp()) as q:
        ...     job = q.build("data/tokenize/pydoc", "p").create()
        ...     type(job).__name__, job.node.seq
        ('TokenizePydoc', 0)
        """
        self._check_open()
        if self.job_key is None:
            raise BadInput("no job built yet: call q.build(job_key, run_name) first (`theseus jobs` lists the keys)")
        cls = get_job(self.job_key)
        return cls.create(self.store, self.run_name, self.config, base=self.base, branch=self.branched,
                          verify=self.verify)

    def shard(self, tp: int | None = None, fsdp: bool | None = None, zero: bool | None = None) -> QuickSession:
        """Choose the layout of the pending training job: tensor-parallel degree, FSDP, ZeRO-1.

        >>> import tempfile
        >>> with quick(tempfile.mkdtemp()) as q:
        ...     q.build("gpt/train/pretrain", "t").shard(tp=2, fsdp=True).config.shard.tp
        2
        """
        if "shard" not in self.config:
            raise BadInput(f"job {self.job_key!r} has no shard settings; only training jobs are sharded")
        for key, value in (("tp", tp), ("fsdp", fsdp), ("zero", zero)):
            if value is not None:
                self.config.shard[key] = value
        return self

    def submit(self, chip: str = "cpu", n: int = 1, cluster: str | list[str] | None = None,
               inventory=None, dry_run: bool = False, **options):
        """Run the pending job on a host of the inventory with ``n`` x ``chip`` (``theseus submit``).

        ``cluster`` restricts the choice to those clusters; ``inventory`` is a path
        (default ``~/.theseus.yaml``) or a loaded ``Inventory``. The run writes into the
        chosen cluster's root; a resumed job must come from that root. ``options``:
        ``memory_gb``, ``cpus``, ``allow_dirty``, ``repo``, ``timeout`` and the
        launcher's (``uv``, ``known_hosts``). Returns the ``Submission`` (with
        ``dry_run=True`` its ``plan`` only, nothing started).

        >>> import tempfile
        >>> from theseus.dispatch.inventory import parse_inventory
        >>> inv = parse_inventory("clusters: [{name: lab, root: /r, work_dir: /w}]\\n"
        ...                       "hosts: [{name: hpc, type: slurm, cluster: lab, chip: cpu, chips: 4}]")
        >>> with quick(tempfile.mkdtemp()) as q:
        ...     _ = q.build("data/tokenize/pydoc", "tok")
        ...     plan = q.submit(chip="cpu", n=4, inventory=inv, dry_run=True, allow_dirty=True)
        >>> plan.placement.host.name, plan.spec.root
        ('hpc', '/r')
        """
        # the launchers load only when something is submitted: a session that trains here never needs them
        from theseus.dispatch.inventory import Inventory, load_inventory
        from theseus.dispatch.submit import request_for, submit

        self._check_open()
        inv = inventory if isinstance(inventory, Inventory) else load_inventory(inventory)
        sizes = {k: options.pop(k) for k in ("memory_gb", "cpus") if k in options}
        request = request_for(inv, chip, n, cluster or (), **sizes)
        return submit(spec_from_quick(self), inv, request, dry_run, **options)

    def __call__(self):
        """Create the pending job and run it (``job = q.build(); job()`` in the seed).

        >>> import tempfile
        >>> with quick(tempfile.mkdtemp()) as q:
        ...     q.build("data/tokenize/pydoc", "p").config.data.max_samples = 3
        ...     q()["samples"]
        3
        """
        return self.create()()

    # -- lifetime -------------------------------------------------------------

    def close(self) -> None:
        """End the session (idempotent).

        >>> import tempfile
        >>> q = init(tempfile.mkdtemp()); q.close(); q.close()
        >>> q.find()
        Traceback (most recent call last):
        ...
        RuntimeError: this quick session is closed
        """
        if self._closed:
            return
        self._closed = True
        close = getattr(self.store, "close", None)
        if callable(close):
            close()

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("this quick session is closed")

    def __enter__(self) -> QuickSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        # printed under the session's first name, QuickJob, as the seeds' snippets show it
        pending = f"{self.job_key} run={self.run_name!r}" if self.job_key else "no job built"
        return f"<theseus.quick.QuickJob object at {id(self):#x}: {pending} root={self.root!r}>"


#: The session's first name, kept for code and snippets that use it: a session is not a job.
QuickJob = QuickSession


def init(root: str | os.PathLike) -> QuickSession:
    """Open a quick session on ``root`` (a folder or gs:// URL); ``close()`` it when done.

    >>> import tempfile
    >>> q = init(tempfile.mkdtemp())
    >>> q.build("data/tokenize/pydoc", "p").config.data.max_samples
    -1
    >>> q.close()
    """
    return QuickSession(root)


def quick(root: str | os.PathLike) -> QuickSession:
    """A quick session on ``root`` as a context manager (closed on exit).

    >>> import tempfile
    >>> with quick(tempfile.mkdtemp()) as q:
    ...     print(type(q).__name__, QuickJob is QuickSession)
    QuickSession True
    """
    return QuickSession(root)


def spec_from_quick(q: QuickSession, *, revision: str = "", groups: tuple[str, ...] = (),
                    env: Mapping[str, str] | None = None) -> LaunchSpec:
    """The spec of a quick session's pending job (after ``q.build(...)`` or ``q.find()...resume()``).

    The config is recorded whole (YAML); a resumed job continues its base's nonce, a
    new run or branch gets a fresh one. The experiments imported in this process (and
    the job class's own file, when it came from neither theseus nor one of them) ride
    along: each launched process imports them before it builds the job.

    >>> import tempfile
    >>> with quick(tempfile.mkdtemp()) as q:
    ...     q.build("data/tokenize/pydoc", "tok").config.data.max_samples = 7
    ...     spec = spec_from_quick(q)
    >>> spec.job_key, "max_samples: 7" in spec.config_yaml, spec.base_node
    ('data/tokenize/pydoc', True, None)
    """
    if q.job_key is None:
        raise BadInput("no job built yet: call q.build(job_key, run_name) first (`theseus jobs` lists the keys)")
    if not q.verify:
        raise BadInput("resume(verify=False) is not carried to a launch (a launched run always checks its "
                         "checkpoint): resume with verify=True to launch or submit")
    base = q.base.id if q.base is not None else None
    resume = base is not None and not q.branched
    return LaunchSpec(q.job_key, q.run_name, configs.to_yaml(q.config), q.root, base_node=base, resume=resume,
                      revision=revision, groups=tuple(groups), env=dict(env or {}),
                      experiments=shipped(get_job(q.job_key)))


def build_spec(root: str, job_key: str, run_name: str, overrides: Iterable[str] = (), *, base_node: str | None = None,
               branch: bool = False) -> LaunchSpec:
    """The spec of ``job_key`` as ``run_name`` in ``root`` with ``key=value`` overrides; reads, never writes.

    With ``base_node`` the job is restored from that node (its recorded job and config,
    the overrides on top): ``job_key`` must be the node's job; the run continues the
    node's lineage (``run_name`` must then be its run), or branches into ``run_name``
    with ``branch=True`` (and when the lineage already went on past the node).
    Unknown job keys, config keys, wrongly typed values and unknown nodes are errors.
    The spec has no revision, groups or env: set them with ``spec.replace(revision=...)``.

    >>> import tempfile
    >>> build_spec(tempfile.mkdtemp(), "data/tokenize/pydoc", "tok", ["data.max_samples=3"]).run_name
    'tok'
    >>> build_spec(tempfile.mkdtemp(), "data/tokenize/pydok", "tok")
    Traceback (most recent call last):
    ...
    theseus.jobs.UnknownJobError: unknown job 'data/tokenize/pydok'; did you mean data/tokenize/pydoc? ...
    """
    with QuickSession(root) as q:
        if base_node is None:
            q.build(job_key, run_name)
        else:
            decode_id(base_node)
            try:
                cursor = q.find().node(base_node)
                q = cursor.branch() if branch else cursor.resume()
            except (EmptyResult, FileNotFoundError):  # a root that does not exist holds no records either
                raise BadInput(f"node {base_node} has no records in {root}: nothing to restore from") from None
            if q.job_key != job_key:
                raise BadInput(f"node {base_node} is a run of job {q.job_key!r}, not {job_key!r}")
            base_run = Node.from_id(base_node)
            if not branch and normalize_name(run_name) != base_run.name:
                raise BadInput(f"resuming {base_node} continues run {base_run.name!r}; got run name {run_name!r} "
                                 "(branch to start a new run with another name)")
            if branch:
                q.run_name = run_name
        configs.apply_overrides(q.config, list(overrides or ()))
        return spec_from_quick(q)
