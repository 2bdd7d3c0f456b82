"""A stop request while the decision sink waits for an unreachable (paused) broker.

The sink waits however long the broker is away while the run goes on, but SIGTERM/SIGINT must
still end a live run cleanly: exit status 0, the summary line, and an error naming how many
decisions were not delivered (not an abort from a panic in bytewax's cleanup).
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

import pytest
from confluent_kafka import Producer

from connectors.kafka import KafkaDecisionSink, ensure_topic
from connectors.stopping import stop_waiting
from tests.flow.runner import write_config
from tests.flow.streams import DECODE_CONFIG, decode_ramp
from tests.kafka.samples import sample_decision, topic_partitions, write_in_background
from tests.services.kafka import tansu_process, unique_topic
from tests.services.process import pause, wait_until

WAITING = "decisions not acknowledged yet by"


def test_stop_waiting_ends_a_wait_on_another_thread_and_close_reports_the_rest(
    kafka_topic: str, caplog: pytest.LogCaptureFixture
) -> None:
    # bytewax runs sinks on worker threads when -w > 1, where a signal never arrives:
    # stop_waiting() (called by `flowplanner run` on SIGTERM/SIGINT) must end the wait.
    caplog.set_level("INFO", logger="connectors.kafka.sink")
    with tansu_process() as (bootstrap, broker):
        part = KafkaDecisionSink(bootstrap, kafka_topic, warn_every_s=0.5).build("out", 0, 1)
        part.write_batch([sample_decision(decision_id=1)])
        pause(broker)
        try:
            writer, outcome = write_in_background(
                part, [sample_decision(decision_id=2), sample_decision(decision_id=3)]
            )
            wait_until(
                lambda: any(WAITING in r.getMessage() for r in caplog.records),
                "the sink to wait for the paused broker",
                timeout_s=30,
            )
            assert writer.is_alive() and outcome == []  # waiting, not failed
            stop_waiting()
            writer.join(timeout=30)
            assert not writer.is_alive() and outcome == [None]
            part.close()  # must not raise, must say what is lost
        finally:
            broker.send_signal(signal.SIGCONT)
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert errors == [
        f"2 decisions not delivered to Kafka topic {kafka_topic} at {bootstrap}: "
        "dropped at shutdown (stopped while waiting for the broker)"
    ]


@pytest.mark.parametrize("workers", [1, 2])
def test_sigterm_while_the_sink_waits_for_a_paused_broker_exits_cleanly(
    kafka_bootstrap: str, tmp_path: Path, workers: int
) -> None:
    # Events come from the session broker; decisions go to a second broker, paused once the
    # planner runs. With 1 worker the sink waits on the main thread (the signal interrupts
    # its flush), with 2 on a worker thread (the stop request must reach it another way).
    events = unique_topic(f"stop-events-{workers}")
    ensure_topic(kafka_bootstrap, events)
    config = write_config(
        tmp_path / "config.yaml", {"alpha": {**DECODE_CONFIG, "scale_down_rule": "flat"}}
    )
    err_path = tmp_path / "stderr"
    with tansu_process() as (out_bootstrap, out_broker):
        decisions = unique_topic(f"stop-decisions-{workers}")
        with err_path.open("w") as err_file:
            planner = _start_planner(
                config, kafka_bootstrap, events, out_bootstrap, decisions, workers, err_file
            )
            try:
                # Every worker builds its sink (and checks the topic) as the dataflow starts:
                # pausing the broker before the last one is built would fail the start instead.
                _wait_for_log(
                    planner,
                    err_path,
                    lambda err: err.count(" writes decisions to ") == workers,
                    "every worker's decision sink to start",
                )
                assert topic_partitions(out_bootstrap, decisions) is not None
                pause(out_broker)
                producer = Producer({"bootstrap.servers": kafka_bootstrap})
                start = time.time() // 5 * 5 - 120.0  # recorded a while ago: ticks at once
                for event in decode_ramp("alpha", engines=2, seconds=60):
                    event["time"] += start
                    producer.produce(events, key="alpha", value=json.dumps(event).encode())
                assert producer.flush(30) == 0
                _wait_for_log(
                    planner,
                    err_path,
                    lambda err: WAITING in err,
                    "the decision sink to wait for the paused broker",
                )
                planner.send_signal(signal.SIGTERM)
                planner.wait(timeout=60)
            finally:
                if planner.poll() is None:
                    planner.kill()
                    planner.wait()
                out_broker.send_signal(signal.SIGCONT)
    err = err_path.read_text()
    assert planner.returncode == 0, err[-3000:]
    waiting = re.search(rf"(\d+) {WAITING} Kafka topic {decisions} at {out_bootstrap}", err)
    assert waiting, err[-3000:]
    lost = re.findall(
        rf"ERROR connectors\.kafka\.sink: (\d+) decisions not delivered to "
        rf"Kafka topic {decisions} at {out_bootstrap}: dropped at shutdown",
        err,
    )
    assert lost == [waiting.group(1)], err[-3000:]
    summary = re.compile(
        r"^flowplanner run: stopped by SIGTERM, \d+ events in, 0 dead-lettered, "
        r"[1-9]\d* decisions$",
        re.MULTILINE,
    )
    assert summary.search(err), err[-3000:]


def _wait_for_log(
    planner: subprocess.Popen[str], err_path: Path, check: Callable[[str], bool], what: str
) -> None:
    """Wait until the planner's stderr passes ``check``; a timeout shows that stderr."""
    try:
        wait_until(lambda: check(err_path.read_text()), what, timeout_s=120)
    except AssertionError as error:
        raise AssertionError(
            f"{error} (planner exit status {planner.poll()}); its stderr ends:\n"
            f"{err_path.read_text()[-3000:]}"
        ) from None


def _start_planner(
    config: Path,
    events_bootstrap: str,
    events: str,
    out_bootstrap: str,
    decisions: str,
    workers: int,
    err: IO[str],
) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "flows.cli",
            "run",
            "--config",
            str(config),
            "--input",
            f"kafka://{events_bootstrap}/{events}",
            "--output",
            f"kafka://{out_bootstrap}/{decisions}",
            "-w",
            str(workers),
        ],
        stdout=subprocess.DEVNULL,
        stderr=err,
        text=True,
    )
