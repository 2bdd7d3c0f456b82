"""Forward-pass batches whose rows span several tick windows: each row counts in its own
window and a row behind the watermark is late, as single forward passes would be; an empty
batch is a dead letter."""

from __future__ import annotations

import json
from pathlib import Path

from schemas import ForwardPassMetrics, fpm_to_row
from tests.flow.runner import run_recorded, write_config
from tests.flow.streams import DECODE_CONFIG

EXAMPLE = Path(__file__).parents[2] / "examples"
BURST = (EXAMPLE / "decode_burst.jsonl").read_text().splitlines()


def as_row(time: float, fpm: dict) -> list:
    """An FPM of the example as a batch row (``schemas.FPM_BATCH_COLUMNS``)."""
    return list(fpm_to_row(time, ForwardPassMetrics.model_validate(fpm)))


def batched(lines: list[str], span_s: float) -> list[str]:
    """``lines`` with each engine's forward passes gathered into batches of ``span_s`` seconds
    (several tick windows), each sent at its last row's time once ``span_s`` has passed."""
    out: list[str] = []
    open_batches: dict[str, tuple[float, list[list]]] = {}

    def flush(worker: str) -> None:
        _start, rows = open_batches.pop(worker)
        payload = {"role": "decode", "worker_id": worker, "rows": rows}
        out.append(
            json.dumps(
                {
                    "type": "fpm_batch",
                    "deployment": "llama",
                    "time": rows[-1][0],
                    "payload": payload,
                }
            )
        )

    for line in lines:
        event = json.loads(line)
        for worker in [
            w for w, (start, _) in open_batches.items() if event["time"] - start >= span_s
        ]:
            flush(worker)
        if event["type"] != "fpm":
            out.append(line)
            continue
        fpm = event["payload"]["fpm"]
        worker = fpm["worker_id"]
        open_batches.setdefault(worker, (event["time"], []))[1].append(as_row(event["time"], fpm))
    for worker in list(open_batches):
        flush(worker)
    return out


def run(tmp_path: Path, lines: list[str], tag: str, lateness: float = 0.0) -> dict:
    stream = tmp_path / f"{tag}.jsonl"
    stream.write_text("\n".join(lines) + "\n")
    config = DECODE_CONFIG | {"allowed_lateness_seconds": lateness}
    path = write_config(tmp_path / f"{tag}.yaml", {"llama": config})
    return run_recorded(path, [stream], tmp_path / tag)


def test_batches_spanning_windows_decide_as_single_passes(tmp_path):
    # batches of 12 s (windows of 5 s) sent at their last row, 15 s of lateness allowed
    single = run(tmp_path, BURST, "single", lateness=15.0)
    assert single["decisions"] and single["dead"] == []
    lines = batched(BURST, 12.0)
    assert sum('"fpm_batch"' in line for line in lines) > 10
    spanning = run(tmp_path, lines, "batched", lateness=15.0)
    assert spanning["dead"] == []
    assert spanning["decisions"] == single["decisions"]
    assert spanning["ticks"] == single["ticks"]


def test_a_row_behind_the_watermark_is_late(tmp_path):
    # a batch timed 100 s whose only row is at 1 s: the row is late, as a forward pass at 1 s
    clean = run(tmp_path, BURST, "clean")
    at = next(i for i, line in enumerate(BURST) if json.loads(line)["time"] >= 100.0)
    old = json.loads(BURST[at - 1])["payload"]["fpm"]
    payload = {"role": "decode", "worker_id": "w0", "rows": [as_row(1.0, old)]}
    stray = {"type": "fpm_batch", "deployment": "llama", "time": 100.0, "payload": payload}
    done = run(tmp_path, [*BURST[:at], json.dumps(stray), *BURST[at:]], "late")
    assert [letter["reason"] for letter in done["dead"]] == [
        "late: event time 1.0 is behind the planner's watermark"
    ]
    assert done["decisions"] == clean["decisions"]


def test_an_empty_batch_is_a_dead_letter(tmp_path):
    empty = {"type": "fpm_batch", "deployment": "llama", "time": 100.0}
    empty["payload"] = {"role": "decode", "worker_id": "w0", "rows": []}
    at = next(i for i, line in enumerate(BURST) if json.loads(line)["time"] >= 100.0)
    clean = run(tmp_path, BURST, "clean")
    done = run(tmp_path, [*BURST[:at], json.dumps(empty), *BURST[at:]], "empty")
    [letter] = done["dead"]
    assert "no rows: a batch of forward passes needs at least one" in letter["reason"]
    assert done["decisions"] == clean["decisions"]


def per_second(lines: list[str], before_end_s: float) -> list[str]:
    """``lines`` with each engine's passes of each second gathered into one batch, stamped
    ``before_end_s`` before the end of its second (as the simulator's batches are)."""
    out: list[str] = []
    second: dict[str, list[list]] = {}
    current = 0

    def flush() -> None:
        for worker, rows in sorted(second.items()):
            payload = {"role": "decode", "worker_id": worker, "rows": rows}
            at = current + 1 - before_end_s
            out.append(json.dumps({"type": "fpm_batch", "deployment": "llama", "time": at,
                                   "payload": payload}))  # fmt: skip
        second.clear()

    for line in lines:
        event = json.loads(line)
        if int(event["time"]) != current:
            flush()
            current = int(event["time"])
        if event["type"] == "fpm":
            fpm = event["payload"]["fpm"]
            second.setdefault(fpm["worker_id"], []).append(as_row(event["time"], fpm))
        else:
            out.append(line)
    flush()
    return out


def test_a_batch_a_fraction_of_a_microsecond_before_a_windows_end_is_in_that_window(tmp_path):
    # event time is a microsecond: rounded, 0.2 µs before the end was the end, the batch was
    # split off its rows and closed the window on the other engine's batch of that instant
    one_us = run(tmp_path, per_second(BURST, 1e-6), "one_us")
    assert one_us["decisions"] and one_us["dead"] == []
    fifth = run(tmp_path, per_second(BURST, 2e-7), "fifth_us")
    assert fifth["dead"] == []
    assert (fifth["decisions"], fifth["ticks"]) == (one_us["decisions"], one_us["ticks"])
