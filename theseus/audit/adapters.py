"""The base of each LoRA checkpoint: a checkpoint that holds adapters only is of no use without the base model
they apply to, so the audit checks that base is still there.

A LoRA run's checkpoint config has a ``lora`` section and names its base in ``training.init_from`` (the node id
the run resolved at its start; `theseus.train.lora_jobs`). That node must be in the root with a committed,
unretired checkpoint, else resuming, sampling or exporting the run fails: an error ``missing-base``.

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

__all__ = ["base_problems"]


def base_problems(runs: Iterable[RunAudit], checkpoints: Mapping[str, str], retired: set[str]) -> list[Problem]:
    """One ``missing-base`` error per LoRA run whose checkpoints name a base node without a committed checkpoint
    (``checkpoints``: node id -> its checkpoint record) or whose checkpoint is retired (``retired``: node ids).

    >>> base_problems([], {}, set())
    []
    """
    out = []
    for run in runs:
        bases = {str(((c.config or {}).get("training") or {}).get("init_from") or "") for c in run.checkpoints
                 if isinstance((c.config or {}).get("lora"), dict)}
        for base in sorted(bases):
            if base in checkpoints and base not in retired:
                continue
            why = "retired" if base in retired else "not in this root" if base not in checkpoints else ""
            out.append(Problem("missing-base", run.label, f"{run.label} holds LoRA adapters over node {base or '?'}, "
                               f"whose checkpoint is {why or 'missing'}: the adapters cannot be resumed, sampled or "
                               "exported without it"))
    return out
