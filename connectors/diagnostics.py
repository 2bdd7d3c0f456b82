"""The planner's periodic diagnostics report (reference spec §12): tick records → HTML pages.

Per deployment, tick records accumulate (at most 50 000; the oldest are dropped) and, once
``report_interval_hours`` of TICK time has passed since the first record of the page (event
time, so it works on replays), a self-contained HTML page is written to ``report_output_dir``
as ``planner_report_<deployment>_<YYYYmmdd_HHMMSS of the last tick, UTC>_<NNN>.html`` and the
records are cleared. Closing the sink writes what is left.
"""

from __future__ import annotations

from collections import deque
from datetime import UTC, datetime
from pathlib import Path

from bytewax.outputs import DynamicSink, StatelessSinkPartition

from connectors.report import is_tick, panels_from_ticks, render_report, write_report
from schemas import PlannerConfig, TickRecord

MAX_SNAPSHOTS = 50_000


class DiagnosticsRecorder:
    """Accumulates one deployment's ticks and writes a report page every interval.

    >>> import tempfile
    >>> from schemas import PlannerConfig
    >>> out = tempfile.mkdtemp()
    >>> rec = DiagnosticsRecorder("llama", PlannerConfig(report_interval_hours=1,
    ...                                                   report_output_dir=out))
    >>> [rec.record(TickRecord(deployment="llama", time=t, ran_load=True))
    ...  for t in (0.0, 1800.0, 3600.0)]
    [None, None, 'planner_report_llama_19700101_010000_001.html']
    >>> rec.finalize() is None  # nothing left after the page
    True
    """

    def __init__(self, deployment: str, config: PlannerConfig) -> None:
        self.deployment = deployment
        self.config = config
        self.ticks: deque[TickRecord] = deque(maxlen=MAX_SNAPSHOTS)
        self.pages = 0
        self._since: float | None = None

    def record(self, tick: TickRecord) -> str | None:
        """Add one tick; returns the name of the page it completed, if any.

        A record of a window in which no loop ran is not a tick and is ignored.
        """
        if not is_tick(tick):
            return None
        self.ticks.append(tick)
        if self._since is None:
            self._since = tick.time
        interval = self.config.report_interval_hours
        if interval is not None and tick.time - self._since >= interval * 3600.0:
            return self._write()
        return None

    def finalize(self) -> str | None:
        """Write the remaining ticks, if any."""
        return self._write() if self.ticks else None

    def _write(self) -> str:
        self.pages += 1
        last = datetime.fromtimestamp(self.ticks[-1].time, tz=UTC)
        name = f"planner_report_{self.deployment}_{last:%Y%m%d_%H%M%S}_{self.pages:03d}.html"
        cfg = self.config
        panels = panels_from_ticks(list(self.ticks), ttft_ms=cfg.ttft_ms, itl_ms=cfg.itl_ms)
        decisions = sum(tick.decision is not None for tick in self.ticks)
        first = datetime.fromtimestamp(self.ticks[0].time, tz=UTC)
        summary = {
            "deployment": self.deployment,
            "time range (UTC)": f"{first:%Y-%m-%d %H:%M:%S} – {last:%Y-%m-%d %H:%M:%S}",
            "ticks": str(len(self.ticks)),
            "scaling decisions": str(decisions),
            "SLA targets": f"TTFT {cfg.ttft_ms:g} ms, ITL {cfg.itl_ms:g} ms",
        }
        page = render_report(
            list(panels.values()), title="Planner Diagnostics Report", summary=summary
        )
        write_report(Path(cfg.report_output_dir) / name, page)
        self.ticks.clear()
        self._since = None
        return name


class _ReportPartition(StatelessSinkPartition[TickRecord]):
    def __init__(self, configs: dict[str, PlannerConfig]) -> None:
        self._configs = configs
        self._recorders: dict[str, DiagnosticsRecorder] = {}

    def write_batch(self, items: list[TickRecord]) -> None:
        for tick in items:
            recorder = self._recorders.get(tick.deployment)
            if recorder is None:
                recorder = DiagnosticsRecorder(tick.deployment, self._configs[tick.deployment])
                self._recorders[tick.deployment] = recorder
            recorder.record(tick)

    def close(self) -> None:
        for recorder in self._recorders.values():
            recorder.finalize()


class DiagnosticsReportSink(DynamicSink[TickRecord]):
    """Writes each deployment's diagnostics reports (per worker: a deployment lives on one).

    >>> DiagnosticsReportSink({}).configs
    {}
    """

    def __init__(self, configs: dict[str, PlannerConfig]) -> None:
        self.configs = configs

    def build(self, step_id: str, worker_index: int, worker_count: int) -> _ReportPartition:
        return _ReportPartition(self.configs)
