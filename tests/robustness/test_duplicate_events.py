"""Each input is used once: within one tick window, a repeated request (same ``request_id``)
and a repeated forward pass (same engine, ``counter_id``, event time and values) are dead letters
(``duplicate: …``), counted, and the run decides as if each had come once. Counter ids an engine
reuses in a later window (a restart), or passes at different times that all leave
``counter_id`` at 0 (producers that predate it), are not copies. (Repeated request lines added
a decision; one batch of 10 000 identical rows changed 18 decisions to 22.)"""

from __future__ import annotations

import copy

from schemas import PlannerConfig
from tests.flow.runner import run_recorded, write_config
from tests.flow.streams import DECODE_CONFIG, decode_ramp, write_stream
from tests.robustness.inline_flow import run_lines

CONFIG = PlannerConfig(**DECODE_CONFIG | {"fpm_samples_per_engine_per_tick": 8})
REQUEST = {"isl": 3000, "osl": 300}


def with_requests(events: list[dict], seconds: int) -> list[dict]:
    requests = [
        {
            "type": "request",
            "deployment": "llama",
            "time": t + 0.1,
            "payload": REQUEST | {"request_id": f"r{t}", "osl": 100 + 7 * t},
        }
        for t in range(seconds)
    ]
    return sorted(events + requests, key=lambda e: e["time"])


def batch(t: float, rows: int) -> dict:
    """A batch of ``rows`` copies of one forward pass of engine w1 at ``t``."""
    row = [t, 99_999, 0.05, 0, 0, 0.0, 0, 200, 400_000, 0.0, 0, 0, 0.0, 0, 0, 0.0]
    payload = {"role": "decode", "worker_id": "w1", "rows": [row] * rows}
    return {"type": "fpm_batch", "deployment": "llama", "time": t, "payload": payload}


def twice(event: dict) -> bool:
    """Whether the test delivers ``event`` twice (not at 60 s: the stream ends in that window,
    which never closes, so nothing in it is used or refused)."""
    if event["time"] >= 60:
        return False
    return event["type"] == "request" or (event["type"] == "fpm" and event["time"] % 3 == 0)


def test_repeated_requests_and_forward_passes_are_dead_letters(tmp_path):
    clean = with_requests(decode_ramp("llama", engines=2, seconds=60), 60)
    clean.insert(len(clean) // 2, batch(clean[len(clean) // 2]["time"], 1))
    mixed = []
    for event in clean:
        mixed.append(event)
        if twice(event):
            mixed.append(copy.deepcopy(event))  # delivered twice
        if event["type"] == "fpm_batch":
            mixed[-1] = batch(event["time"], 3000)
    repeated_requests = 60
    repeated_passes = sum(1 for e in clean if e["type"] == "fpm" and twice(e))
    config = write_config(tmp_path / "c.yaml", {"llama": CONFIG.model_dump(exclude_unset=True)})

    outputs = {
        name: run_recorded(
            config, [write_stream(tmp_path / f"{name}.jsonl", events)], tmp_path / name
        )
        for name, events in (("clean", clean), ("mixed", mixed))
    }

    reasons = [letter["reason"] for letter in outputs["mixed"]["dead"]]
    assert len(reasons) == repeated_requests + repeated_passes + 2999
    assert all(reason.startswith("duplicate: ") for reason in reasons)
    assert sum("request 'r7' repeats" in r for r in reasons) == 1
    assert sum("engine 'w1' (dp_rank 0)" in r and "counter_id 99999" in r for r in reasons) == 2999
    stderr = outputs["mixed"]["stderr"]
    assert f"{len(reasons)} dead-lettered" in stderr  # flowplanner_dead_letters_total
    assert not outputs["clean"]["dead"]
    assert outputs["clean"]["decisions"]
    assert outputs["mixed"]["decisions"] == outputs["clean"]["decisions"]
    assert outputs["mixed"]["ticks"] == outputs["clean"]["ticks"]


def test_counter_ids_reused_in_later_windows_or_left_at_zero_are_not_copies():
    ramp = decode_ramp("llama", engines=2, seconds=60)
    restarted, unnumbered = copy.deepcopy(ramp), copy.deepcopy(ramp)
    for event in restarted[2:]:
        event["payload"]["fpm"]["counter_id"] %= 50  # the engine restarts every 12.5 s
    for event in unnumbered[2:]:
        del event["payload"]["fpm"]["counter_id"]  # 0: a producer before counter_id

    reference = run_lines({"llama": CONFIG}, ramp)
    for events in (restarted, unnumbered):
        outputs = run_lines({"llama": CONFIG}, events)
        assert not outputs.dead and not outputs.counted
        assert outputs.decisions == reference.decisions


def test_requests_repeated_in_a_later_window_or_without_an_id_are_used():
    ramp = decode_ramp("llama", engines=2, seconds=60)
    # protects: an empty id (a field a producer left unset) made every such request of a
    # window but the first a duplicate
    unset = REQUEST | {"request_id": ""}
    plain = [{"type": "request", "deployment": "llama", "time": 30.1, "payload": p}
             for p in (REQUEST, REQUEST, unset, unset)]  # fmt: skip
    again = [
        {
            "type": "request",
            "deployment": "llama",
            "time": t,
            "payload": REQUEST | {"request_id": "a"},
        }
        for t in (30.1, 40.1)  # windows are 5 s
    ]
    outputs = run_lines({"llama": CONFIG}, sorted(ramp + plain + again, key=lambda e: e["time"]))
    assert not outputs.dead
    traffic = next(r.observed_traffic for r in outputs.ticks if r.time == 45.0)
    assert traffic is not None and traffic.num_req == 6  # the load tick's 30 s window


def test_identical_passes_of_an_engine_that_does_not_count_are_not_copies():
    # a live source stamps the passes it drains in one poll with one time: two idle heartbeats
    # of an engine that leaves counter_id at 0 are identical rows, and neither is a copy
    ramp = decode_ramp("llama", engines=2, seconds=60)
    for event in ramp[2:]:
        del event["payload"]["fpm"]["counter_id"]
    twice = [*ramp[:40], ramp[40], copy.deepcopy(ramp[40]), *ramp[41:]]
    outputs = run_lines({"llama": CONFIG}, twice)
    assert not outputs.dead and not outputs.counted
