"""Numbers in event payloads and in the config's ``capabilities`` block are taken strictly, as
forward-pass payloads and event times already were: a quoted number (``"12"``) or a boolean
(``true``) where a count or a length belongs is an invalid event, dead-lettered and counted,
never read as 12 or 1; an integer where a float belongs is a number and stays valid. (A
capabilities event with ``max_num_seqs: true`` was read as 1 and dead-lettered every later
valid forward pass as beyond the engine's limits.)"""

from __future__ import annotations

import copy
import json
import re

import pytest

from schemas import PlannerConfig
from schemas.config_file import ConfigError, load_config
from tests.flow.streams import DECODE_CONFIG, decode_ramp
from tests.robustness.inline_flow import run_lines

CONFIG = PlannerConfig(**DECODE_CONFIG)
ROW = [40.0, 7, 0.02, 0, 0, 0.0, 0, 4, 4000, 0.0, 0, 0, 0.0, 0, 0, 0.0]


def loosely_typed(t: float) -> list[tuple[dict, str]]:
    """(event with a string or boolean number, field its dead letter names)."""

    def event(kind: str, payload: dict) -> dict:
        return {"type": kind, "deployment": "llama", "time": t, "payload": payload}

    batch = {"role": "decode", "worker_id": "w9", "rows": [[t, *ROW[1:]]]}
    return [
        (event("capabilities", {"decode": {"max_num_seqs": True}}), "decode.max_num_seqs"),
        (event("capabilities", {"decode": {"num_gpu": "2"}}), "decode.num_gpu"),
        (event("inventory", {"ready_num_decode": "9", "expected_num_decode": 9}), "ready_num"),
        (event("inventory", {"decode_scaling_in_progress": "true"}), "scaling_in_progress"),
        (event("request", {"isl": "2000", "osl": 200}), "payload.isl"),
        (event("request", {"isl": 2000, "osl": 200, "kv_hit_rate": "0.5"}), "kv_hit_rate"),
        (event("traffic", {"duration_s": 60, "num_req": "1e4", "isl": 1, "osl": 1}), "num_req"),
        (event("traffic", {"duration_s": True, "num_req": 1, "isl": 1, "osl": 1}), "duration_s"),
        (event("ack", {"acked_decision_id": "1"}), "acked_decision_id"),
        (event("fpm_batch", batch | {"dp_rank": True}), "payload.dp_rank"),
        (event("fpm_batch", batch | {"rows": [[t, "7", *ROW[2:]]]}), "rows.0.1"),
        (event("fpm_batch", batch | {"rows": [[t, 7, *ROW[2:8], True, *ROW[9:]]]}), "rows.0.8"),
    ]


def test_quoted_and_boolean_numbers_are_dead_letters_and_change_nothing():
    valid = decode_ramp("llama", engines=2, seconds=60)
    # integers where floats belong are numbers: this traffic observation is valid
    traffic = {"duration_s": 30, "num_req": 60, "isl": 3000, "osl": 150}
    valid.insert(200, {"type": "traffic", "deployment": "llama", "time": 25.0, "payload": traffic})
    mixed, expected = [], []
    for i, event in enumerate(valid):
        mixed.append(event)
        if i % 80 == 79 and event["time"] > 20:
            for bad, field in loosely_typed(event["time"]):
                mixed.append(bad)
                expected.append(field)
    assert len(expected) >= 36

    clean = run_lines({"llama": CONFIG}, copy.deepcopy(valid))
    outputs = run_lines({"llama": CONFIG}, mixed)

    reasons = [letter.reason for letter in outputs.dead]
    assert len(reasons) == len(expected), reasons
    for reason, field in zip(reasons, expected, strict=True):
        assert reason.startswith("invalid event: ") and field in reason, (field, reason)
        assert "valid integer" in reason or "valid number" in reason or "valid bool" in reason
    assert outputs.counted == {"invalid": len(expected)}
    assert clean.decisions, "the ramp scales up"
    assert outputs.decisions == clean.decisions
    assert not clean.dead


@pytest.mark.parametrize(
    ("capabilities", "words"),
    [
        ({"max_num_seqs": "12"}, "max_num_seqs: Input should be a valid integer, got '12'"),
        ({"num_gpu": True}, "num_gpu: Input should be a valid integer, got True"),
        ({"max_kv_tokens": 1e5}, "max_kv_tokens: Input should be a valid integer, got 100000.0"),
    ],
)
def test_the_config_refuses_loosely_typed_capabilities(capabilities, words):
    inline = {"deployments": {"d": {"mode": "decode", "capabilities": {"decode": capabilities}}}}
    with pytest.raises(ConfigError, match=re.escape("capabilities.decode." + words)):
        load_config(json.dumps(inline))
