"""``flowplanner bench --seeds N``: every row over several seeds, one table of means and ranges;
the reference row with the spec's defaults; ``--max-num-seqs`` reaching the simulated engines."""

from __future__ import annotations

import json
import statistics

import pytest

from bench.closed_loop import Score, bench_table, reference_spec_defaults, run_bench, summarize
from flows.scenario import DEFAULT_CONFIG, Scenario, fleet_spec, load_requests
from schemas import load_config
from tests.flow.runner import flowplanner

CONFIG = load_config(DEFAULT_CONFIG)["sim"]
TINY = ("--synthetic", "poisson", "--duration", "30", "--rate", "2")


def bench_run(seed: int) -> list[Score]:
    """The whole bench on one minute of Poisson traffic at 4 req/s."""
    requests = load_requests(synthetic="poisson", rate_rps=4.0, duration_s=60.0, seed=seed)
    scenario = Scenario(requests, fleet_spec(CONFIG), seed=seed)
    return [Score.of(outcome) for outcome in run_bench(scenario, CONFIG)]


@pytest.fixture(scope="module")
def two_seeds() -> list[list[Score]]:
    return [bench_run(0), bench_run(1)]


def test_every_cell_is_the_mean_over_seeds_and_attainment_shows_its_range(two_seeds):
    rows = summarize(two_seeds)
    assert [row.name for row in rows] == [score.name for score in two_seeds[0]]
    assert [row.name for row in rows][2:4] == ["reference", "reference, spec defaults"]
    seeds_differ = False
    for i, row in enumerate(rows):
        results = [run[i].result for run in two_seeds]
        slas = [r.sla_attainment for r in results]
        assert row.seeds == 2
        assert row.sla_attainment == pytest.approx(statistics.mean(slas))
        assert row.sla_range == (min(slas), max(slas))
        assert row.gpu_hours == pytest.approx(statistics.mean(r.gpu_hours for r in results))
        assert row.scaling_actions == statistics.mean(r.scaling_actions for r in results)
        assert row.reversals_5min == statistics.mean(r.reversals_5min for r in results)
        assert row.ttft_ms_p90 == pytest.approx(statistics.mean(r.ttft_ms_p90 for r in results))
        assert row.itl_ms_p90 == pytest.approx(statistics.mean(r.itl_ms_p90 for r in results))
        seeds_differ |= results[0].ttft_ms_p90 != results[1].ttft_ms_p90
    assert seeds_differ  # otherwise the means above would prove nothing

    table = bench_table(rows).splitlines()
    assert len(table) == 1 + len(rows)
    for line, row in zip(table[1:], rows, strict=True):
        low, high = row.sla_range
        assert f"% ({100 * low:.1f}–{100 * high:.1f})" in line, line


def test_one_seed_prints_the_single_run_table_without_ranges(two_seeds):
    rows = summarize(two_seeds[:1])
    assert all(row.seeds == 1 and row.sla_range is not None for row in rows)
    table = bench_table(rows)
    assert "(" not in table and "–" not in table, table
    peak, speed = two_seeds[0][0].result, two_seeds[0][0].speed
    assert table.splitlines()[1].split() == [
        "static",
        "peak",
        f"{100 * peak.sla_attainment:.1f}%",
        f"{peak.gpu_hours:.2f}",
        "1.00",
        str(peak.scaling_actions),
        str(peak.reversals_5min),
        f"{peak.ttft_ms_p90:,.0f}",
        f"{peak.itl_ms_p90:,.1f}",
        f"{speed:,.0f}",
    ]


def test_runs_whose_rows_differ_are_refused(two_seeds):
    with pytest.raises(ValueError, match="run 1 has rows"):
        summarize([two_seeds[0], two_seeds[1][:-1]])
    with pytest.raises(ValueError, match="no run"):
        summarize([])


def test_the_spec_defaults_row_is_the_reference_with_arima_and_consolidation():
    reference = CONFIG.reference_variant()
    spec = reference_spec_defaults(CONFIG)
    assert CONFIG.load_predictor == "constant"  # the example config: the reference row's
    assert (spec.load_predictor, spec.scale_down_rule) == ("arima", "consolidation")
    changed = {
        field
        for field in type(spec).model_fields
        if getattr(spec, field) != getattr(reference, field)
    }
    assert changed == {"load_predictor", "scale_down_rule"}


def test_cli_runs_consecutive_seeds_from_seed_and_writes_each(tmp_path):
    scores = tmp_path / "scores.json"
    done = flowplanner("bench", *TINY, "--seed", "5", "--seeds", "2", "--json", str(scores))
    assert done.returncode == 0, done.stderr
    assert "seed 5" in done.stderr and "seed 6" in done.stderr, done.stderr
    result = json.loads(scores.read_text())
    assert list(result)[3] == "reference, spec defaults"
    assert {name: [r["seed"] for r in runs] for name, runs in result.items()} == {
        name: [5, 6] for name in result
    }
    assert "–" in done.stdout  # the attainment ranges


def test_cli_max_num_seqs_caps_the_engines_batches(tmp_path):
    def static_peak(*options: str) -> dict:
        scores = tmp_path / "scores.json"
        done = flowplanner("bench", *TINY[:-1], "8", *options, "--json", str(scores))
        assert done.returncode == 0, done.stderr
        return json.loads(scores.read_text())["static peak"]  # one seed: one run per row

    default, one = static_peak(), static_peak("--max-num-seqs", "1")
    # the hindsight plan (which sizes the static fleets) sees one sequence per decode batch ...
    assert one["max_replicas"]["decode"] > default["max_replicas"]["decode"]
    # ... and so do the engines: more of them, yet slower tokens (requests wait for the slot)
    assert one["itl_ms_p90"] > default["itl_ms_p90"]
    assert flowplanner("bench", *TINY, "--max-num-seqs", "0").returncode == 2


def test_every_column_is_the_mean_over_seeds_of_that_column() -> None:
    """Each averaged column comes from its own field of every seed (hand-made runs whose
    columns all differ between the seeds, so taking one seed, a max or another column fails)."""
    from dataclasses import replace

    from sim.scoring import score

    base = score(500, 50, [], 0, 0, [], {"decode": 3600.0}, 3600.0)
    seeds = [
        (0.5, 2.0, 4, 1, 100.0, 10.0, 300.0),
        (0.9, 4.0, 10, 5, 300.0, 20.0, 100.0),
        (0.7, 9.0, 1, 0, None, 60.0, 200.0),  # a seed without a TTFT percentile
    ]
    runs = [
        [
            Score(
                "ours",
                replace(
                    base,
                    sla_attainment=sla,
                    gpu_hours=gpu_h,
                    scaling_actions=actions,
                    reversals_5min=reversals,
                    ttft_ms_p90=ttft,
                    itl_ms_p90=itl,
                ),
                speed,
            )
        ]
        for sla, gpu_h, actions, reversals, ttft, itl, speed in seeds
    ]
    (row,) = summarize(runs)
    assert row.seeds == 3
    assert row.sla_attainment == pytest.approx(0.7)
    assert row.sla_range == (0.5, 0.9)
    assert row.gpu_hours == pytest.approx(5.0)
    assert row.scaling_actions == pytest.approx(5.0)
    assert row.reversals_5min == pytest.approx(2.0)
    assert row.ttft_ms_p90 == pytest.approx(200.0)  # over the seeds that have one
    assert row.itl_ms_p90 == pytest.approx(30.0)
    assert row.speed == pytest.approx(200.0)
