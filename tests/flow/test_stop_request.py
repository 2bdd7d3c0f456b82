"""SIGTERM/SIGINT stop a run once: the first ends the inputs (the dataflow then finishes as at
the end of a recording), a second while the sinks close is said, not raised (an interrupt
inside a sink's close() made the runtime abort with SIGABRT, no summary), and a stop that
takes too long interrupts the dataflow. A signal before the dataflow runs ends the start."""

from __future__ import annotations

import logging
import os
import re
import signal
import socket
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
    with socket.socket() as hole:  # a "broker" that accepts connections and never answers
        hole.bind(("127.0.0.1", 0))
        hole.listen(8)
        hole.settimeout(120)
        away = f"kafka://127.0.0.1:{hole.getsockname()[1]}"
        worker = start_flowplanner(
            "run", "--config", str(config), "--input", f"{away}/events", "--output", f"{away}/dec"
        )
        connection, _ = hole.accept()  # the worker is in its start-up's broker requests
        with connection:
            assert worker.poll() is None
            worker.send_signal(signal.SIGTERM)
            _, err = worker.communicate(timeout=60)
    assert worker.returncode == 0, err
    assert "flowplanner run: stopped by SIGTERM while starting" in err


def caught_signals(pid: int) -> int:
    """The mask of signals ``pid`` has handlers for (``SigCgt`` of ``/proc/PID/status``)."""
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"^SigCgt:\s*([0-9a-f]+)$", status, re.MULTILINE).group(1), 16)


def test_a_worker_stopped_while_python_loads_its_modules_exits_0(tmp_path: Path) -> None:
    # protects: the handler came with the run command's module, after Python had loaded every
    # command's (bytewax, numpy, statsmodels: a second or two on a busy host), and SIGTERM in
    # that time killed the worker, status 143
    config = tmp_path / "c.json"
    config.write_text('{"deployments": {"d": {"mode": "decode"}}}')
    worker = start_flowplanner("run", "--config", str(config), "--input", "zmq+tcp://127.0.0.1:9")
    term = 1 << (signal.SIGTERM - 1)
    deadline = time.monotonic() + 60
    while not caught_signals(worker.pid) & term:  # polled without a pause: it comes early
        assert worker.poll() is None and time.monotonic() < deadline, worker.communicate()
    # read after the handler was seen: no native module of bytewax is mapped yet, so the
    # handler came before Python loaded the dataflow runtime
    loaded = Path(f"/proc/{worker.pid}/maps").read_text()
    worker.send_signal(signal.SIGTERM)
    _, err = worker.communicate(timeout=60)
    assert "_bytewax" not in loaded
    assert worker.returncode == 0, err
    assert "flowplanner run: stopped by SIGTERM while starting" in err


def test_a_signal_after_the_run_is_only_said(monkeypatch, capsys, tmp_path: Path) -> None:
    # protects: the start-up's handler came back with the run over, so a SIGTERM while the
    # metrics server stopped was taken for a stop while starting: no summary line, no clean-up
    import connectors.metrics
    from flows.cli import main

    stop = connectors.metrics.MetricsServer.stop
    stopped = []

    def stop_with_a_signal(server) -> None:
        signal.raise_signal(signal.SIGTERM)  # a second Ctrl-C or SIGTERM as the run ends
        stop(server)
        stopped.append(server)

    monkeypatch.setattr(connectors.metrics.MetricsServer, "stop", stop_with_a_signal)
    before = signal.getsignal(signal.SIGTERM)
    examples = Path(__file__).parents[2] / "examples"
    args = [
        "--config",
        str(examples / "decode.yaml"),
        "--input",
        str(examples / "decode_burst.jsonl"),
    ]
    # the command sets its packages' log levels: put them back for the tests after this one
    names = ("connectors", "flows", "operators", "urllib3.connectionpool")
    loggers = [logging.getLogger(name) for name in names]
    levels = [logger.level for logger in loggers]
    try:
        status = main(["run", *args, "--output", str(tmp_path / "d.jsonl"), "--metrics-port", "0"])
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)
    err = capsys.readouterr().err
    assert status == 0 and stopped
    assert "flowplanner run: SIGTERM: already stopping" in err
    # the summary (its counts are the process's: other tests ran in it before)
    assert re.search(r"flowplanner run: \d+ events in, \d+ dead-lettered, \d+ decisions", err)
    assert signal.getsignal(signal.SIGTERM) == before
