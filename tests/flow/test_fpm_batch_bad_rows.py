"""A refused row of an ``fpm_batch`` costs that row only, not the batch's valid passes.

One implausible row (a 61 s forward pass) used to make its whole batch one dead letter: the 19
valid passes of its engine in that tick window were lost with it. Each stream here runs through
the real CLI (bytewax runtime, 1 and 2 workers) with the bad row(s) and with them removed: the
decisions and tick records must be the same, and the bad rows must be one dead letter naming
the line and the rows (one per line: a line of thousands of bad rows used to cost one dead
letter, and one decode of the whole line, per row).
"""

from __future__ import annotations

from pathlib import Path

from connectors.pipeline_metrics import dead_letter_kind
from schemas import FPM_COLUMN, ForwardPassMetrics, fpm_to_row
from tests.flow.runner import run_recorded, write_config
from tests.flow.streams import DECODE_CONFIG, decode_ramp, write_stream

WINDOW_S = 5.0
"""DECODE_CONFIG's tick window (its load adjustment interval)."""


def batched(events: list[dict], worker: str) -> list[dict]:
    """``events`` with ``worker``'s forward passes sent as one ``fpm_batch`` per tick window,
    at (and in the place of) the window's last pass (20 rows: one every 0.25 s)."""
    last_of_window: dict[int, float] = {}
    for event in events:
        if event["type"] == "fpm" and event["payload"]["fpm"]["worker_id"] == worker:
            last_of_window[int(event["time"] // WINDOW_S)] = event["time"]
    out: list[dict] = []
    rows: list[list] = []
    for event in events:
        if event["type"] != "fpm" or event["payload"]["fpm"]["worker_id"] != worker:
            out.append(event)
            continue
        fpm = ForwardPassMetrics.model_validate(event["payload"]["fpm"])
        rows.append(list(fpm_to_row(event["time"], fpm)))
        if last_of_window[int(event["time"] // WINDOW_S)] == event["time"]:
            payload = {"role": "decode", "worker_id": worker, "rows": rows}
            out.append(
                {"type": "fpm_batch", "deployment": "llama", "time": event["time"]}
                | {"payload": payload}
            )
            rows = []
    return out


def with_value(row: list, column: str, value: float) -> list:
    """``row`` with ``column`` (``schemas.FPM_BATCH_COLUMNS``) set to ``value``."""
    return [value if i == FPM_COLUMN[column] else v for i, v in enumerate(row)]


def batch_at(events: list[dict], time: float) -> int:
    """The index of the batch sent at ``time``."""
    return next(i for i, e in enumerate(events) if e["type"] == "fpm_batch" and e["time"] == time)


def run(tmp_path: Path, name: str, events: list[dict]) -> dict:
    config = write_config(tmp_path / "c.yaml", {"llama": DECODE_CONFIG})
    return run_recorded(config, [write_stream(tmp_path / f"{name}.jsonl", events)], tmp_path / name)


def test_one_implausible_row_costs_only_that_row(tmp_path: Path) -> None:
    events = batched(decode_ramp("llama", engines=2, seconds=120), "w0")
    at = batch_at(events, 34.75)
    batch = events[at]
    assert len(batch["payload"]["rows"]) == 20

    rows = batch["payload"]["rows"]
    bad = [*rows[:19], with_value(rows[19], "wall_time", 61.0)]  # a pass over 60 s
    poisoned = [*events[:at], _with_rows(batch, bad), *events[at + 1 :]]
    removed = [*events[:at], _with_rows(batch, bad[:19]), *events[at + 1 :]]

    clean = run(tmp_path, "removed", removed)
    assert clean["dead"] == [] and clean["decisions"]
    mixed = run(tmp_path, "poisoned", poisoned)

    (dead,) = mixed["dead"]
    assert dead["position"] == at + 1 and dead["source"].endswith("poisoned.jsonl")
    assert "row 19: wall_time = 61.0 is implausible" in dead["reason"], dead["reason"]
    assert dead_letter_kind(dead["reason"]) == "invalid"
    assert "1 dead-lettered" in mixed["stderr"]  # counted in flowplanner_dead_letters_total
    assert mixed["decisions"] == clean["decisions"]
    assert mixed["ticks"] == clean["ticks"]


def test_a_batch_of_only_bad_rows_is_only_dead_letters(tmp_path: Path) -> None:
    events = batched(decode_ramp("llama", engines=2, seconds=60), "w0")
    at = batch_at(events, 34.75)
    row = events[at]["payload"]["rows"][0]
    bad = [
        with_value(row, "wall_time", 61.0),  # implausible
        with_value(row, "scheduled.sum_decode_kv_tokens", -5),  # negative
        with_value(row, "scheduled.num_decode_requests", 2**64),  # over MAX_COUNT
        *[with_value(row, "scheduled.var_decode_kv_tokens", float("nan"))] * 3000,  # not finite
    ]
    clean = run(tmp_path, "clean", [*events[:at], *events[at + 1 :]])
    poisoned = [*events[:at], _with_rows(events[at], bad), *events[at + 1 :]]
    mixed = run(tmp_path, "poisoned", poisoned)

    (dead,) = mixed["dead"]
    reason = dead["reason"]
    assert reason.startswith("invalid event: fpm_batch.payload: 3003 of 3003 rows refused: ")
    for named in ("row 0: wall_time = 61.0", "row 1: scheduled", "row 2: scheduled"):
        assert named in reason, reason
    assert reason.endswith("; and 3000 more"), reason
    assert dead["position"] == at + 1 and len(dead["raw"]) == 500  # clipped (MAX_RAW_CHARS)
    assert "1 dead-lettered" in mixed["stderr"]
    assert mixed["decisions"] == clean["decisions"]
    assert mixed["ticks"] == clean["ticks"]


def _with_rows(batch: dict, rows: list[list]) -> dict:
    return batch | {"payload": batch["payload"] | {"rows": rows}}
