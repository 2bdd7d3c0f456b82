"""Every input event parses back from its own dump, to the same event.

A ``limits`` event dumped every field, ``null`` for those not given: parsing it back failed
("min_endpoint cannot be null"), and a ``null`` role floor would have meant "reset" rather
than "unchanged". The late and stray dead letters carry that dump as their ``raw``, so they
could not be replayed. :class:`schemas.Limits` now serialises only the fields given.
"""

from __future__ import annotations

import json

import pytest

from flows.horizon import late_letter
from schemas import Limits, parse_event

ROW = [1.0, 7, 0.02, 0, 0, 0.0, 0, 4, 4000, 0.0, 0, 0, 0.0, 0, 0, 0.0]
EVENTS = [
    {"type": "fpm", "payload": {"role": "decode", "fpm": {"worker_id": "w", "wall_time": 0.02}}},
    {"type": "fpm_batch", "payload": {"role": "decode", "worker_id": "w", "rows": [ROW]}},
    {"type": "inventory", "payload": {"ready_num_decode": 2}},
    {"type": "capabilities", "payload": {"decode": {"num_gpu": 2}}},
    {"type": "traffic", "payload": {"duration_s": 60, "num_req": 3, "isl": 1, "osl": 1}},
    {
        "type": "traffic",
        "payload": {"duration_s": 9, "num_req": 3, "isl": 2, "osl": 1, "isl_quantiles": {"p99": 5}},
    },
    {"type": "request", "payload": {"isl": 1, "osl": 1}},
    {"type": "ack", "payload": {"acked_decision_id": 2**64 - 1}},
    {"type": "limits", "payload": {"decode_min_endpoint": 3}},
    {"type": "limits", "payload": {"decode_min_endpoint": None}},
    {"type": "limits", "payload": {"max_gpu_budget": -1}},
    {"type": "limits", "payload": {"min_endpoint": 0, "prefill_min_endpoint": 2}},
    {"type": "limits", "payload": {"min_gpu_budget": 4, "max_gpu_budget": 16}},
    {"type": "clock"},
]


def event_line(raw: dict) -> str:
    return json.dumps({"deployment": "d", "time": 1, **raw})


@pytest.mark.parametrize("raw", EVENTS, ids=lambda raw: f"{raw['type']}:{raw.get('payload')}")
def test_an_event_parses_back_from_its_dump(raw):
    event = parse_event(event_line(raw))
    again = parse_event(event.model_dump_json())
    assert again == event
    assert again.model_dump_json() == event.model_dump_json()


@pytest.mark.parametrize(
    "payload",
    [p["payload"] for p in EVENTS if p["type"] == "limits"],
    ids=lambda payload: str(payload),
)
def test_limits_dump_only_the_fields_given(payload):
    limits = Limits.model_validate(payload)
    assert json.loads(limits.model_dump_json()) == payload
    assert limits.model_dump() == payload == limits.changes()


def test_a_late_limits_letter_can_be_replayed():
    event = parse_event(event_line({"type": "limits", "payload": {"decode_min_endpoint": 3}}))
    letter = late_letter(event)
    assert parse_event(letter.raw) == event
    assert json.loads(letter.raw)["payload"] == {"decode_min_endpoint": 3}
