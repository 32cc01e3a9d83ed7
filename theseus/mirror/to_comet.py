"""The Comet sink: a run's reports as a Comet experiment's metrics, the step as Comet's step.

The experiment is project = the name's project, name ``run:nonce``, key =
`MirrorRun.key` (``get_or_create``: a resumed lineage goes on in the same experiment),
the config as nested parameters and ``theseus/name`` / ``theseus/nonce`` as "others".
Login and workspace come from Comet's own settings (``comet login``, ``COMET_*``
variables); ``logging.remote_offline`` makes it an offline experiment (a zip archive that
``comet upload`` sends later) written to ``logging.remote_dir`` (default: Comet's own
folder). Comet does not capture the console, parse the command line or upload code: the
config is what describes the run.
"""

from __future__ import annotations

from collections.abc import Mapping

from theseus.mirror.sinks import MirrorRun


class CometSink:
    """A live Comet experiment: ``log`` is ``log_metrics(values, step=step)``, ``close`` is ``end()``.

    >>> CometSink.close.__doc__
    'End the experiment (an offline one writes its archive now).'
    """

    def __init__(self, run: MirrorRun):
        import comet_ml  # the optional `remote` group: imported only when a run mirrors

        settings = comet_ml.ExperimentConfig(
            name=run.label, offline_directory=run.folder or None, auto_output_logging=False, parse_args=False,
            log_code=False, log_git_patch=False, display_summary_level=0,
        )
        self.experiment = comet_ml.start(project_name=run.project, online=not run.offline, experiment_key=run.key,
                                         mode="get_or_create", experiment_config=settings)
        self.experiment.log_parameters(dict(run.config))
        self.experiment.log_others({"theseus/name": run.name, "theseus/nonce": run.nonce})
        self.experiment.add_tag(run.group)

    def log(self, step: int, values: Mapping[str, float]) -> None:
        self.experiment.log_metrics(dict(values), step=step)

    def close(self) -> None:
        """End the experiment (an offline one writes its archive now)."""
        self.experiment.end()


def open_run(run: MirrorRun) -> CometSink:
    """The sink of ``run`` (`BACKENDS`'s opener for ``comet``).

    >>> import os, tempfile
    >>> run = MirrorRun("p.g.r", "abc123", {"lr": 0.1}, folder=tempfile.mkdtemp(), offline=True)
    >>> sink = open_run(run); sink.log(1, {"train/loss": 2.5})
    >>> sink.experiment.get_key() == run.key, sink.experiment.get_name()
    (True, 'r:abc123')
    >>> sink.close(); [n.startswith(run.key) and n.endswith(".zip") for n in os.listdir(run.folder)]
    [True]
    """
    return CometSink(run)
