"""The HTML report: self-contained, well-formed SVG panels from a simulated run and tick records."""

from __future__ import annotations

import math
import re
import xml.etree.ElementTree as ET
from pathlib import Path

from connectors.report import (
    Panel,
    Series,
    closed_loop_panels,
    panels_from_ticks,
    render_panel,
    render_report,
    write_report,
)
from schemas import (
    EngineLoad,
    ScalingDecision,
    TickDiagnostics,
    TickRecord,
    TrafficObservation,
)
from schemas.profile import PerformanceProfile
from schemas.trace import TraceRequest
from sim.fleet import FleetSim, FleetSpec
from tests.decisions import decision
from tests.sim.lockstep import run


def _ticks(n: int) -> list[TickRecord]:
    ticks = []
    for i in range(n):
        t = 5.0 * (i + 1)
        dec = None
        if i == 3:
            dec = ScalingDecision(
                deployment="sim",
                decision_id=1,
                time=t,
                num_decode=2,
                source="load",
                reason="scale_up",
            )
        ticks.append(
            TickRecord(
                deployment="sim",
                time=t,
                ready_prefill=1,
                ready_decode=1 if i < 6 else 2,
                decision=dec,
                diagnostics=TickDiagnostics(
                    estimated_ttft_ms=100.0 + i,
                    estimated_itl_ms=None if i == 2 else 20.0 + i,
                    predicted_num_req=50.0,
                    load_decision_reason="scale_up" if i == 3 else "no_change",
                ),
                engines=[
                    EngineLoad(role="prefill", worker_id="prefill-0", queued_prefill_tokens=10 * i),
                    EngineLoad(
                        role="decode",
                        worker_id="decode-1",
                        queued_decode_kv_tokens=i,
                        inflight_decode_kv_tokens=1000 + i,
                    ),
                ],
                observed_traffic=TrafficObservation(
                    duration_s=5.0, num_req=40 + i, isl=3000, osl=150
                ),
            )
        )
    return ticks


def _svgs(page: str) -> list[ET.Element]:
    return [ET.fromstring(m) for m in re.findall(r"<svg.*?</svg>", page, flags=re.S)]


def test_closed_loop_report_is_self_contained(tmp_path: Path, h200: PerformanceProfile) -> None:
    reqs = [TraceRequest(arrival_s=0.2 * i, isl=2000, osl=100) for i in range(300)]
    sim = FleetSim(FleetSpec(profile=h200, prefill_replicas=1, decode_replicas=1), reqs)
    run(
        sim,
        tick_s=5.0,
        decide=lambda t, _: (
            decision(deployment="sim", time=t, num_decode=2, reason="test") if t == 20.0 else None
        ),
    )
    panels = closed_loop_panels(
        sim.timeline(5.0), _ticks(12), ttft_ms=500, itl_ms=50, max_kv_tokens=945_029
    )
    titles = [p.title for p in panels]
    assert titles[:5] == [
        "Request rate",
        "Request rate (planner)",
        "Replicas (ready; total incl. starting and draining)",
        "Replicas (ready) and decisions",
        "Queued tokens and KV in use",
    ]
    ttft = next(p for p in panels if p.title == "TTFT vs SLA")
    assert [s.name for s in ttft.series] == [
        "observed TTFT mean",
        "observed TTFT p90",
        "estimated TTFT",
    ]
    assert ttft.hlines == [("SLA", 500.0)]
    page = render_report(panels, "Run <1>", {"SLA": "TTFT <= 500 ms"}, sim.result().table())
    path = write_report(tmp_path / "out" / "report.html", page)
    text = path.read_text(encoding="utf-8")
    assert text == page
    assert "<script" not in text and "<link" not in text
    assert not re.search(r'(src|href)\s*=\s*"', text)
    assert "Run &lt;1&gt;" in text
    svgs = _svgs(text)
    assert len(svgs) == len(panels)
    ns = "{http://www.w3.org/2000/svg}"
    for svg in svgs:
        assert svg.find(f"{ns}text") is not None
    # the decisions panel shows the reasons seen, as categories
    reasons = next(p for p in panels if p.title == "Load decisions")
    assert list(reasons.categories) == ["no_change", "scale_up"]


def test_gaps_and_thinning() -> None:
    n = 20_000
    times = [float(i) for i in range(n)]
    values = [math.sin(i / 50.0) if i % 5000 else math.nan for i in range(n)]
    values[7777] = 9.0  # a spike must survive thinning
    svg = render_panel(Panel("big", [Series("s", times, values)], hlines=[("cap", 2.0)]))
    root = ET.fromstring(svg)
    ns = "{http://www.w3.org/2000/svg}"
    lines = root.findall(f"{ns}polyline")
    assert len(lines) == 4  # NaN at 5000, 10000, 15000 split the line
    points = sum(len(pl.get("points", "").split()) for pl in lines)
    assert points < 3_000
    top = min(float(p.split(",")[1]) for pl in lines for p in pl.get("points", "").split())
    assert top < 70  # the spike (near the top of the plot area, y=54) is kept; sin peaks ~190


def test_empty_and_tick_only_panels() -> None:
    assert "no data" in render_panel(Panel("nothing", [Series("s", [], [])]))
    panels = panels_from_ticks(_ticks(3), ttft_ms=400)
    assert panels["ttft"].hlines == [("SLA", 400)]
    assert "itl" in panels  # estimated ITL exists even with a gap
    assert panels["rate"].series[0].values[0] == 8.0  # 40 requests / 5 s
    assert panels["rate"].series[1].values[0] == 10.0  # predicted 50 per 5 s
    page = render_report(list(panels.values()), "ticks")
    assert len(_svgs(page)) == len(panels)


def _time_axis(svg: ET.Element) -> tuple[list[str], str]:
    """The x tick labels and the x axis title of one panel."""
    ns = "{http://www.w3.org/2000/svg}"
    texts = [t for t in svg.iter(f"{ns}text") if t.get("text-anchor") == "middle"]
    ticks = [t.text or "" for t in texts if t.get("y") == "228"]  # just below the x axis
    (title,) = [t.text or "" for t in texts if t.get("y") == "246"]  # at the bottom
    return ticks, title


def _tick_records(start: float, span: float) -> list[TickRecord]:
    return [
        TickRecord(
            deployment="d",
            time=start + t,
            ready_decode=2,
            ran_load=True,
            diagnostics=TickDiagnostics(estimated_itl_ms=20.0),
        )
        for t in range(0, int(span) + 1, 60)
    ]


def test_a_live_report_labels_time_since_its_first_tick_in_utc() -> None:
    # a live run's event time is Unix time: absolute labels read 1700M, 1700M, ... (5 min) or
    # 28.3333M, 28.3334M, ... (1 h of minutes)
    t0 = 1_700_000_000.0
    for span, unit, labels in ((300.0, "s", ["0", "100", "200", "300"]),
                               (3600.0, "min", ["0", "20", "40", "60"])):  # fmt: skip
        page = render_report(list(panels_from_ticks(_tick_records(t0, span)).values()))
        for svg in _svgs(page):
            if "no data" in ET.tostring(svg, encoding="unicode"):
                continue
            ticks, title = _time_axis(svg)
            assert ticks == labels, (span, svg.get("aria-label"))
            assert title == f"time ({unit} since 2023-11-14 22:13:20 UTC)"


def test_a_replay_report_keeps_its_own_event_time_on_the_axis() -> None:
    page = render_report(list(panels_from_ticks(_tick_records(0.0, 3600.0)).values()))
    ticks, title = _time_axis(_svgs(page)[0])
    assert (ticks, title) == (["0", "20", "40", "60"], "time (min)")
    # a later stretch of a replay: labels in its own minutes, not counted from its start
    page = render_report(list(panels_from_ticks(_tick_records(7200.0, 3600.0)).values()))
    assert _time_axis(_svgs(page)[0]) == (["120", "140", "160", "180"], "time (min)")


def test_a_start_far_from_zero_counts_from_the_first_tick() -> None:
    svg = render_panel(Panel("rate", [Series("obs", [5e7, 5e7 + 300], [1.0, 2.0])]))
    assert _time_axis(ET.fromstring(svg)) == (
        ["0", "100", "200", "300"],
        "time (s since t=50000000 s)",
    )
