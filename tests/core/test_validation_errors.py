"""describe_validation_error: one readable line per bad input, bounded however big the input."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from schemas import ScalingDecision, describe_validation_error, parse_event
from schemas.decision import DecisionAck
from schemas.errors import MAX_LISTED_PROBLEMS, MAX_PROBLEM_CHARS


def reason_for(validate, raw: str | bytes) -> str:
    with pytest.raises(ValidationError) as caught:
        validate(raw)
    return describe_validation_error(caught.value)


def bound(more: int) -> int:
    """Longest possible description: the listed problems, their separators and "+N more"."""
    return MAX_LISTED_PROBLEMS * (MAX_PROBLEM_CHARS + len("; ")) + len(f"+{more} more")


def test_every_failing_field_is_named_when_there_are_few() -> None:
    missing = ["decision_id", "time", "source", "reason"]  # required fields of ScalingDecision
    assert len(missing) <= MAX_LISTED_PROBLEMS
    reason = reason_for(ScalingDecision.model_validate_json, b'{"deployment": "d"}')
    assert reason == "; ".join(f"{field}: Field required" for field in missing)


def test_an_error_without_a_field_is_just_its_message() -> None:
    reason = reason_for(ScalingDecision.model_validate_json, b"{not json")
    assert reason.startswith("Invalid JSON: ")


def test_many_bad_fields_are_listed_up_to_a_bound_then_counted() -> None:
    extra = 10_000
    raw = json.dumps(
        {"deployment": "d", "acked_decision_id": 1} | {f"k{i}": 0 for i in range(extra)}
    )
    reason = reason_for(DecisionAck.model_validate_json, raw)
    parts = reason.split("; ")
    assert parts[:MAX_LISTED_PROBLEMS] == [
        f"k{i}: Extra inputs are not permitted" for i in range(MAX_LISTED_PROBLEMS)
    ]
    assert parts[MAX_LISTED_PROBLEMS:] == [f"+{extra - MAX_LISTED_PROBLEMS} more"]
    assert len(reason) <= bound(extra)


def test_input_quoted_in_a_problem_is_clipped() -> None:
    huge = "x" * 1_000_000
    # An unknown key is the field's location; an unknown event type is quoted in the message.
    ack = {"deployment": "d", "acked_decision_id": 1, huge: 0}
    unknown_key = reason_for(DecisionAck.model_validate_json, json.dumps(ack))
    unknown_type = reason_for(parse_event, json.dumps({"type": huge, "deployment": "d"}))
    for reason in (unknown_key, unknown_type):
        assert len(reason) <= MAX_PROBLEM_CHARS
        assert reason.endswith("…")
    assert unknown_key.startswith("xxx")
    assert unknown_type.startswith("Input tag 'xxx")
