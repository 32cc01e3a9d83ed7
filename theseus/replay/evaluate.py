"""The ``gpt/evaluate`` job: evaluate any checkpoint, the results a new lineage whose first node's parent is it.

``evaluate.checkpoint`` names the checkpoint (a node id, or a nonce: that run's last
committed one; the job records the node id it resolved to) and ``evaluate.tasks`` the
evaluation parts to run (`theseus parts` lists them: ``bits-per-byte``, ``pydoc``,
``addition``, ``hellaswag``...); ``evaluate.harness`` names lm-evaluation-harness tasks to
run as well (its own, or YAML tasks in the folders of ``evaluate.include_path``), through
`theseus.train.evals.harness` (the optional ``eval`` group). The trainer is the evaluated run's own job class restored
from the checkpoint (`restored_trainer`); the parts read that run's config with this job's
``eval`` section over it (every evaluation part's settings, ``eval.length`` capping the
examples, of the harness's tasks too). The results land on the job's one node as
``eval/<name>/<metric>`` (a harness task's as `harness_keys` names them), with
``evaluate/checkpoint``, ``evaluate/tasks``, ``evaluate/harness`` and ``evaluate/step``::

    with quick(root) as q:
        q.build("gpt/evaluate", "eval-gpt")
        q.config.evaluate.checkpoint = nonce
        q.config.evaluate.tasks = ["pydoc", "addition"]
        q.config.eval.length = 64
        results = q.create()()
    q.find().job("gpt/evaluate").select(keys=["eval/pydoc/bpb"])

>>> "gpt/evaluate" in __import__("theseus.jobs").jobs.registry("gpt/")
True
"""

from __future__ import annotations

import dataclasses
from typing import Any

from omegaconf import OmegaConf

from theseus.errors import BadInput
from theseus.jobs import Job, job
from theseus.replay.restore import checkpoint_for, restored_trainer
from theseus.store import Node
from theseus.train.config import EvalConfig
from theseus.train.evaluations import example_limit
from theseus.train.parts import dataclass_fields, parts, section_fields

__all__ = ["Evaluate", "EvaluateSettings", "evaluation_parts", "harness_tasks"]


@dataclasses.dataclass
class EvaluateSettings:
    """``evaluate``: the ``checkpoint`` to evaluate (node id or nonce), the ``tasks`` (evaluation part names), the
    ``harness`` tasks (lm-evaluation-harness task names) and the ``include_path`` folders of YAML tasks of one's own.

    >>> EvaluateSettings().tasks, EvaluateSettings().harness
    ([], [])
    """

    checkpoint: str = ""
    tasks: list[str] = dataclasses.field(default_factory=list)
    harness: list[str] = dataclasses.field(default_factory=list)
    include_path: list[str] = dataclasses.field(default_factory=list)


def harness_tasks(names: Any, include_path: Any = ()) -> Any:
    """lm-eval's task index after checking ``names`` (`theseus.train.evals.harness.harness_tasks`); without the
    optional ``eval`` group, an ImportError naming the command that installs it.

    >>> harness_tasks(["sums"], ["/no/such/folder"])
    Traceback (most recent call last):
    ...
    theseus.errors.MissingFile: include path /no/such/folder is not a folder (of lm-eval task YAML files)
    """
    from theseus.train.evals.harness import harness_tasks as check  # lazily: an optional dependency

    return check([str(n) for n in names], [str(p) for p in include_path])


def evaluation_parts(names: Any) -> list[type]:
    """The registered evaluation parts named by ``names`` (a list, or a comma-separated string), in order; an
    empty list, an unknown or a repeated name is a ValueError naming the known ones.

    >>> [p.name for p in evaluation_parts("pydoc,addition")]
    ['pydoc', 'addition']
    >>> evaluation_parts(["hellaswog"])
    Traceback (most recent call last):
    ...
    theseus.errors.BadInput: unknown evaluation 'hellaswog'; known: addition, arc-challenge, ...
    """
    names = [n.strip() for n in names.split(",")] if isinstance(names, str) else [str(n).strip() for n in names]
    names = [n for n in names if n]
    if not names:
        raise BadInput("no evaluation named: give at least one task (`theseus parts` lists the evaluations)")
    known = parts("evaluation")
    for name in names:
        if name not in known:
            raise BadInput(f"unknown evaluation {name!r}; known: {', '.join(known)}")
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise BadInput(f"evaluation {repeated[0]!r} is named twice")
    return [known[n] for n in names]


def _config() -> type:
    """``evaluate`` then ``eval``: `EvalConfig` with the settings of every evaluation part registered now."""
    members = [p for p in parts("evaluation").values() if p.section == "eval"]
    eval_section = dataclasses.make_dataclass("EvaluateEval", [*dataclass_fields(EvalConfig),
                                                               *section_fields(members, "eval")])
    return dataclasses.make_dataclass("EvaluateConfig", [
        ("evaluate", EvaluateSettings, dataclasses.field(default_factory=EvaluateSettings)),
        ("eval", eval_section, dataclasses.field(default_factory=eval_section))])


@job("gpt/evaluate", "Evaluate a checkpoint on evaluation parts; the results a new lineage under it.")
class Evaluate(Job):
    """Restore ``evaluate.checkpoint``, run ``evaluate.tasks`` on it, write ``eval/<name>/<metric>`` on one node
    whose parent is the checkpoint's node. Bad input (no checkpoint, an unknown or no task) fails in ``create``.

    A part registered after this class was made, with settings of its own, needs a subclass
    (``@job("mylab/evaluate") class MyEvaluate(Evaluate): Config = _config()``) to have them.

    >>> import tempfile
    >>> Evaluate.create(tempfile.mkdtemp(), "e", {"evaluate": {"checkpoint": "abc123", "tasks": []}})
    Traceback (most recent call last):
    ...
    theseus.errors.BadInput: no evaluation named: give at least one task (`theseus parts` lists the evaluations)
    """

    Config = _config()

    def setup(self) -> None:
        """Resolve the checkpoint and the tasks, restore the trainer, check every part's settings."""
        super().setup()  # refuses a base: the evaluated node is a setting, the parent of this lineage
        settings = self.config.evaluate
        self.parts, self.harness_names = self._tasks(settings)
        self.limit = self._limit()  # checked for the parts too: eval.length 0 would score nothing
        if not settings.checkpoint:
            raise BadInput("evaluate.checkpoint is empty: give a node id with a checkpoint, or a run's nonce")
        foreign = [p.name for p in self.parts if p.Config is not None and p.section != "eval"]
        if foreign:
            raise BadInput(f"evaluation {foreign[0]!r} keeps its settings outside the eval section; "
                                      f"{self.key} cannot run it")
        node, _ = checkpoint_for(self.store, str(settings.checkpoint))
        self.harness = harness_tasks(self.harness_names, settings.include_path) if self.harness_names else None
        settings.checkpoint = node.id  # recorded: the node evaluated, whichever way it was named
        self.evaluated = node
        self.node = Node(self.name, self.node.nonce, 0, node.id)  # a new lineage under the evaluated node
        self.trainer = restored_trainer(self.store, node, log=self.log)
        try:
            self.eval_config = self.settings_for(self.trainer.config)
            for part in self.parts:
                missing = [f.name for f in dataclasses.fields(part.Config)
                           if f.name not in self.eval_config.eval] if part.Config is not None else []
                if missing:
                    raise BadInput(f"evaluation {part.name!r} was registered after {self.key}'s config "
                                              f"was made: its settings eval.{missing[0]} are missing (subclass "
                                              "Evaluate to include them)")
                part.check(self.eval_config)
        except BaseException:
            self.trainer.close()
            raise

    @staticmethod
    def _tasks(settings: Any) -> tuple[list[type], list[str]]:
        """The evaluation parts and the harness task names of the ``evaluate`` settings, at least one of either."""
        names = [str(t) for t in settings.harness]
        found = evaluation_parts(list(settings.tasks)) if settings.tasks or not names else []
        both = sorted({p.name for p in found} & set(names))
        if both:
            raise BadInput(f"{both[0]!r} is named as an evaluation and as a harness task: their keys "
                             f"eval/{both[0]}/... would collide")
        if settings.include_path and not names:
            raise BadInput("evaluate.include_path is set but evaluate.harness names no lm-eval task to run")
        return found, names

    def _limit(self) -> int | None:
        """The examples per evaluation and documents per harness task: ``eval.length`` (this job's, which the parts
        read too), None for all; 0 or below -1 is a ValueError."""
        limit = example_limit(self.config)
        if limit != -1 and limit < 1:
            raise BadInput(f"eval.length must be -1 (all examples) or a positive integer (theseus eval's --limit), "
                             f"got {limit}")
        return None if limit == -1 else limit

    def settings_for(self, run_config: Any) -> Any:
        """The config the parts read: the evaluated run's, with this job's ``eval`` section over its own.

        >>> from omegaconf import OmegaConf
        >>> job = Evaluate.__new__(Evaluate); job.config = Evaluate.defaults(); job.config.eval.length = 5
        >>> merged = job.settings_for(OmegaConf.create({"eval": {"length": -1, "mine": 1}, "data": {}}))
        >>> merged.eval.length, merged.eval.mine
        (5, 1)
        """
        merged = OmegaConf.create(OmegaConf.to_container(run_config, resolve=True))
        merged.eval = OmegaConf.merge(merged.get("eval") or {}, OmegaConf.to_container(self.config.eval))
        OmegaConf.set_readonly(merged, True)
        return merged

    def run(self) -> dict[str, Any]:
        """Run the parts on the restored parameters; write and return their metrics."""
        step = int(self.trainer.step)
        try:
            metrics = self.trainer.evaluate(parts=self.parts, config=self.eval_config) if self.parts else {}
            if self.harness is not None:
                metrics = {**metrics, **self._harness(metrics)}
        finally:
            self.trainer.close()
        self.writer.write(self.node, {**metrics, "evaluate/checkpoint": self.evaluated.id,
                                      "evaluate/tasks": ",".join(p.name for p in self.parts),
                                      "evaluate/harness": ",".join(self.harness_names), "evaluate/step": step})
        return metrics

    def _harness(self, metrics: dict[str, Any]) -> dict[str, float]:
        """The harness tasks' keys on the restored parameters, the first ``eval.length`` documents of each."""
        from theseus.train.evals.harness import TheseusLM, harness

        keys, _ = harness(TheseusLM.from_trainer(self.trainer), self.harness_names, manager=self.harness,
                          limit=self.limit)
        clash = sorted(set(keys) & set(metrics))
        if clash:
            raise BadInput(f"the harness's {clash[0]} is also an evaluation's key: rename one of the tasks")
        return keys
