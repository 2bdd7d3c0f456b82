"""A ``dynamo.request.trace.v1`` topic carrying messages that Python's JSON decoder refuses with
something other than a ``JSONDecodeError`` (an integer of more than 4300 digits, nesting deeper
than the recursion limit), an implausible prompt length and an ``event_type`` that is not a
string: each is a dead letter naming the offset, the flow keeps going, and the valid requests
around them are counted."""

from __future__ import annotations

import json

from tests.flow.runner import flowplanner, read_jsonl, write_config
from tests.flow.test_kafka_requests import CONFIG, INTERVAL_S, publish


def request_end(
    at_s: float, isl: int | str = 100, osl: int | str = 10, request_id: str | None = None
) -> bytes:
    request: dict[str, object] = {
        "input_tokens": "ISL",
        "output_tokens": "OSL",
        "request_received_ms": 0,
    }
    if request_id is not None:
        request["request_id"] = request_id
    text = json.dumps(
        {
            "schema": "dynamo.request.trace.v1",
            "event_type": "request_end",
            "event_time_unix_ms": at_s * 1000,
            "request": request,
        }
    )
    return text.replace('"ISL"', str(isl)).replace('"OSL"', str(osl)).encode()


def run_on_topic(tmp_path, bootstrap: str, topic: str, messages: list[bytes]):
    """Write ``messages`` to ``topic`` and replay it as qwen's trace topic (ticks and dead
    letters in ``tmp_path``)."""
    publish(bootstrap, topic, messages)
    config = write_config(tmp_path / "c.yaml", {"qwen": CONFIG})
    return flowplanner(
        "run",
        "--config",
        str(config),
        "--input",
        f"kafka://{bootstrap}/{topic}?until=end&format=dynamo-trace&deployment=qwen",
        "--ticks",
        str(tmp_path / "ticks.jsonl"),
        "--dead-letters",
        str(tmp_path / "dead.jsonl"),
    )


def test_undecodable_trace_messages_are_dead_letters(tmp_path, kafka_bootstrap, kafka_topic):
    deep = request_end(152)[:-1] + b', "x": ' + b"[" * 50_000 + b"]" * 50_000 + b"}"
    bad = [
        request_end(151, osl="9" * 5000),  # int() refuses > 4300 digits with a ValueError
        deep,  # RecursionError in json.loads
        request_end(153, isl=2**62),  # no prompt has 4.6e18 tokens
        request_end(154).replace(b'"request_end"', b'["request_end"]'),  # not silently skipped
    ]
    valid = list(range(0, 305, 5))  # one finished request per load window
    messages = [request_end(t) for t in valid if t <= 150] + bad
    messages += [request_end(t) for t in valid if t > 150]

    done = run_on_topic(tmp_path, kafka_bootstrap, kafka_topic, messages)

    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    dead = read_jsonl(tmp_path / "dead.jsonl")
    first_bad = valid.index(150) + 1
    assert [d["position"] for d in dead] == [first_bad + k for k in range(4)]
    assert "4300 digits" in dead[0]["reason"]
    assert "nested too deeply" in dead[1]["reason"]
    assert "input_tokens = 4611686018427387904 is implausible" in dead[2]["reason"]
    assert "event_type must be a string" in dead[3]["reason"]
    assert all(d["reason"].startswith("invalid dynamo.request.trace.v1 event") for d in dead)
    ticks = [t for t in read_jsonl(tmp_path / "ticks.jsonl") if t["ran_throughput"]]
    observed = [t["observed_traffic"]["num_req"] for t in ticks]
    assert observed == [sum(t["time"] - INTERVAL_S <= f < t["time"] for f in valid) for t in ticks]
    assert any(t["time"] - INTERVAL_S <= 150 < t["time"] for t in ticks)  # the bad stretch
    assert "4 dead-lettered" in done.stderr


def test_a_redelivered_request_is_a_duplicate_not_a_second_request(
    tmp_path, kafka_bootstrap, kafka_topic
):
    """A producer retry writes a request_end twice (here: two messages later): the
    copies are ``duplicate`` dead letters naming the first offset, each request counts once,
    and requests without an id are never taken for copies."""
    valid = list(range(0, 305, 5))
    messages = [request_end(t, request_id=f"r{t}") for t in valid]
    messages.insert(12, request_end(50, request_id="r50"))  # r50 is at offset 10
    messages.insert(20, request_end(85, request_id="r85"))  # r85 at 18 (after the insert)
    messages += [request_end(301), request_end(301)]  # no id: two requests

    done = run_on_topic(tmp_path, kafka_bootstrap, kafka_topic, messages)

    assert done.returncode == 0, done.stderr
    dead = read_jsonl(tmp_path / "dead.jsonl")
    assert [(d["position"], d["reason"]) for d in dead] == [
        (12, "duplicate request_end of request 'r50' (first at offset 10)"),
        (20, "duplicate request_end of request 'r85' (first at offset 18)"),
    ]
    ticks = [t for t in read_jsonl(tmp_path / "ticks.jsonl") if t["ran_throughput"]]
    finished = [*valid, 301, 301]
    observed = [t["observed_traffic"]["num_req"] for t in ticks]
    assert observed == [
        sum(t["time"] - INTERVAL_S <= f < t["time"] for f in finished) for t in ticks
    ]
