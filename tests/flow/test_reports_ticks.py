"""Diagnostics reports of real runs (``flowplanner run --reports``): the page draws what the
tick records say, and a window in which no loop ran is not a tick (spec §12: one snapshot per
tick). Also a run with a single tick and a run with none."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

from connectors.diagnostics import DiagnosticsRecorder
from connectors.report import panels_from_ticks, render_report
from schemas import EngineLoad, PlannerConfig, TickDiagnostics, TickRecord
from tests.flow.runner import flowplanner, read_jsonl, write_config
from tests.flow.streams import DECODE_CONFIG, decode_ramp, merge_streams, write_stream

SVG = "{http://www.w3.org/2000/svg}"


def panels(page: str) -> dict[str, ET.Element]:
    svgs = [ET.fromstring(m) for m in re.findall(r"<svg.*?</svg>", page, flags=re.S)]
    return {svg.get("aria-label"): svg for svg in svgs}


def summary(page: str) -> dict[str, str]:
    return dict(re.findall(r"<tr><td>(.*?)</td><td>(.*?)</td></tr>", page))


def run_with_reports(tmp_path: Path, deployments: dict[str, dict], events: list[dict]):
    tmp_path.mkdir(parents=True, exist_ok=True)
    out = tmp_path / "reports"
    for config in deployments.values():
        config.update(report_output_dir=str(out))
    config = write_config(tmp_path / "c.yaml", deployments)
    stream = write_stream(tmp_path / "s.jsonl", events)
    ticks = tmp_path / "ticks.jsonl"
    done = flowplanner(
        "run", "--config", str(config), "--input", str(stream), "--ticks", str(ticks), "--reports"
    )
    assert done.returncode == 0, done.stderr
    return sorted(out.glob("*.html")) if out.exists() else [], read_jsonl(ticks)


def test_a_deployment_ticking_slower_than_the_window_gets_a_drawn_report(tmp_path):
    # "slow" ticks its load loop every 10 s and its throughput loop every 15 s: its window is
    # 5 s, so some of its windows close without a tick (a bare record). Those are not ticks:
    # counting them made the page claim more ticks, and their empty values cut every line into
    # one-point pieces, so the replicas, ITL and engine-load panels drew nothing at all; and the
    # throughput ticks, which have no engine estimates, cut the ITL line the same way.
    slow = {"load_adjustment_interval_seconds": 10, "enable_throughput_scaling": True}
    deployments = {
        "fast": dict(DECODE_CONFIG),
        "slow": {**DECODE_CONFIG, **slow, "throughput_adjustment_interval_seconds": 15},
    }
    events = merge_streams(
        decode_ramp("fast", engines=2, seconds=40), decode_ramp("slow", engines=2, seconds=40)
    )
    pages, records = run_with_reports(tmp_path, deployments, events)
    slow = [r for r in records if r["deployment"] == "slow"]
    ran = [r for r in slow if r["ran_load"] or r["ran_throughput"]]
    assert len(ran) < len(slow)  # the scenario really has windows without a tick

    (page,) = [p for p in pages if "_slow_" in p.name]
    html = page.read_text()
    facts = summary(html)
    assert facts["ticks"] == str(len(ran))
    assert facts["scaling decisions"] == str(sum(r["decision"] is not None for r in ran))
    drawn = panels(html)
    for title in ("Replicas (ready) and decisions", "Estimated ITL vs SLA"):
        lines = drawn[title].findall(f"{SVG}polyline")
        assert lines, title
        # one line through every tick that has the value, not one-point pieces
        assert all(len(pl.get("points", "").split()) >= 2 for pl in lines), title
    ready = drawn["Replicas (ready) and decisions"].findall(f"{SVG}polyline")[0]
    # a step line: two points per tick after the first
    assert len(ready.get("points", "").split()) == 2 * len(ran) - 1


def test_a_one_tick_run_and_a_run_without_ticks(tmp_path):
    one = decode_ramp("llama", engines=2, seconds=5)
    one.append({"type": "clock", "deployment": "llama", "time": 5.0, "payload": {}})
    pages, records = run_with_reports(tmp_path / "one", {"llama": dict(DECODE_CONFIG)}, one)
    assert len(records) == 1 and records[0]["ran_load"]
    (page,) = pages
    html = page.read_text()
    facts = summary(html)
    assert facts["ticks"] == "1"
    assert facts["time range (UTC)"] == "1970-01-01 00:00:05 – 1970-01-01 00:00:05"
    assert "<script" not in html and "https://" not in html
    assert len(panels(html)) >= 3  # every svg parses

    # nothing ever ticks (the input ends inside the first window): no page, no failure
    none = decode_ramp("llama", engines=2, seconds=3)
    pages, records = run_with_reports(tmp_path / "none", {"llama": dict(DECODE_CONFIG)}, none)
    assert records == [] and pages == []


def test_engine_capacity_is_drawn_from_the_throughput_ticks():
    # spec §12 row 5: the requests per second one engine sustains within the SLA, known on
    # throughput ticks only (the load ticks in between leave it unset)
    ticks = [
        TickRecord(
            deployment="d",
            time=60.0 * i,
            ready_decode=2,
            ran_load=True,
            ran_throughput=i % 3 == 0,
            diagnostics=TickDiagnostics(engine_rps_decode=4.0 + i if i % 3 == 0 else None),
        )
        for i in range(7)
    ]
    panel = panels_from_ticks(ticks)["capacity"]
    (series,) = panel.series
    assert (series.name, list(series.times), list(series.values)) == (
        "decode engine",
        [0.0, 180.0, 360.0],
        [4.0, 7.0, 10.0],
    )
    (line,) = panels(render_report([panel]))[panel.title].findall(f"{SVG}polyline")
    assert len(line.get("points", "").split()) == 3


def test_a_large_fleets_page_is_drawn_from_per_role_sums_held_in_memory(tmp_path):
    # the recorder held every tick's whole engine list until its page was due: a day of 5 s
    # ticks of 64 engines took about 0.9 GiB; the page draws only the sums per role
    def tick(t: int) -> TickRecord:
        engines = [
            EngineLoad(
                role="prefill" if e < 16 else "decode",
                worker_id=f"w{e}",
                queued_prefill_tokens=(7 * t + e) % 500,
                queued_decode_kv_tokens=(11 * t + 3 * e) % 900,
                inflight_decode_kv_tokens=(5 * t + e) % 700,
            )
            for e in range(64)
        ]
        return TickRecord(
            deployment="big", time=5.0 * t, ran_load=True, ready_decode=48, engines=engines
        )

    ticks = [tick(t) for t in range(1, 50)]
    recorder = DiagnosticsRecorder("big", PlannerConfig(report_output_dir=str(tmp_path)))
    for record in ticks:
        recorder.record(record)
    assert {len(t.engines) for t in recorder.ticks} == {2}  # one per role
    full = panels_from_ticks(ticks)
    held = panels_from_ticks(list(recorder.ticks))
    assert render_report(list(held.values())) == render_report(list(full.values()))
    assert full["decode_load"].series  # the panels compared do draw engine load


def page_times(pages: list[Path]) -> list[int]:
    """Each page's last tick in seconds (the ``HHMMSS`` of its name), in the order written."""
    stamps = [page.stem.split("_")[-2] for page in sorted(pages, key=lambda p: p.stem[-3:])]
    return [int(s[:2]) * 3600 + int(s[2:4]) * 60 + int(s[4:]) for s in stamps]


def test_pages_come_every_report_interval_of_event_time(tmp_path):
    # spec §12: last_report = the last tick; a page is due once report_interval_hours (36 s
    # here) has passed since it. The next page counted from the tick after the last one, so
    # with 5 s ticks pages came every 45 s instead of 40 s (with 1 h and 180 s ticks: 3780 s).
    config = {**DECODE_CONFIG, "report_interval_hours": 0.01}
    events = decode_ramp("llama", engines=2, seconds=130)
    pages, records = run_with_reports(tmp_path, {"llama": config}, events)
    ticks = [r["time"] for r in records if r["ran_load"]]
    assert ticks[0] == 5.0 and ticks[-1] > 125.0
    times = page_times(pages)
    assert times[:3] == [45, 85, 125]
    assert len(times) == 4  # and the rest, at the end


def test_an_agg_deployments_page_draws_its_engines_prefill_queue(tmp_path):
    # agg engines report as role decode; their queued prompt tokens drive the agg TTFT rule
    # (spec §4.4), so the page draws them as the prefill engine load (it summed role prefill
    # only, and an agg page never showed its prefill queue)
    events = decode_ramp("agg", engines=2, seconds=30)
    for event in events:
        if event["type"] == "fpm":
            event["payload"]["fpm"]["queued_requests"]["sum_prefill_tokens"] = 1000
    config = {**DECODE_CONFIG, "mode": "agg", "report_interval_hours": None}
    (page,), records = run_with_reports(tmp_path, {"agg": config}, events)
    queued = [
        sum(e["queued_prefill_tokens"] for e in r["engines"]) for r in records if r["ran_load"]
    ]
    assert queued and set(queued) == {2000}
    (line,) = panels(page.read_text())["Prefill engine load"].findall(f"{SVG}polyline")
    assert len(line.get("points", "").split()) == len(queued)
