"""The planner's periodic diagnostics report (reference spec §12): tick records → HTML pages.

Per deployment, tick records accumulate (at most 50 000, the oldest dropped; their engines
summed per role, all a page shows of them) and, once ``report_interval_hours`` of TICK time has
passed since the last tick of the previous page (spec §12: ``last_report`` is the last tick;
the first page counts from the first tick) — event time, so it works on replays — a
self-contained HTML page is written to ``report_output_dir`` as
``planner_report_<deployment>_<YYYYmmdd_HHMMSS of the last tick, UTC>_<NNN>.html`` (the
deployment's name made safe for a file name: :func:`file_safe`) and the records are cleared.
Closing the sink writes what is left.

Each report directory is checked when the sink is made (created, and a file written in it): one
that cannot be written is an :class:`OSError` before the run starts. A page that cannot be
written later (full disk, the directory replaced or made read-only) is logged (once per kind
of failure and deployment), counted in ``flowplanner_report_write_failures_total`` and
skipped: reports are diagnostics, the planner goes on.
"""

from __future__ import annotations

import hashlib
import logging
import re
import tempfile
from collections import deque
from datetime import UTC, datetime
from pathlib import Path

from bytewax.outputs import DynamicSink, StatelessSinkPartition

from connectors.pipeline_metrics import REPORT_WRITE_FAILURES
from connectors.report import is_tick, panels_from_ticks, render_report, write_report
from schemas import EngineLoad, PlannerConfig, TickRecord

MAX_SNAPSHOTS = 50_000
SUMMED_LOADS = ("queued_prefill_tokens", "queued_decode_kv_tokens", "inflight_decode_kv_tokens")
"""The engine gauges a page shows, summed per role."""

log = logging.getLogger(__name__)


def check_report_dir(directory: str | Path, deployments: str) -> None:
    """Create ``directory`` if missing and write (then remove) a file in it; an
    :class:`OSError` naming ``deployments`` (whose reports go there), the directory and why.

    >>> import tempfile, os
    >>> check_report_dir(os.path.join(tempfile.mkdtemp(), "reports"), "llama")
    >>> check_report_dir(os.path.join(__file__, "reports"), "llama")
    Traceback (most recent call last):
    ...
    OSError: cannot write the diagnostics reports of llama to .../reports: [Errno 20] Not a ...
    """
    path = Path(directory)
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".flowplanner_write_check_"):
            pass
    except OSError as error:
        raise OSError(
            f"cannot write the diagnostics reports of {deployments} to {path}: {_why(path, error)}"
        ) from error


def _why(directory: Path, error: OSError) -> str:
    """Why a page could not be written into ``directory``, in a few words."""
    if directory.exists() and not directory.is_dir():
        return f"{directory} is not a directory"
    return " ".join(str(error).split())


FILE_SAFE_LENGTH = 120
"""Longest deployment name put into a report's file name as it is (names may be 253 long, and
a file name may not exceed 255 bytes)."""


def file_safe(deployment: str) -> str:
    """``deployment`` as part of a file name in the report directory: characters other than
    letters, digits, ``.``, ``-`` and ``_`` become ``_`` (a ``/`` or ``..`` must not lead out of
    the directory) and a long name is cut; a name changed either way gets a hash of the whole,
    so two deployments never share a file name.

    >>> file_safe("llama-3.1_70b")
    'llama-3.1_70b'
    >>> file_safe("x/../../../outside")  # doctest: +ELLIPSIS
    'x_.._.._.._outside-...'
    >>> file_safe("a/b") != file_safe("a_b"), len(file_safe("a" * 253)) <= FILE_SAFE_LENGTH
    (True, True)
    """
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", deployment)
    if safe == deployment and len(safe) <= FILE_SAFE_LENGTH:
        return safe
    digest = hashlib.sha256(deployment.encode()).hexdigest()[:12]
    return f"{safe[: FILE_SAFE_LENGTH - len(digest) - 1]}-{digest}"


def engines_summed(tick: TickRecord) -> TickRecord:
    """``tick`` with one engine per role, holding the role's sums: all a page shows of engines
    (their load summed per role), in memory that does not grow with the fleet — a day's page of
    5 s ticks of 64 engines held about 0.9 GiB as they came.

    >>> from schemas import EngineLoad
    >>> tick = TickRecord(deployment="d", time=5.0, engines=[
    ...     EngineLoad(role="decode", worker_id="a", queued_decode_kv_tokens=3),
    ...     EngineLoad(role="decode", worker_id="b", queued_decode_kv_tokens=4)])
    >>> [(e.role, e.queued_decode_kv_tokens) for e in engines_summed(tick).engines]
    [('decode', 7)]
    """
    engines = tick.engines
    summed = [
        EngineLoad(
            role=role,
            worker_id="",
            **{f: sum(getattr(e, f) for e in engines if e.role == role) for f in SUMMED_LOADS},
        )
        for role in dict.fromkeys(e.role for e in engines)
    ]
    return tick.model_copy(update={"engines": summed})


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
        self.pages = 0  # pages due so far, written or not (a skipped one leaves a gap)
        self.failures = 0  # pages that could not be written
        self._logged: set[str] = set()  # kinds of write failure already logged
        self._since: float | None = None

    def record(self, tick: TickRecord) -> str | None:
        """Add one tick; returns the name of the page it completed and wrote, if any.

        A record of a window in which no loop ran is not a tick and is ignored. A page that
        cannot be written is logged, counted and dropped (see the module doc).
        """
        if not is_tick(tick):
            return None
        self.ticks.append(engines_summed(tick))
        if self._since is None:
            self._since = tick.time
        interval = self.config.report_interval_hours
        if interval is not None and tick.time - self._since >= interval * 3600.0:
            return self._write()
        return None

    def finalize(self) -> str | None:
        """Write the remaining ticks, if any."""
        return self._write() if self.ticks else None

    def _write(self) -> str | None:
        self.pages += 1
        last = datetime.fromtimestamp(self.ticks[-1].time, tz=UTC)
        stamp = f"{last:%Y%m%d_%H%M%S}_{self.pages:03d}"
        name = f"planner_report_{file_safe(self.deployment)}_{stamp}.html"
        cfg = self.config
        panels = panels_from_ticks(
            list(self.ticks), ttft_ms=cfg.ttft_ms, itl_ms=cfg.itl_ms, mode=cfg.mode
        )
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
        self._since = self.ticks[-1].time  # spec §12: the next page counts from this tick
        self.ticks.clear()
        path = Path(cfg.report_output_dir) / name
        try:
            write_report(path, page)
        except OSError as error:
            self._failed(path, _why(path.parent, error), type(error).__name__)
            return None
        return name

    def _failed(self, path: Path, why: str, kind: str) -> None:
        self.failures += 1
        REPORT_WRITE_FAILURES.labels(deployment=self.deployment).inc()
        if kind in self._logged:
            return
        self._logged.add(kind)
        log.error(
            "diagnostics report %s of %s not written (%s), skipped; the run goes on "
            "(flowplanner_report_write_failures_total counts them; more %s failures of %s "
            "are not logged)",
            path,
            self.deployment,
            why,
            kind,
            self.deployment,
        )


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
        """Write what is left; never raises (bytewax also closes sinks as it unwinds an error,
        and an error raised then aborts the process)."""
        for recorder in self._recorders.values():
            try:
                recorder.finalize()
            except Exception:
                log.exception("the last diagnostics report of %s failed", recorder.deployment)


class DiagnosticsReportSink(DynamicSink[TickRecord]):
    """Writes each deployment's diagnostics reports (per worker: a deployment lives on one).

    Making it checks every deployment's ``report_output_dir`` (:func:`check_report_dir`).

    >>> DiagnosticsReportSink({}).configs
    {}
    """

    def __init__(self, configs: dict[str, PlannerConfig]) -> None:
        self.configs = configs
        directories: dict[str, list[str]] = {}
        for name, config in configs.items():
            directories.setdefault(config.report_output_dir, []).append(name)
        for directory, names in directories.items():
            check_report_dir(directory, ", ".join(names))

    def build(self, step_id: str, worker_index: int, worker_count: int) -> _ReportPartition:
        return _ReportPartition(self.configs)
