"""Diagnostics reports on a schedule of event time (spec §12), written by ``run --reports``."""

from __future__ import annotations

from pathlib import Path

import yaml

from tests.flow.runner import flowplanner


def test_reports_are_written_every_interval_of_tick_time(tmp_path):
    config = yaml.safe_load(Path("examples/decode.yaml").read_text())
    config["deployments"]["llama"].update(
        report_interval_hours=0.01, report_output_dir=str(tmp_path / "reports")
    )  # a page every 36 s of event time
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(config))
    done = flowplanner(
        "run",
        "--config",
        str(tmp_path / "c.yaml"),
        "--input",
        "examples/decode_burst.jsonl",
        "--reports",
    )
    assert done.returncode == 0, done.stderr
    pages = sorted((tmp_path / "reports").glob("planner_report_llama_*.html"))
    # 25 ticks (5 s .. 125 s): a page once 36 s have passed since its first tick (5 → 45,
    # 50 → 90), the rest (95 .. 125) when the run ends
    assert [p.name.removeprefix("planner_report_llama_19700101_") for p in pages] == [
        "000045_001.html",  # HHMMSS of the page's last tick, UTC
        "000130_002.html",
        "000205_003.html",
    ]
    for page in pages:
        html = page.read_text()
        assert "Planner Diagnostics Report" in html and "<svg" in html
        assert "<script" not in html and "https://" not in html
    assert "scaling decisions</td><td>1<" in pages[1].read_text()  # the scale-up at 75 s
