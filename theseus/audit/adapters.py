"""The frozen source of each checkpoint: a run whose job keeps a frozen tree read from another node (a LoRA run's
base, a DPO run's reference) is of no use without that node, so the audit checks it is still there.

Such a run's checkpoint config has its job's section (`FROZEN_FROM`: ``lora``, ``dpo``) and names the node in
``training.init_from`` (the node id the run resolved at its start; `theseus.train.lora_jobs`,
`theseus.train.dpo_jobs`). That node must be in the root with a committed, unretired checkpoint, else resuming,
verifying, sampling or exporting the run fails: an error ``missing-base``.

>>> from theseus.audit.report import CheckpointAudit, RunAudit
>>> lora = {"lora": {"rank": 8}, "training": {"init_from": "bm9kZQ"}}
>>> run = RunAudit("a.b.lora", "949e88", "llama/train/lora", "done", True, None, None, 1, 0, 0, "id", 0, (),
...                checkpoints=(CheckpointAudit("id", 0, "objects/id", 2, 10, True, lora, None, ()),))
>>> [p.kind for p in base_problems([run], {"bm9kZQ": "objects/bm9kZQ"}, set())], len(base_problems([run], {}, set()))
([], 1)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from theseus.audit.report import Problem, RunAudit

__all__ = ["FROZEN_FROM", "base_problems"]

#: the config section of each job that keeps a frozen tree from its ``training.init_from`` node -> what the
#: checkpoint holds over that node, as the problem says it
FROZEN_FROM = {"lora": "LoRA adapters over the base node", "dpo": "a DPO policy tuned against the reference node"}


def _frozen_sources(run: RunAudit) -> dict[str, str]:
    """The nodes ``run``'s checkpoints keep a frozen tree from -> what they hold over each (`FROZEN_FROM`)."""
    out = {}
    for checkpoint in run.checkpoints:
        config = checkpoint.config or {}
        for section, holds in FROZEN_FROM.items():
            if isinstance(config.get(section), dict):
                out.setdefault(str((config.get("training") or {}).get("init_from") or ""), holds)  # LoRA's first
    return out


def base_problems(runs: Iterable[RunAudit], checkpoints: Mapping[str, str], retired: set[str]) -> list[Problem]:
    """One ``missing-base`` error per run whose checkpoints keep a frozen tree from a node (a LoRA base, a DPO
    reference) without a committed checkpoint (``checkpoints``: node id -> its checkpoint record) or whose
    checkpoint is retired (``retired``: node ids).

    >>> base_problems([], {}, set())
    []
    """
    out = []
    for run in runs:
        for base, holds in sorted(_frozen_sources(run).items()):
            if base in checkpoints and base not in retired:
                continue
            why = "retired" if base in retired else "not in this root" if base not in checkpoints else "missing"
            out.append(Problem("missing-base", run.label, f"{run.label} holds {holds} {base or '?'}, whose checkpoint "
                               f"is {why}: the run cannot be resumed, verified, sampled or exported without it"))
    return out
