"""``flowplanner decisions`` run as a real process against a real broker."""

from __future__ import annotations

import queue
import selectors
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from connectors.kafka import KafkaDecisionSink
from tests.kafka.samples import event_line, sample_decision, write_raw
from tests.services.process import free_port

FLOWPLANNER = str(Path(sys.executable).with_name("flowplanner"))
LINE_TIMEOUT_S = 60.0
"""A ``flowplanner`` process starts (imports, connects to the broker) within this, even on a
loaded machine."""
HEADER = ["TIME", "DEPLOYMENT", "ID", "PREFILL", "DECODE", "SOURCE", "REASON"]


def flowplanner(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [FLOWPLANNER, *args], capture_output=True, text=True, timeout=60, check=False
    )


def test_table_shows_each_decision_readably(kafka_bootstrap: str, kafka_topic: str) -> None:
    sink = KafkaDecisionSink(kafka_bootstrap, kafka_topic).build("out", 0, 1)
    sink.write_batch(
        [
            sample_decision(
                deployment="qwen-72b",
                decision_id=2,
                time=1_780_000_060.0,
                num_prefill=None,
                num_decode=6,
            ),
            sample_decision(
                deployment="llama", decision_id=1, time=1_780_000_000.0, reason="scale_up"
            ),
            sample_decision(
                deployment="llama",
                decision_id=2,
                time=1_780_001_800.0,
                num_prefill=2,
                current_prefill=3,
                reason="scale_down",
                source="throughput",
                note="proceeded without acknowledgement of decision 1 after waiting 1800 s",
            ),
        ]
    )
    # garbage, and a decision of no deployment (it was listed as a decision row)
    nameless = sample_decision(deployment="llama", decision_id=3, time=1_780_002_000.0)
    nameless_json = nameless.model_dump_json().replace('"llama"', '""').encode()
    write_raw(kafka_bootstrap, kafka_topic, [b"garbage", nameless_json])

    result = flowplanner("decisions", "--bootstrap", kafka_bootstrap, "--topic", kafka_topic)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split() == HEADER
    rows = [line.split(maxsplit=7) for line in lines[1:]]
    # Sorted by time; date and time in UTC; current->target per role.
    assert rows[0] == ["2026-05-28", "20:26:40Z", "llama", "1", "2->3", "4->4", "load", "scale_up"]
    assert rows[1][:7] == ["2026-05-28", "20:27:40Z", "qwen-72b", "2", "2", "(keep)", "4->6"]
    assert rows[2][:7] == ["2026-05-28", "20:56:40Z", "llama", "2", "3->2", "4->4", "throughput"]
    assert rows[2][7] == (
        "scale_down | note: proceeded without acknowledgement of decision 1 after waiting 1800 s"
    )
    assert lines[4].startswith("ERROR")
    assert "partition 0 offset 3: not a ScalingDecision: Invalid JSON" in lines[4]
    assert lines[5].startswith("ERROR") and "offset 4: not a ScalingDecision" in lines[5]
    assert "deployment" in lines[5] and len(lines) == 6
    # Columns line up: every row's ID column ends where the header's does.
    id_end = lines[0].index("ID") + 2
    assert all(line[id_end - 1] != " " for line in lines[1:4])


def test_follow_prints_new_decisions_as_they_arrive(kafka_bootstrap: str, kafka_topic: str) -> None:
    sink = KafkaDecisionSink(kafka_bootstrap, kafka_topic).build("out", 0, 1)
    sink.write_batch([sample_decision(deployment="llama", decision_id=1, time=60.0)])
    command = ["decisions", "--bootstrap", kafka_bootstrap, "--topic", kafka_topic, "--follow"]
    process = subprocess.Popen(
        [FLOWPLANNER, *command],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines = LineReader(process)
    try:
        assert lines.next().startswith("TIME")
        assert lines.next().split()[:3] == ["60.0", "llama", "1"]
        sink.write_batch(
            [sample_decision(deployment="llama", decision_id=2, time=120.0, num_decode=5)]
        )
        assert lines.next().split()[:5] == ["120.0", "llama", "2", "2->3", "4->5"]
        assert process.poll() is None, "still following"
    finally:
        process.terminate()
        process.wait(10)


class LineReader:
    """The lines a process prints, read by a thread as they come.

    Waiting with ``select()`` on the pipe before each ``readline()`` misses lines: one
    ``readline()`` may pull the next lines into the file object's buffer too (the header and the
    first row, when both were printed before the test got to read), and ``select()`` then waits
    for bytes the pipe will never get again.
    """

    def __init__(self, process: subprocess.Popen) -> None:
        self.process = process
        self.lines: queue.Queue[str] = queue.Queue()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for line in self.process.stdout:
            self.lines.put(line)

    def next(self, timeout_s: float = LINE_TIMEOUT_S) -> str:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                return self.lines.get(timeout=0.2)
            except queue.Empty:
                pass
            if not self.reader.is_alive() and self.lines.empty():  # stdout closed: it ended
                raise AssertionError(
                    f"`flowplanner decisions` exited with {self.process.wait()}: "
                    f"{self.process.stderr.read()}"
                )
            if time.monotonic() > deadline:
                raise AssertionError(f"no line from `flowplanner decisions` in {timeout_s:g} s")


def first_line(process: subprocess.Popen, timeout_s: float = LINE_TIMEOUT_S) -> str:
    """The first line a process prints, leaving the rest in its pipe (for a test that closes
    the pipe after it). Only for the first line: see :class:`LineReader`."""
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if selector.select(timeout=0.2):
                return process.stdout.readline()
            assert process.poll() is None, process.stderr.read()
    raise AssertionError(f"no line from `flowplanner decisions` in {timeout_s:g} s")


def test_missing_topic_is_reported_not_a_traceback(kafka_bootstrap: str, kafka_topic: str) -> None:
    result = flowplanner("decisions", "--bootstrap", kafka_bootstrap, "--topic", kafka_topic)
    assert result.returncode == 1
    assert result.stdout == ""
    assert f"Kafka topic '{kafka_topic}' does not exist" in result.stderr
    assert "Traceback" not in result.stderr


def test_empty_topic_prints_only_the_header(kafka_bootstrap: str, kafka_topic: str) -> None:
    KafkaDecisionSink(kafka_bootstrap, kafka_topic).build("out", 0, 1)  # creates the topic
    result = flowplanner("decisions", "--bootstrap", kafka_bootstrap, "--topic", kafka_topic)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == HEADER


def test_reader_that_stops_early_ends_the_command_quietly(
    kafka_bootstrap: str, kafka_topic: str
) -> None:
    # `flowplanner decisions ... | head`: the table is far bigger than a pipe's buffer, so the
    # command is still writing when its reader goes away.
    sink = KafkaDecisionSink(kafka_bootstrap, kafka_topic).build("out", 0, 1)
    sink.write_batch(
        [sample_decision(deployment="llama", decision_id=i, time=float(i)) for i in range(1, 3001)]
    )
    command = ["decisions", "--bootstrap", kafka_bootstrap, "--topic", kafka_topic]
    process = subprocess.Popen(
        [FLOWPLANNER, *command], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert first_line(process).startswith("TIME")
        process.stdout.close()
        stderr = process.stderr.read()
        assert process.wait(30) == 141, stderr  # as a command killed by SIGPIPE
        assert stderr == ""
    finally:
        process.kill()
        process.wait(10)


@pytest.mark.parametrize("command", ["decisions", "ack"])
@pytest.mark.parametrize("timeout", ["-1", "0", "nan", "inf"])
def test_timeout_must_be_a_positive_number_of_seconds(command: str, timeout: str) -> None:
    # librdkafka takes a negative timeout as "wait forever": against an unreachable broker
    # the command would hang instead of saying it cannot reach it.
    args = ["--bootstrap", f"127.0.0.1:{free_port()}", "--topic", "t", "--timeout", timeout]
    if command == "ack":
        args += ["--deployment", "llama", "--decision-id", "1"]
    result = flowplanner(command, *args)
    assert result.returncode == 2
    assert f"--timeout: expected a number of seconds > 0, got {timeout!r}" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_topic_of_planner_input_events_is_refused(kafka_bootstrap: str, kafka_topic: str) -> None:
    # protects: pointed at the planner's events topic, it printed an ERROR row per event and
    # exited 0 (ack refuses the same topic in one line)
    write_raw(kafka_bootstrap, kafka_topic, [event_line("llama", 1.0), event_line("llama", 2.0)])
    result = flowplanner("decisions", "--bootstrap", kafka_bootstrap, "--topic", kafka_topic)
    assert result.returncode == 1 and result.stdout == ""
    assert f"Kafka topic {kafka_topic} at {kafka_bootstrap} holds planner input events" in (
        result.stderr
    )
