"""The wandb sink: a run's reports as a wandb run's history, the step as wandb's step.

The wandb run is project = the name's project, group = its group, display name
``run:nonce``, id = `MirrorRun.key` (resumed lineages go on in the same wandb run), the
config attached with ``theseus/name`` and ``theseus/nonce``. Login, entity and mode come
from wandb's own settings (``wandb login``, ``WANDB_*`` variables); ``logging.remote_offline``
forces offline mode (``wandb sync`` uploads it later) and ``logging.remote_dir`` is wandb's
``dir``. wandb does not capture the process's console: theseus's output stays in its logs.
"""

from __future__ import annotations

from collections.abc import Mapping

from theseus.mirror.sinks import MirrorRun


class WandbSink:
    """A live wandb run: ``log`` is ``run.log(values, step=step)``, ``close`` is ``run.finish()``.

    >>> WandbSink.log.__doc__
    'Log one report at ``step`` (reports of one step merge into one history row).'
    """

    def __init__(self, run: MirrorRun):
        import wandb  # the optional `remote` group: imported only when a run mirrors

        config = {**run.config, "theseus/name": run.name, "theseus/nonce": run.nonce}
        self.run = wandb.init(
            project=run.project, group=run.group, name=run.label, id=run.key, resume="allow", config=config,
            dir=run.folder or None, mode="offline" if run.offline else None, reinit="create_new",
            settings=wandb.Settings(console="off"),
        )

    def log(self, step: int, values: Mapping[str, float]) -> None:
        """Log one report at ``step`` (reports of one step merge into one history row)."""
        self.run.log(dict(values), step=step)

    def close(self) -> None:
        self.run.finish()


def open_run(run: MirrorRun) -> WandbSink:
    """The sink of ``run`` (`BACKENDS`'s opener for ``wandb``).

    A doctest opens no run: wandb keeps one process-wide setup, which a run opened here would
    leave to the mirror tests run after it in the same process (tests/mirror opens offline runs).

    >>> from theseus.mirror.sinks import BACKENDS
    >>> BACKENDS["wandb"].module, BACKENDS["wandb"].package
    ('wandb', 'wandb')
    """
    return WandbSink(run)
