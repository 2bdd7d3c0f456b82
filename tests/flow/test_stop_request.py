"""SIGTERM/SIGINT stop a run once: the first ends the inputs (the dataflow then finishes as at
the end of a recording), a second while the sinks close is said, not raised (an interrupt
inside a sink's close() made the runtime abort with SIGABRT, no summary), and a stop that
takes too long interrupts the dataflow."""

from __future__ import annotations

import os
import signal

import pytest

from connectors.stopping import end_inputs, inputs_ended
from flows.commands.run import StopRequest


def test_the_first_signal_ends_the_inputs_and_later_ones_are_said(
    capsys: pytest.CaptureFixture[str],
) -> None:
    stop = StopRequest()
    signals = (signal.SIGTERM, signal.SIGALRM)
    previous = {sig: signal.signal(sig, stop) for sig in signals}
    try:
        os.kill(os.getpid(), signal.SIGTERM)
        assert inputs_ended()
        assert 0 < signal.alarm(0) <= 20  # the grace period was armed
        os.kill(os.getpid(), signal.SIGTERM)  # while "closing": must not raise
        os.kill(os.getpid(), signal.SIGTERM)
        with pytest.raises(KeyboardInterrupt):  # the grace period ran out
            os.kill(os.getpid(), signal.SIGALRM)
    finally:
        signal.alarm(0)
        end_inputs(False)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    assert stop.signal == "SIGTERM"
    assert capsys.readouterr().err.count("SIGTERM again: already stopping") == 2
