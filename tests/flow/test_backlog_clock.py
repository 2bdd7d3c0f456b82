"""A live worker that reads a backlog decides what a replay of it decides, however long its
host stalls while reading it.

Live, the host clock moves event time on once the inputs have been quiet for five seconds. A
followed topic read back from its beginning (a restarted worker rebuilding its state) and a
recording joined with live inputs are not quiet while they are read, so a stall of the host
there must not move event time past their data. The stall is modelled deterministically: the
run's host clock (``build_flow(host_clock=...)``) jumps by an hour after a fixed number of
readings, which the test checks happened while the backlog was being read.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from bytewax.inputs import Source

from connectors.backlog import BACKLOG
from connectors.kafka import ensure_topic
from connectors.kafka.source import KafkaEventSource
from connectors.recorded import RecordedSource
from schemas import PlannerConfig
from tests.flow.live_run import HostClock, live_until, publish, replay
from tests.flow.streams import DECODE_CONFIG, decode_ramp, write_stream
from tests.services.process import wait_until

SECONDS = 300.0
"""Of forward passes: 2 400 events, more than two of a source's batches."""

JUMP_AT_READING = 200
"""The host clock jumps at its 200th reading: well inside the first batch of the backlog."""


@pytest.mark.services
@pytest.mark.parametrize("backlog", ["followed topic", "recording joined with a live input"])
def test_a_host_stall_in_the_backlog_changes_nothing(
    tmp_path: Path, kafka_bootstrap: str, kafka_topic: str, backlog: str
) -> None:
    events = decode_ramp("alpha", engines=2, seconds=SECONDS)
    configs = {"alpha": PlannerConfig.model_validate(DECODE_CONFIG)}
    if backlog == "followed topic":
        publish(kafka_bootstrap, kafka_topic, events)
        expected = replay(configs, KafkaEventSource(kafka_bootstrap, kafka_topic, until_end=True))
        live_sources: list[Source] = [KafkaEventSource(kafka_bootstrap, kafka_topic)]
    else:
        stream = write_stream(tmp_path / "history.jsonl", events)
        expected = replay(configs, RecordedSource([stream]))
        ensure_topic(kafka_bootstrap, kafka_topic, partitions=1)  # live, and silent
        live_sources = [RecordedSource([stream]), KafkaEventSource(kafka_bootstrap, kafka_topic)]
    decisions, ticks, dead = expected
    assert decisions and dead == []  # the history decides something, and nothing is late
    clock = HostClock(jump_at=JUMP_AT_READING)

    got = live_until(configs, live_sources, clock, ticks[-1]["time"], last_event=SECONDS)

    assert got[2] == []  # without the backlog rule: every event after the stall is late
    assert got == expected
    assert clock.jumped_while_behind is True  # the stall did happen in the backlog
    assert not BACKLOG.is_behind  # the interrupted run left nothing behind in the registry


@pytest.mark.services
def test_a_stray_event_in_the_history_is_judged_as_its_replay_judges_it(
    kafka_bootstrap: str, kafka_topic: str
) -> None:
    # a forward pass stamped an hour ahead in a followed topic's history: the replay dead-letters
    # it as a stray; a live rebuild used it and found everything after it late (0 decisions)
    events = decode_ramp("alpha", engines=2, seconds=150.0)
    stray = events[100] | {"time": 3600.0}
    events.insert(101, stray)
    configs = {"alpha": PlannerConfig.model_validate(DECODE_CONFIG)}
    publish(kafka_bootstrap, kafka_topic, events)
    expected = replay(configs, KafkaEventSource(kafka_bootstrap, kafka_topic, until_end=True))
    decisions, ticks, dead = expected
    assert decisions and [reason.split(":")[0] for reason in dead] == ["stray"]

    live = [KafkaEventSource(kafka_bootstrap, kafka_topic)]
    assert live_until(configs, live, HostClock(), ticks[-1]["time"], last_event=150.0) == expected


@pytest.mark.services
def test_a_stray_held_at_the_end_of_the_history_is_still_judged_by_the_replay_rule(
    tmp_path: Path, kafka_bootstrap: str, kafka_topic: str
) -> None:
    # the history's last event is a stray an hour ahead; the next measurement comes live, after
    # the history is read: judged then by the live week rule, the stray was used (0 decisions)
    events = decode_ramp("alpha", engines=2, seconds=200.0)
    history = [e for e in events if e["time"] <= 150.0]
    later = [e for e in events if e["time"] > 150.0]
    history.append(history[-1] | {"time": 3600.0})
    configs = {"alpha": PlannerConfig.model_validate(DECODE_CONFIG)}
    recording = write_stream(tmp_path / "all.jsonl", history + later)
    expected = replay(configs, RecordedSource([recording]))
    assert [reason.split(":")[0] for reason in expected[2]] == ["stray"]
    publish(kafka_bootstrap, kafka_topic, history)
    before = BACKLOG.caught_up_at  # (an earlier flow of this process may have set it)

    def publish_once_caught_up() -> None:
        def caught_up() -> bool:
            return BACKLOG.caught_up_at != before and not BACKLOG.is_behind

        wait_until(caught_up, "the history read", timeout_s=120, interval_s=0.01)
        publish(kafka_bootstrap, kafka_topic, later)

    publisher = threading.Thread(target=publish_once_caught_up, daemon=True)
    publisher.start()
    live = [KafkaEventSource(kafka_bootstrap, kafka_topic)]
    got = live_until(configs, live, HostClock(), expected[1][-1]["time"], last_event=200.0)
    publisher.join(timeout=5)
    assert got == expected
