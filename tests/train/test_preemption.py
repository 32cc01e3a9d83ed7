"""The stop step the processes of a run agree on (theseus.train.preemption.AgreedStop), with the run's
key-value store replaced by a dict that behaves as jax.distributed's does (a set of a key that exists fails,
a get of a missing key fails)."""

from __future__ import annotations

import os
import signal

from theseus.train.preemption import LEAD, AgreedStop, StopRequest


class KeyValues:
    def __init__(self):
        self.values: dict[str, str] = {}

    def key_value_set(self, key: str, value: str) -> None:
        if key in self.values:
            raise RuntimeError(f"ALREADY_EXISTS: {key}")
        self.values[key] = value

    def key_value_try_get(self, key: str) -> str:
        if key not in self.values:
            raise RuntimeError(f"NOT_FOUND: {key}")
        return self.values[key]


def test_every_process_stops_at_the_step_the_first_signalled_one_proposed():
    store = KeyValues()
    a, b = (AgreedStop(StopRequest(), client=store, processes=2) for _ in range(2))
    assert not a(9) and not b(9)  # no signal: no one stops
    a.request.received = signal.SIGTERM  # process a gets the signal at its step 10
    assert not a(10) and not b(11)  # b, a step ahead, reads the proposal
    assert a.stop_at == b.stop_at == 10 + LEAD
    b.request.received = signal.SIGTERM  # a second signal proposes again: the first proposal stands
    assert [a(k) for k in range(11, 10 + LEAD + 1)] == [False] * (LEAD - 1) + [True]
    assert [b(k) for k in range(12, 10 + LEAD + 1)] == [False] * (LEAD - 2) + [True]
    assert a.stopped and b.stopped and b.stop_at == 10 + LEAD


def test_one_process_stops_at_the_step_the_signal_found_it_at():
    with StopRequest() as request:
        stop = AgreedStop(request, processes=1)
        assert not stop(3)
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop(4) and stop.stopped
    assert signal.getsignal(signal.SIGTERM) != request._handle  # the previous handler is back
