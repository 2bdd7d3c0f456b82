"""A schema-valid but physically impossible FPM is dead-lettered and changes nothing.

One ``wall_time=1e300`` pass used to make the decode model estimate an ITL of ~1e303 ms and
scale decode 2 -> 5 in six decisions; one ``sum_decode_kv_tokens=2**64-1`` used to leave the
load loop at ``insufficient_data`` for the rest of a 300 s stream. Both ran silently (no dead
letter). Each stream here runs through the real CLI (bytewax runtime) with and without the
outlier: the outlier must be the only dead letter, its reason must name the field, and the
decisions and tick records must be those of the clean stream.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from connectors.pipeline_metrics import dead_letter_kind
from tests.flow.runner import read_jsonl, run_recorded, write_config
from tests.flow.streams import DECODE_CONFIG, decode_ramp, write_stream

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def run(tmp_path: Path, name: str, config: Path, events: list[dict]) -> dict:
    """Decisions, ticks and dead letters of one CLI run over ``events``."""
    stream = write_stream(tmp_path / f"{name}.jsonl", events)
    return run_recorded(config, [stream], tmp_path / name)


def with_outlier(events: list[dict], time: float, changes: dict) -> tuple[list[dict], int]:
    """``events`` with a copy of w0's FPM at ``time`` inserted after it, ``changes`` applied
    to the copy's FPM (same event time, so nothing else becomes late); and its line number."""
    for i, event in enumerate(events):
        if event["type"] != "fpm" or event["time"] != time:
            continue
        if event["payload"]["fpm"]["worker_id"] == "w0":
            outlier = json.loads(json.dumps(event))
            for path, value in changes.items():
                node = outlier["payload"]["fpm"]
                *parents, leaf = path.split(".")
                for part in parents:
                    node = node[part]
                node[leaf] = value
            return [*events[: i + 1], outlier, *events[i + 1 :]], i + 2
    raise AssertionError(f"no FPM of w0 at {time}")


def assert_only_the_outlier_is_dead(outcome: dict, line: int, field: str) -> None:
    (dead,) = outcome["dead"]
    assert dead["position"] == line
    assert field in dead["reason"] and "implausible" in dead["reason"], dead["reason"]
    assert dead_letter_kind(dead["reason"]) == "invalid"  # counted like every invalid FPM
    assert "1 dead-lettered" in outcome["stderr"]


def test_an_absurd_wall_time_makes_no_decision(tmp_path: Path) -> None:
    # the reviewed recording: decode_burst makes one decision (2 -> 3 at 75 s) when clean
    events = read_jsonl(EXAMPLES / "decode_burst.jsonl")
    config = EXAMPLES / "decode.yaml"
    clean = run(tmp_path, "clean", config, events)
    assert [(d["current_decode"], d["num_decode"]) for d in clean["decisions"]] == [(2, 3)]

    poisoned, line = with_outlier(events, 49.75, {"wall_time": 1e300})
    mixed = run(tmp_path, "mixed", config, poisoned)

    assert_only_the_outlier_is_dead(mixed, line, "wall_time = 1e+300")
    assert mixed["decisions"] == clean["decisions"]
    assert mixed["ticks"] == clean["ticks"]


@pytest.mark.parametrize(
    "field",
    ["scheduled_requests.sum_decode_kv_tokens", "queued_requests.sum_decode_kv_tokens"],
)
def test_an_absurd_kv_sum_does_not_blind_the_load_loop(tmp_path: Path, field: str) -> None:
    events = decode_ramp("llama", engines=2, seconds=300, kv_end=300_000)
    events.append({"type": "clock", "deployment": "llama", "time": 305.0, "payload": {}})
    config = write_config(tmp_path / "c.yaml", {"llama": DECODE_CONFIG})
    clean = run(tmp_path, "clean", config, events)
    reasons = {t["diagnostics"]["load_decision_reason_decode"] for t in clean["ticks"]}
    assert "insufficient_data" not in reasons  # the clean stream keeps the load loop informed

    poisoned, line = with_outlier(events, 49.75, {field: 2**64 - 1})
    mixed = run(tmp_path, "mixed", config, poisoned)

    assert_only_the_outlier_is_dead(mixed, line, f"{field} = {2**64 - 1}")
    assert mixed["decisions"] == clean["decisions"]
    assert mixed["ticks"] == clean["ticks"]


def test_an_absurd_row_of_an_fpm_batch_is_dead_lettered(tmp_path: Path) -> None:
    events = decode_ramp("llama", engines=2, seconds=60)
    config = write_config(tmp_path / "c.yaml", {"llama": DECODE_CONFIG})
    clean = run(tmp_path, "clean", config, events)
    row = [30.0, 1, 0.03, 0, 0, 0.0, 0, 64, 2**64 - 1, 0.0, 0, 0, 0.0, 0, 0, 0.0]
    batch = {
        "type": "fpm_batch",
        "deployment": "llama",
        "time": 30.0,
        "payload": {"role": "decode", "worker_id": "w0", "rows": [row]},
    }
    at = next(i for i, e in enumerate(events) if e["time"] == 30.0) + 1
    mixed = run(tmp_path, "mixed", config, [*events[:at], batch, *events[at:]])

    assert_only_the_outlier_is_dead(mixed, at + 1, "row 0: scheduled.sum_decode_kv_tokens")
    assert mixed["decisions"] == clean["decisions"]
    assert mixed["ticks"] == clean["ticks"]


@pytest.mark.parametrize(
    ("capabilities", "changes", "named"),
    [
        (
            {"max_num_seqs": 512},
            {"scheduled_requests.num_decode_requests": 100_000},
            "max_num_seqs = 512",
        ),
    ],
)
def test_a_pass_beyond_the_engine_capabilities_is_dead_lettered(
    tmp_path: Path, capabilities: dict, changes: dict, named: str
) -> None:
    events = decode_ramp("llama", engines=2, seconds=300, kv_end=300_000)
    events[0]["payload"]["decode"].update(capabilities)  # max_kv_tokens 2e6 and these
    events.append({"type": "clock", "deployment": "llama", "time": 305.0, "payload": {}})
    config = write_config(tmp_path / "c.yaml", {"llama": DECODE_CONFIG})
    clean = run(tmp_path, "clean", config, events)
    assert clean["dead"] == []
    reasons = {t["diagnostics"]["load_decision_reason_decode"] for t in clean["ticks"]}
    assert "insufficient_data" not in reasons

    poisoned, _line = with_outlier(events, 49.75, changes)
    mixed = run(tmp_path, "mixed", config, poisoned)

    (dead,) = mixed["dead"]
    ((field, value),) = changes.items()
    assert f"{field.split('.')[-1]} {value}" in dead["reason"] and named in dead["reason"]
    assert "'w0'" in dead["reason"] and "49.75" in dead["reason"], dead["reason"]
    assert dead["deployment"] == "llama"
    assert dead_letter_kind(dead["reason"]) == "invalid"  # counted like every invalid FPM
    assert "1 dead-lettered" in mixed["stderr"]
    assert json.loads(dead["raw"])["payload"]["fpm"]["counter_id"] == 199  # the pass, replayable
    assert mixed["decisions"] == clean["decisions"]
    assert mixed["ticks"] == clean["ticks"]


def test_more_kv_than_the_engine_holds_is_valid(tmp_path: Path) -> None:
    # with prefix caching a shared prefix is held once but counted once per request: a pass may
    # report more KV than max_kv_tokens (2e6 here) and must not be lost
    events = decode_ramp("llama", engines=2, seconds=60, kv_end=300_000)
    shared, _line = with_outlier(
        events, 49.75, {"scheduled_requests.sum_decode_kv_tokens": 2_500_000}
    )
    config = write_config(tmp_path / "c.yaml", {"llama": DECODE_CONFIG})
    assert run(tmp_path, "shared", config, shared)["dead"] == []
