"""One stray timestamp in one of several merged inputs costs what it costs in one input: one
``stray`` dead letter. The files of a recording, the partitions of a topic read to its end and
the separate inputs of a replay are merged on keys a single stray cannot move
(:mod:`connectors.merge_keys`): keyed at its own time, a stray far ahead held the rest of its
input back behind the others, and all of it came late. A real gap in one input is still merged
at its true time, and a stray that ends its input is merged where it lies."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from confluent_kafka import Producer

import connectors.recorded
from connectors.kafka import ensure_topic
from connectors.merged import MergedSource
from connectors.recorded import RecordedSource
from tests.flow.runner import (
    flowplanner,
    read_jsonl,
    run_recorded,
    run_recorded_text,
    write_config,
)
from tests.flow.streams import DECODE_CONFIG, decode_ramp, write_stream
from tests.flow.test_recorded_files import clock_line, positions, read_all

CONFIG = Path(__file__).parents[2] / "examples" / "decode.yaml"
BURST = CONFIG.parent / "decode_burst.jsonl"


def burst() -> list[dict]:
    """The example recording: two engines, w0 and w1, deciding a scale-up at 75 s."""
    return [json.loads(line) for line in BURST.read_text().splitlines() if line.strip()]


def engine_of(event: dict) -> str:
    """The engine of a forward pass; the deployment's state events go with w0."""
    return event["payload"]["fpm"]["worker_id"] if event["type"] == "fpm" else "w0"


def by_engine(events: list[dict]) -> tuple[list[dict], list[dict]]:
    """``events`` split in two inputs: w0's passes and the state events, and w1's passes."""
    return (
        [e for e in events if engine_of(e) == "w0"],
        [e for e in events if engine_of(e) == "w1"],
    )


def stray_pass(events: list[dict], time: float) -> dict:
    """A copy of w0's forward pass at 50 s, stamped ``time``."""
    at_50 = next(e for e in events if e["type"] == "fpm" and e["time"] == 50.0)
    stray = copy.deepcopy(at_50) | {"time": time}
    stray["payload"]["fpm"]["counter_id"] = 99_999
    return stray


def inserted(events: list[dict], stray: dict, where: str) -> list[dict]:
    """``events`` with ``stray`` as its first line, after its pass at 50 s, or as its last."""
    if where == "first":
        return [stray, *events]
    if where == "last":
        return [*events, stray]
    at = next(k for k, e in enumerate(events) if e["type"] == "fpm" and e["time"] == 50.0)
    return [*events[: at + 1], stray, *events[at + 1 :]]


def split_with(
    events: list[dict], stray: dict, engine: str, where: str
) -> tuple[list[dict], list[dict]]:
    """``events`` split by engine (:func:`by_engine`), ``stray`` inserted in ``engine``'s."""
    w0, w1 = by_engine(events)
    if engine == "w0":
        return inserted(w0, stray, where), w1
    return w0, inserted(w1, stray, where)


def expected(tmp_path: Path, events: list[dict], stray: dict, where: str) -> dict:
    """What one recording decides: without the stray — or, one that ends the input, with it at
    the end of the recording (nothing follows it there either)."""
    whole = [*events, stray] if where == "last" else events
    done = run_recorded_text(CONFIG, "".join(json.dumps(e) + "\n" for e in whole))
    assert done["decisions"], "the recording must decide something"
    return done


def assert_one_stray(dead: list[dict], time: float) -> None:
    assert [d["reason"].split(":")[0] for d in dead] == ["stray"], [d["reason"] for d in dead[:3]]
    assert dead[0]["reason"].startswith(f"stray: event time {time} is more than")


STRAYS = [
    pytest.param(9e10, "w0", "middle", id="far-ahead"),
    pytest.param(3600.0, "w0", "middle", id="an-hour-ahead"),
    pytest.param(9e10, "w1", "first", id="first-line"),
]


@pytest.mark.parametrize(("time", "engine", "where"), STRAYS)
def test_a_stray_in_one_of_two_recording_files_costs_one_dead_letter(tmp_path, time, engine, where):
    events = burst()
    stray = stray_pass(events, time)
    want = expected(tmp_path, events, stray, where)
    w0, w1 = split_with(events, stray, engine, where)
    files = [write_stream(tmp_path / "w0.jsonl", w0), write_stream(tmp_path / "w1.jsonl", w1)]

    got = run_recorded(CONFIG, files, tmp_path / "files")  # on 1 and on 2 workers

    assert_one_stray(got["dead"], time)
    assert got["decisions"] == want["decisions"] and got["ticks"] == want["ticks"]


def test_a_stray_that_ends_its_file_is_merged_where_it_lies(tmp_path):
    # nothing follows it in its file to contradict it: merged at its own time, after the other
    # file's events (w1's passes end at 120 s, w0's file with a clock event at 125 s), as it
    # comes at the end of the one recording
    events = burst()
    stray = stray_pass(events, 3600.0)
    want = expected(tmp_path, events, stray, "last")
    w0, w1 = by_engine(events)
    files = [
        write_stream(tmp_path / "w0.jsonl", w0),
        write_stream(tmp_path / "w1.jsonl", inserted(w1, stray, "last")),
    ]

    got = run_recorded(CONFIG, files, tmp_path / "files")

    assert (got["decisions"], got["dead"]) == (want["decisions"], want["dead"])
    assert got["ticks"] == want["ticks"]


def test_a_real_gap_in_one_file_is_merged_at_its_true_time(tmp_path):
    # engine w0 is silent for 90 s while w1 goes on: its first pass after the gap is more than
    # a minute past its file's last, and is confirmed by the next — kept at the key before it,
    # it would have come before w1's passes of the gap, and made them late
    events = decode_ramp("alpha", engines=2, seconds=240)
    events = [e for e in events if engine_of(e) == "w1" or not 60.0 < e["time"] <= 150.0]
    config = write_config(tmp_path / "c.yaml", {"alpha": DECODE_CONFIG})
    want = run_recorded(config, [write_stream(tmp_path / "whole.jsonl", events)], tmp_path / "one")
    w0, w1 = by_engine(events)
    files = [write_stream(tmp_path / "w0.jsonl", w0), write_stream(tmp_path / "w1.jsonl", w1)]

    got = run_recorded(config, files, tmp_path / "files")

    assert want["decisions"] and want["dead"] == [] and got["dead"] == []
    assert got["decisions"] == want["decisions"] and got["ticks"] == want["ticks"]


MERGED_SOURCES = {
    "files of a recording": lambda a, b: RecordedSource([a, b]),
    "inputs of a replay": lambda a, b: MergedSource([RecordedSource([a]), RecordedSource([b])]),
}


@pytest.mark.parametrize("merged", MERGED_SOURCES)
def test_merged_keys_of_a_stray_and_of_a_jump_at_the_end(tmp_path, monkeypatch, workers, merged):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_text("".join(clock_line("x", t) + "\n" for t in (1, 2, 3, 4)))
    # a stray, and a jump that ends the file (nothing follows it to say it is one)
    b.write_text("".join(clock_line("x", t) + "\n" for t in (2.5, 9e10, 3.5, 200)))
    order = [("a.jsonl", 1), ("a.jsonl", 2), ("b.jsonl", 1), ("b.jsonl", 2), ("a.jsonl", 3)]
    order += [("b.jsonl", 3), ("a.jsonl", 4), ("b.jsonl", 4)]

    assert positions(read_all(MERGED_SOURCES[merged](a, b), workers)) == order

    # stopped after any batch (the stray waiting for the next line, or not), resumed
    monkeypatch.setattr(connectors.recorded, "BATCH_LINES", 1)
    source = MERGED_SOURCES[merged](a, b)
    first = source.build_part("in", source.list_parts()[0], None)
    head: list = []
    while len(head) < len(order):
        head += first.next_batch()
        state = first.snapshot()
        rest = MERGED_SOURCES[merged](a, b).build_part("in", source.list_parts()[0], state)
        tail: list = []
        with pytest.raises(StopIteration):
            while True:
                tail += rest.next_batch()
        rest.close()
        assert positions(head + tail) == order
    first.close()


def produce(bootstrap: str, topic: str, partitions: list[list[dict]]) -> None:
    """Create ``topic`` with one partition per list of events, and write them there."""
    ensure_topic(bootstrap, topic, partitions=len(partitions))
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for partition, events in enumerate(partitions):
        for event in events:
            producer.produce(topic, json.dumps(event).encode(), partition=partition)
    assert producer.flush(30) == 0


def replay(tmp_path: Path, tag: str, *inputs: str, workers: str) -> dict:
    """``flowplanner run`` of the example config over ``inputs``: its decisions, ticks and dead
    letters."""
    files = {name: tmp_path / tag / f"{name}.jsonl" for name in ("decisions", "ticks", "dead")}
    files["dead"].parent.mkdir()
    done = flowplanner(
        "run",
        *("--config", str(CONFIG), "-w", workers),
        *(arg for source in inputs for arg in ("--input", source)),
        *("--output", str(files["decisions"]), "--ticks", str(files["ticks"])),
        *("--dead-letters", str(files["dead"])),
    )
    assert done.returncode == 0, done.stderr
    return {name: read_jsonl(path) if path.exists() else [] for name, path in files.items()}


@pytest.mark.parametrize(("time", "engine", "where"), STRAYS[::2])
def test_a_stray_in_one_partition_of_a_topic_read_to_its_end_costs_one_dead_letter(
    tmp_path, kafka_bootstrap, kafka_topic, time, engine, where
):
    events = burst()
    stray = stray_pass(events, time)
    want = expected(tmp_path, events, stray, where)
    w0, w1 = split_with(events, stray, engine, where)
    produce(kafka_bootstrap, kafka_topic, [w0, w1])
    topic = f"kafka://{kafka_bootstrap}/{kafka_topic}?until=end"

    for workers in ("1", "2"):
        got = replay(tmp_path, f"topic-{workers}", topic, workers=workers)

        assert_one_stray(got["dead"], time)
        assert got["decisions"] == want["decisions"], workers


def test_a_stray_at_the_end_of_a_partition_is_merged_where_it_lies(
    tmp_path, kafka_bootstrap, kafka_topic
):
    events = burst()
    stray = stray_pass(events, 3600.0)
    want = expected(tmp_path, events, stray, "last")
    w0, w1 = by_engine(events)
    produce(kafka_bootstrap, kafka_topic, [w0, inserted(w1, stray, "last")])  # w1's ends first

    topic = f"kafka://{kafka_bootstrap}/{kafka_topic}?until=end"

    got = replay(tmp_path, "topic", topic, workers="1")

    assert (got["decisions"], got["dead"]) == (want["decisions"], want["dead"])
    assert got["ticks"] == want["ticks"]  # its window is ticked: it was read


@pytest.mark.parametrize("poisoned", ["recording", "topic"])
def test_a_stray_in_one_input_of_a_split_replay_costs_one_dead_letter(
    tmp_path, kafka_bootstrap, kafka_topic, poisoned
):
    events = burst()
    stray = stray_pass(events, 9e10)
    want = expected(tmp_path, events, stray, "middle")
    w0, w1 = by_engine(events)  # the deployment's state and w0 in the recording, w1 in a topic
    if poisoned == "recording":
        w0 = inserted(w0, stray, "middle")
    else:
        w1 = inserted(w1, stray, "middle")
    produce(kafka_bootstrap, kafka_topic, [w1])
    recording = str(write_stream(tmp_path / "w0.jsonl", w0))
    topic = f"kafka://{kafka_bootstrap}/{kafka_topic}?until=end"

    for workers in ("1", "2"):
        for order, inputs in (
            ("file-first", (recording, topic)),
            ("topic-first", (topic, recording)),
        ):
            got = replay(tmp_path, f"{order}-{workers}", *inputs, workers=workers)

            assert_one_stray(got["dead"], 9e10)
            assert got["decisions"] == want["decisions"], (order, workers)


def refused_pass(events: list[dict], why: str) -> dict:
    """A copy of w0's pass at 50 s, stamped 105 s (under a minute ahead: no stray), that
    admission refuses: of a deployment the config does not have, or of a role not in its mode."""
    refused = stray_pass(events, 105.0)
    if why == "unknown deployment":
        refused["deployment"] = "other"
    else:
        refused["payload"]["role"] = "prefill"
    return refused


@pytest.mark.parametrize("why", ["unknown deployment", "role"])
@pytest.mark.parametrize("split", ["files", "topic"])
def test_a_refused_event_in_one_merged_input_does_not_make_its_neighbours_late(
    tmp_path, kafka_bootstrap, kafka_topic, why, split
):
    # read alone, admission refuses it before the event time moves; merged at its own time, it
    # held the 55 s of w0's passes after it back behind w1's, and they all came late
    events = burst()
    want = expected(tmp_path, events, {}, "middle")
    w0, w1 = by_engine(events)
    w0 = inserted(w0, refused_pass(events, why), "middle")
    if split == "files":
        files = [write_stream(tmp_path / "w0.jsonl", w0), write_stream(tmp_path / "w1.jsonl", w1)]
        got = run_recorded(CONFIG, files, tmp_path / "files")
    else:
        produce(kafka_bootstrap, kafka_topic, [w0, w1])
        got = replay(
            tmp_path, "topic", f"kafka://{kafka_bootstrap}/{kafka_topic}?until=end", workers="1"
        )

    assert [d["reason"].split(" ")[0] for d in got["dead"]] == [why.split(" ")[0]], got["dead"][:3]
    assert got["decisions"] == want["decisions"] and got["ticks"] == want["ticks"]
