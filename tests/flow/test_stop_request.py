"""SIGTERM/SIGINT stop a run once: the first ends the inputs (the dataflow then finishes as at
the end of a recording), a second while the sinks close is said, not raised (an interrupt
inside a sink's close() made the runtime abort with SIGABRT, no summary), and a stop that
takes too long interrupts the dataflow. A signal before the dataflow runs ends the start."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from connectors.stopping import end_inputs, inputs_ended
from flows.commands.run import StopRequest
from tests.flow.runner import start_flowplanner


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


def test_a_worker_stopped_while_it_starts_exits_0(tmp_path: Path) -> None:
    # protects: the stop handler came with the dataflow, after the start-up's broker requests
    # (up to 30 s against a broker that is away): SIGTERM then killed the worker, status 143
    config = tmp_path / "c.json"
    config.write_text('{"deployments": {"d": {"mode": "decode"}}}')
    away = "kafka://127.0.0.1:1"  # nothing listens: the start waits for the broker for 30 s
    worker = start_flowplanner(
        "run", "--config", str(config), "--input", f"{away}/events", "--output", f"{away}/dec"
    )
    time.sleep(8)  # past loading Python modules (about 1 s), well within the 30 s
    assert worker.poll() is None
    worker.send_signal(signal.SIGTERM)
    _, err = worker.communicate(timeout=20)
    assert worker.returncode == 0, err
    assert "flowplanner run: stopped by SIGTERM while starting" in err
