"""Mirrors: a run's reports copied, live, to TensorBoard, wandb or Comet; and TensorBoard files of any root.

The store is the source of truth; a mirror is a convenience that never stops or
slows a run (`theseus.mirror.background`: its own thread, a bounded queue, failures
warned about once and counted). ``logging.remote = True`` turns it on for a training
job, ``logging.remote_backend`` picks the backend (`theseus.mirror.sinks.BACKENDS`), and
``theseus export tensorboard ROOT [NONCE...] OUT_DIR`` writes event files for runs
that already exist (`theseus.mirror.export`). The backends' packages are the optional
``remote`` group: ``uv sync --group remote``.

>>> sorted(BACKENDS)
['comet', 'tensorboard', 'wandb']
"""

from theseus.mirror.background import Mirror, MirrorStats
from theseus.mirror.sinks import BACKENDS, MirrorRun, MirrorUnavailable, open_sink, require

__all__ = ["BACKENDS", "Mirror", "MirrorRun", "MirrorStats", "MirrorUnavailable", "open_sink", "require"]
