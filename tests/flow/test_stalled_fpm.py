"""A plausible but wrong forward pass (a stall) is set aside by the perf model, not learned.

A 5 s decode step is within every dead-letter bound, so it reaches the decode model. Learned,
it turns the kv slope negative and the load loop goes blind (``insufficient_data``) for a tick;
screened (``perf_model_suspect_factor``, default 4), nothing of the run changes but the count of
set-aside passes. Each stream runs through the real CLI (bytewax runtime).
"""

from __future__ import annotations

from pathlib import Path

import yaml

from connectors.metrics import PlannerMetrics
from schemas import TickRecord
from tests.flow.runner import read_jsonl
from tests.flow.test_implausible_fpm import EXAMPLES, run, with_outlier


def config_with(tmp_path: Path, factor: float | None) -> Path:
    config = yaml.safe_load((EXAMPLES / "decode.yaml").read_text())
    config["deployments"]["llama"]["perf_model_suspect_factor"] = factor
    path = tmp_path / f"decode-{factor}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def without_set_aside(ticks: list[dict]) -> list[dict]:
    return [{k: v for k, v in t.items() if k != "perf_samples_set_aside"} for t in ticks]


def load_reasons(ticks: list[dict]) -> dict[float, str]:
    return {t["time"]: t["diagnostics"]["load_decision_reason"] for t in ticks if t["ran_load"]}


def test_a_stall_is_set_aside_and_changes_nothing(tmp_path: Path) -> None:
    # The baseline holds the same pass unchanged: one more pass in a tick window shifts which
    # of an engine's passes train the model (fpm_samples_per_engine_per_tick, evenly spaced).
    # Its counter_id differs: an identical copy would be a duplicate, dead-lettered.
    events = read_jsonl(EXAMPLES / "decode_burst.jsonl")
    twin, _line = with_outlier(events, 49.75, {"counter_id": 10**6})
    stalled, _line = with_outlier(events, 49.75, {"wall_time": 5.0})
    screened = config_with(tmp_path, 4.0)

    clean = run(tmp_path, "clean", screened, twin)
    mixed = run(tmp_path, "mixed", screened, stalled)

    assert mixed["dead"] == [] and mixed["decisions"] == clean["decisions"]
    assert without_set_aside(mixed["ticks"]) == without_set_aside(clean["ticks"])
    assert clean["ticks"][-1]["perf_samples_set_aside"] == {"decode": 0}
    assert mixed["ticks"][-1]["perf_samples_set_aside"] == {"decode": 1}


def test_learned_the_same_stall_blinds_the_load_loop(tmp_path: Path) -> None:
    # The reference behaviour (every forward pass learned): what the screen prevents.
    events = read_jsonl(EXAMPLES / "decode_burst.jsonl")
    stalled, _line = with_outlier(events, 49.75, {"wall_time": 5.0})
    learning_all = config_with(tmp_path, None)

    clean = load_reasons(run(tmp_path, "clean", learning_all, events)["ticks"])
    mixed = load_reasons(run(tmp_path, "mixed", learning_all, stalled)["ticks"])

    assert "insufficient_data" not in clean.values()
    assert mixed[50.0] == "insufficient_data"
    assert {t: r for t, r in mixed.items() if t != 50.0} == {
        t: r for t, r in clean.items() if t != 50.0
    }


def test_set_aside_forward_passes_are_counted_from_the_records_totals() -> None:
    metrics = PlannerMetrics()
    for time, totals in ((5.0, {"decode": 0}), (10.0, {"decode": 2}), (15.0, {"decode": 3})):
        metrics.observe(
            TickRecord(deployment="d", time=time, ran_load=True, perf_samples_set_aside=totals)
        )
    metrics.observe(TickRecord(deployment="d", time=20.0))  # a window without a tick
    assert (
        metrics.value("flowplanner_perf_samples_set_aside_total", deployment="d", role="decode")
        == 3
    )
