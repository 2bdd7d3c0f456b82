"""SIGTERM/SIGINT stop a run once: a second signal while the sinks close is said, not raised
(an interrupt inside a sink's close() made the runtime abort with SIGABRT, no summary)."""

from __future__ import annotations

import os
import signal

import pytest

from flows.commands.run import _StopRequest


def test_only_the_first_signal_interrupts(capsys: pytest.CaptureFixture[str]) -> None:
    stop = _StopRequest()
    previous = signal.signal(signal.SIGTERM, stop)
    try:
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGTERM)  # while "closing": must not raise
        os.kill(os.getpid(), signal.SIGTERM)
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert stop.signal == "SIGTERM"
    assert capsys.readouterr().err.count("SIGTERM again: already stopping") == 2
