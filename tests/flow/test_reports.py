"""Diagnostics reports on a schedule of event time (spec §12), written by ``run --reports``."""

from __future__ import annotations

import logging
from pathlib import Path

import bytewax.operators as op
import yaml
from bytewax.dataflow import Dataflow
from bytewax.testing import TestingSource, run_main
from prometheus_client import REGISTRY

from connectors.diagnostics import DiagnosticsReportSink
from schemas import PlannerConfig, TickRecord
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
    # 25 ticks (5 s .. 125 s): a page once 36 s have passed since the previous page's last
    # tick (spec §12: last_report = the last tick; the first page counts from the first tick):
    # 5 → 45 → 85 → 125, and nothing is left when the run ends
    assert [p.name.removeprefix("planner_report_llama_19700101_") for p in pages] == [
        "000045_001.html",  # HHMMSS of the page's last tick, UTC
        "000125_002.html",
        "000205_003.html",
    ]
    for page in pages:
        html = page.read_text()
        assert "Planner Diagnostics Report" in html and "<svg" in html
        assert "<script" not in html and "https://" not in html
    assert "scaling decisions</td><td>1<" in pages[1].read_text()  # the scale-up at 75 s


def test_a_report_directory_that_becomes_unwritable_mid_run_skips_pages_not_the_run(
    tmp_path, caplog
):
    # The directories are fine when the sink is made (the start-up check passes); then llama's
    # is replaced by a file (as root, chmod would not stop the writes). Its pages — one after
    # an hour of ticks, the rest when the sink closes — fail: logged once, counted, skipped.
    # Raising out of write_batch stopped the planner, and raising again in close() (which
    # bytewax calls while unwinding) aborted the process (SIGABRT, no readable error).
    broken, fine = tmp_path / "llama", tmp_path / "mistral"
    configs = {
        name: PlannerConfig(report_interval_hours=1, report_output_dir=str(out))
        for name, out in (("llama", broken), ("mistral", fine))
    }
    sink = DiagnosticsReportSink(configs)
    broken.rmdir()
    broken.write_text("in the way")
    ticks = [
        TickRecord(deployment=name, time=t, ran_load=True)
        for t in (0.0, 1800.0, 3600.0, 5400.0)
        for name in configs
    ]
    failures = "flowplanner_report_write_failures_total"
    before = REGISTRY.get_sample_value(failures, {"deployment": "llama"}) or 0.0
    flow = Dataflow("reports")
    op.output("out", op.input("in", flow, TestingSource(ticks)), sink)
    with caplog.at_level(logging.ERROR, logger="connectors.diagnostics"):
        run_main(flow)
    assert REGISTRY.get_sample_value(failures, {"deployment": "llama"}) - before == 2
    assert broken.read_text() == "in the way"
    # mistral's pages: the hour's, then the rest at close (page numbers of the run)
    assert sorted(p.name for p in fine.iterdir()) == [
        "planner_report_mistral_19700101_010000_001.html",
        "planner_report_mistral_19700101_013000_002.html",
    ]
    (logged,) = [r.getMessage() for r in caplog.records if "llama" in r.getMessage()]
    assert str(broken / "planner_report_llama_19700101_010000_001.html") in logged
    assert f"({broken} is not a directory)" in logged and "the run goes on" in logged


def test_a_deployment_name_cannot_lead_a_report_out_of_its_directory(tmp_path):
    # names may hold any character: "x/../../outside" wrote its page two levels up
    reports = tmp_path / "a" / "b" / "reports"
    name = "x/../../../outside"
    sink = DiagnosticsReportSink(
        {name: PlannerConfig(report_interval_hours=1.0, report_output_dir=str(reports))}
    )
    flow = Dataflow("reports_escape")
    ticks = [TickRecord(deployment=name, time=float(t), ran_load=True) for t in (5, 10)]
    op.output("reports", op.input("ticks", flow, TestingSource(ticks)), sink)
    run_main(flow)
    written = [p for p in tmp_path.rglob("*.html")]
    assert [p.parent for p in written] == [reports]
    assert written[0].name.startswith("planner_report_x_.._.._.._outside-")
