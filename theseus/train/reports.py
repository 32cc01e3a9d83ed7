"""What a step reports: its position, the train metrics fetched from the device, and the log lines of a report.

Every report carries ``train/step`` and ``train/tokens`` (`position`), so each node of a run can be
placed against steps or tokens. A train report adds ``train/loss``, ``train/lr``, ``train/grad_norm``,
``train/mfu``, ``train/tokens_per_second`` and the objective's own metrics under their names
(`theseus.train.objective`; none for pretraining).

>>> position(3, tokens_per_step=64)
{'train/step': 3, 'train/tokens': 192}
"""

from __future__ import annotations

from typing import Any

import jax

from theseus.train import mfu

__all__ = ["log_report", "position", "train_metrics"]

#: the step's device metrics that are not reported under their own name
_STEP_METRICS = ("loss", "lr", "grad_norm", "tokens")


def position(step: int, tokens_per_step: int) -> dict[str, int]:
    """``train/step`` and ``train/tokens`` after ``step`` updates of ``tokens_per_step`` tokens.

    >>> position(0, 64)
    {'train/step': 0, 'train/tokens': 0}
    """
    return {"train/step": int(step), "train/tokens": int(step * tokens_per_step)}


def train_metrics(device_metrics: dict, step: int, timing: tuple[float, int], tokens_per_step: int,
                  flops_per_token: float, peak: float | None) -> dict[str, Any]:
    """The host metrics of ``step`` from its device metrics (blocks on them); ``timing``: (seconds, steps) since
    the last train report, for tokens/s and MFU (NaN without a peak).

    >>> train_metrics({"loss": 2.0, "lr": 0.1, "grad_norm": 1.0, "tokens": 64}, 1, (0.5, 1), 64, 1e6, 1e9)["train/mfu"]
    0.128
    """
    host = jax.device_get(device_metrics)
    seconds, steps = timing
    tps = steps * tokens_per_step / seconds if seconds > 0 else float("nan")
    return {
        "train/loss": float(host["loss"]),
        "train/lr": float(host["lr"]),
        "train/grad_norm": float(host["grad_norm"]),
        **position(step, tokens_per_step),
        "train/mfu": float(mfu.mfu(tps, flops_per_token, peak)) if peak and tps == tps else float("nan"),
        "train/tokens_per_second": float(tps),
        **{name: float(value) for name, value in host.items() if name not in _STEP_METRICS},
    }


def log_report(log: Any, step: int, total: int, metrics: dict[str, Any]) -> None:
    """The TRAIN / STEP / VAL log lines of a report.

    >>> lines = []
    >>> from types import SimpleNamespace
    >>> log_report(SimpleNamespace(info=lines.append, debug=lines.append), 2, 3, {"val/loss": 1.5})
    >>> lines
    ['VAL | 2/3 | loss 1.5']
    """
    if "train/loss" in metrics:
        log.info(f"TRAIN | {step}/{total} | loss {metrics['train/loss']}")
        log.debug(f"STEP | {step} | {metrics}")
    if "val/loss" in metrics:
        log.info(f"VAL | {step}/{total} | loss {metrics['val/loss']}")
