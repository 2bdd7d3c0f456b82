"""The envelope's ``time`` is a JSON number on every event type, as strictly as FPM payloads:
``"30"`` used to be accepted silently (and taken as 30 s)."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from operators.admission import Admission
from schemas import DeadLetter, PlannerConfig, RawEvent, parse_event

PAYLOADS = {
    "fpm": {"role": "decode", "fpm": {"worker_id": "w0", "wall_time": 0.02}},
    "fpm_batch": {"role": "decode", "rows": [[0.0, 1, 0.02] + [0] * 13]},  # at least one row
    "inventory": {"ready_num_decode": 2},
    "capabilities": {"decode": {"max_kv_tokens": 1000}},
    "traffic": {"duration_s": 30, "num_req": 60, "isl": 3000, "osl": 150},
    "request": {"isl": 3000, "osl": 150},
    "ack": {"acked_decision_id": 1},
    "clock": {},
}


def line(kind: str, time: object) -> str:
    return json.dumps({"type": kind, "deployment": "d", "time": time, "payload": PAYLOADS[kind]})


@pytest.mark.parametrize("kind", sorted(PAYLOADS))
def test_time_is_a_json_number(kind: str) -> None:
    assert parse_event(line(kind, 30)).time == 30.0
    assert parse_event(line(kind, 30.5)).time == 30.5
    for bad in ("30", "30.5", True, None, [30]):
        with pytest.raises(ValidationError) as caught:
            parse_event(line(kind, bad))
        assert [e["loc"] for e in caught.value.errors()] == [(kind, "time")], bad


def test_a_string_time_is_a_dead_letter_naming_the_field() -> None:
    admit = Admission({"d": PlannerConfig(mode="decode")})
    letter = admit(RawEvent("in.jsonl", 7, line("fpm", "30")))
    assert isinstance(letter, DeadLetter)
    assert letter.reason == "invalid event: fpm.time: Input should be a valid number"
    assert letter.position == 7
