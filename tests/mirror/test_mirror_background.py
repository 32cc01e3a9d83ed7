"""The mirror never stops or slows its caller: a failing or slow sink, a full queue, a missing backend package."""

from __future__ import annotations

import sys
import threading
import time

import pytest
from omegaconf import OmegaConf

from tests.train._helpers import ListLog, config, write_dataset
from theseus.mirror import Mirror, MirrorUnavailable, require
from theseus.quick import quick
from theseus.store import Store


class Recorded:
    """A sink that keeps what it logs; ``gate`` (an Event) holds every log until it is set."""

    def __init__(self, gate: threading.Event | None = None, fail_at: int | None = None):
        self.logged, self.closed, self.gate, self.fail_at = [], False, gate, fail_at

    def log(self, step, values):
        if self.gate is not None:
            self.gate.wait(10)
        if step == self.fail_at:
            raise ConnectionError("connection reset")
        self.logged.append((step, dict(values)))

    def close(self):
        self.closed = True


def test_reports_reach_the_sink_in_order_and_close_closes_it():
    sink, log = Recorded(), ListLog()
    mirror = Mirror(lambda: sink, "recorded", log=log)
    for step in range(1, 51):
        mirror.report(step, {"train/loss": 1.0 / step, "text": "skipped"})
    stats = mirror.close()
    assert (stats.reports, stats.mirrored, stats.dropped, stats.failed, stats.complete) == (50, 50, 0, 0, True)
    assert [s for s, _ in sink.logged] == list(range(1, 51)) and sink.logged[1][1] == {"train/loss": 0.5}
    assert sink.closed and log.messages("MIRROR") == ["MIRROR | recorded: 50 reports mirrored"]
    assert mirror.close() is stats
    with pytest.raises(RuntimeError, match="closed"):
        mirror.report(51, {"x": 1.0})


def test_a_slow_sink_never_blocks_and_a_full_queue_drops_and_counts():
    gate, log = threading.Event(), ListLog()
    sink = Recorded(gate)
    mirror = Mirror(lambda: sink, "slow", capacity=4, log=log)
    start = time.perf_counter()
    for step in range(1, 21):
        mirror.report(step, {"x": float(step)})
    assert time.perf_counter() - start < 0.5  # the sink holds every log; report() did not wait for it
    gate.set()
    stats = mirror.close()
    assert stats.reports == 20 and stats.dropped >= 15 and stats.mirrored + stats.dropped == 20 and not stats.complete
    assert [m for m in log.messages("MIRROR") if "dropped (queue full)" in m] == [
        f"MIRROR | slow: {stats.mirrored} of 20 reports mirrored, {stats.dropped} dropped (queue full), 0 not mirrored;"
        " the store holds every one"]


def test_a_failing_sink_is_warned_about_once_and_the_rest_counted():
    log = ListLog()
    mirror = Mirror(lambda: Recorded(fail_at=3), "flaky", log=log)
    for step in range(1, 11):
        mirror.report(step, {"x": 1.0})
    stats = mirror.close()
    assert (stats.mirrored, stats.failed, stats.error) == (2, 8, "ConnectionError: connection reset")
    warnings = [m for level, m in log.records if level == "warning"]
    assert len(warnings) == 2 and "flaky failed (ConnectionError: connection reset); training goes on" in warnings[0]
    assert "2 of 10 reports mirrored, 0 dropped (queue full), 8 not mirrored" in warnings[1]


def test_a_sink_that_cannot_open_costs_the_caller_nothing():
    def no_login():
        time.sleep(0.2)
        raise PermissionError("not logged in")

    log = ListLog()
    mirror = Mirror(no_login, "offline", log=log)
    start = time.perf_counter()
    mirror.report(1, {"x": 1.0})
    assert time.perf_counter() - start < 0.1
    assert mirror.close().error == "PermissionError: not logged in"


def test_a_bad_capacity_is_refused():
    with pytest.raises(ValueError, match="capacity must be a positive int"):
        Mirror(Recorded, "x", capacity=0)


def test_a_missing_backend_package_names_the_install_command(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "comet_ml", None)  # as if the `remote` group were not installed
    with pytest.raises(MirrorUnavailable, match=r"needs the comet-ml package.*run `uv sync --group remote`"):
        require("comet")
    write_dataset(tmp_path, tokens=5000)
    with quick(str(tmp_path)) as q:
        q.build("gpt/train/pretrain", "no-comet")
        q.config.merge_with(OmegaConf.create(config(logging={"remote": True})))  # the default backend: comet
        with pytest.raises(MirrorUnavailable, match=r"logging.remote_backend=comet needs .*uv sync --group remote"):
            q.create()
    assert Store(str(tmp_path)).find().all() == []  # refused before anything was written


@pytest.mark.usefixtures("remote_group")  # Comet must be installed for its settings to be checked
def test_a_comet_folder_without_offline_mode_is_refused(tmp_path):
    write_dataset(tmp_path, tokens=5000)
    with quick(str(tmp_path)) as q:
        q.build("gpt/train/pretrain", "comet-dir")
        q.config.merge_with(OmegaConf.create(config(logging={"remote": True, "remote_dir": str(tmp_path / "c")})))
        with pytest.raises(ValueError, match="is where Comet writes offline archives"):
            q.create()
