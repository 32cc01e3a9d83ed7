"""A user's experiment file for the ``--import`` tests: a tiny restorable job in a file of its own.

``write_experiment(folder)`` writes it; the ``scratch_experiments`` fixture (tests/conftest.py)
undoes what importing it registered.
"""

from __future__ import annotations

from pathlib import Path

KEY = "mylab/test/count"

SOURCE = '''\
"""A user's experiment: count to n, one node per number."""
import dataclasses

from theseus.jobs import Job, job


@dataclasses.dataclass
class CountConfig:
    n: int = 3


@job({key!r}, "Count to n, one node per number (an experiment of the user's own).")
class Count(Job):
    Config = CountConfig

    def setup(self):
        """Fresh or restored: a count keeps no state but its node."""

    def run(self):
        for i in range(self.config.n):
            self.writer.write(self.node, {{"count/i": i}})
            self.tick()
        return self.node.seq
'''


def write_experiment(folder: Path, name: str = "my_experiments.py", key: str = KEY, source: str | None = None) -> Path:
    """The experiment file ``folder/name`` registering the count job under ``key`` (or ``source`` verbatim)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(SOURCE.format(key=key) if source is None else source)
    return path

