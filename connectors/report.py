"""Planner reports: panels built from what the system produces, and the page written to disk.

Two builders turn records into :class:`~connectors.report_svg.Panel` s (drawn by
``connectors.report_svg``):

* :func:`panels_from_ticks` — from the planner's ``schemas.TickRecord`` s (replicas and targets,
  observed vs predicted request rate, estimated TTFT/ITL against the SLA, engine queues,
  sequence lengths, decision reasons);
* :func:`panels_from_timeline` — from a table of columns keyed by name (what
  ``sim.FleetSim.timeline()`` returns: ``time``, ``arrival_rps``, ``ready_<role>``, ...).

:func:`closed_loop_panels` puts both together (observed latencies from the simulator next to
the planner's estimates), :func:`render_report` (re-exported from ``connectors.report_svg``)
makes the page and :func:`write_report` writes it.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from connectors.report_svg import (
    PALETTE,
    Panel,
    Series,
    is_finite_number,
    render_panel,
    render_report,
)
from schemas import LOAD_REASONS, THROUGHPUT_REASONS, TickRecord
from schemas.config import Mode

__all__ = [
    "Panel",
    "Series",
    "closed_loop_panels",
    "is_tick",
    "panels_from_ticks",
    "panels_from_timeline",
    "render_panel",
    "render_report",
    "write_report",
]


def write_report(path: str | Path, page: str) -> Path:
    """Write a rendered page (UTF-8) and return its path.

    The page is written to a temporary file beside ``path`` (a hidden ``.<name>.<hex>.tmp``)
    that then replaces it (:func:`os.replace`, atomic within a directory): a write that fails
    part-way — a full disk, a file-size limit — leaves no truncated page under the final name
    (one there before stays whole) and the temporary file is removed before the
    :class:`OSError` is raised. The temporary file is created as ``Path.write_text`` creates a
    new file (mode 0666 less the umask, not ``tempfile``'s 0600): readers of the pages still
    can read them.

    >>> import tempfile
    >>> directory = Path(tempfile.mkdtemp())
    >>> write_report(directory / "r.html", "<html></html>").read_text()
    '<html></html>'
    >>> [p.name for p in directory.iterdir()]
    ['r.html']
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    try:
        with partial.open("x", encoding="utf-8") as file:
            file.write(page)
        os.replace(partial, path)
    except OSError:
        with contextlib.suppress(OSError):  # the write's error is the one to report
            partial.unlink(missing_ok=True)
        raise
    return path


def panels_from_timeline(
    cols: Mapping[str, Sequence[float]],
) -> dict[str, Panel]:
    """Panels from a column table (``time`` plus named columns), keyed by topic.

    Topics: ``rate`` (``arrival_rps``), ``replicas`` (``ready_<role>``/``total_<role>``),
    ``queues`` (``queued_prefill_tokens``, ``queued_decode_kv_tokens``, ``kv_in_use``),
    ``ttft`` and ``itl`` (``*_mean``/``*_p90`` against ``ttft_sla_ms``/``itl_sla_ms``).

    >>> p = panels_from_timeline({"time": [10, 20], "arrival_rps": [1.0, 2.0],
    ...                           "ready_decode": [1, 2], "total_decode": [1, 3]})
    >>> sorted(p), [s.name for s in p["replicas"].series]
    (['rate', 'replicas'], ['ready decode', 'total decode'])
    """
    t = list(cols.get("time", []))
    out: dict[str, Panel] = {}
    if "arrival_rps" in cols:
        out["rate"] = Panel(
            "Request rate", [Series("arrivals", t, cols["arrival_rps"])], y_label="req/s"
        )
    roles = sorted({k.split("_", 1)[1] for k in cols if k.startswith(("ready_", "total_"))})
    rep = []
    for i, role in enumerate(roles):
        color = PALETTE[i % len(PALETTE)]
        if f"ready_{role}" in cols:
            rep.append(Series(f"ready {role}", t, cols[f"ready_{role}"], color=color, step=True))
        if f"total_{role}" in cols:
            rep.append(
                Series(
                    f"total {role}", t, cols[f"total_{role}"], color=color, dashed=True, step=True
                )
            )
    if rep:
        out["replicas"] = Panel("Replicas (ready; total incl. starting and draining)", rep)
    q = [
        Series(name, t, cols[key])
        for key, name in (
            ("queued_prefill_tokens", "queued prefill tokens"),
            ("queued_decode_kv_tokens", "queued decode KV"),
            ("kv_in_use", "KV in use"),
        )
        if key in cols
    ]
    if q:
        out["queues"] = Panel("Queued tokens and KV in use", q, y_label="tokens")
    for key, label in (("ttft", "TTFT"), ("itl", "ITL")):
        series = [
            Series(f"observed {label} {stat}", t, cols[f"{key}_ms_{stat}"], dashed=stat == "p90")
            for stat in ("mean", "p90")
            if f"{key}_ms_{stat}" in cols
        ]
        sla = cols.get(f"{key}_sla_ms")
        if series:
            hl = [("SLA", float(sla[0]))] if sla else []
            out[key] = Panel(f"{label} vs SLA", series, y_label="ms", hlines=hl)
    return out


def is_tick(record: TickRecord) -> bool:
    """Whether a tick record is a planner tick, not a window that closed without one.

    A deployment's window is the gcd of its intervals, so it has windows in which none of its
    loops ran; their records carry only the time.

    >>> is_tick(TickRecord(deployment="d", time=5.0)), is_tick(TickRecord(
    ...     deployment="d", time=10.0, ran_load=True))
    (False, True)
    """
    return (
        record.ran_load
        or record.ran_throughput
        or record.decision is not None
        or record.ready_prefill is not None
        or record.ready_decode is not None
    )


_TickColumn = Callable[[TickRecord], float | None]
"""What one line of a tick panel reads from each tick record (``None``: nothing to draw)."""


def _tick_value(name: str, part: str | None = None) -> _TickColumn:
    """Per tick, its field ``name``, or that of its ``part`` (``diagnostics``, ``decision``,
    ``observed_traffic``); ``None`` on a tick without that part.

    >>> k = TickRecord(deployment="d", time=5.0, ready_decode=2)
    >>> _tick_value("ready_decode")(k), _tick_value("num_decode", "decision")(k)
    (2, None)
    """

    def value(k: TickRecord) -> float | None:
        holder = k if part is None else getattr(k, part)
        return None if holder is None else getattr(holder, name)

    return value


def _reason_code(attr: str, names: Sequence[str]) -> _TickColumn:
    """Per tick, the index in ``names`` of its diagnostics' reason ``attr``; ``None`` when the
    reason is not one of ``names`` (no decision of that loop on this tick).

    >>> from schemas import TickDiagnostics
    >>> k = TickRecord(deployment="d", time=5.0,
    ...                diagnostics=TickDiagnostics(load_decision_reason="scale_up"))
    >>> _reason_code("load_decision_reason", ("no_change", "scale_up"))(k)
    1.0
    """

    def code(k: TickRecord) -> float | None:
        reason = getattr(k.diagnostics, attr)
        return float(names.index(reason)) if reason in names else None

    return code


def _engine_sum(role: str, attr: str) -> _TickColumn:
    """Per tick, the sum of the ``EngineLoad`` field ``attr`` over its engines of ``role``;
    ``None`` on a tick without such engines (a gap, not a zero).

    >>> from schemas import EngineLoad
    >>> k = TickRecord(deployment="d", time=5.0, engines=[
    ...     EngineLoad(role="decode", worker_id="a", queued_decode_kv_tokens=3),
    ...     EngineLoad(role="decode", worker_id="b", queued_decode_kv_tokens=4)])
    >>> [_engine_sum(r, "queued_decode_kv_tokens")(k) for r in ("decode", "prefill")]
    [7, None]
    """

    def total(k: TickRecord) -> float | None:
        loads = [getattr(e, attr) for e in k.engines if e.role == role]
        return sum(loads) if loads else None

    return total


def _some(values: Sequence[float | None]) -> bool:
    """Whether a tick column has any value to draw."""
    return any(v is not None for v in values)


@dataclass(frozen=True)
class _Ticks:
    """The tick records a report draws (:func:`is_tick`) and their times, read column-wise."""

    records: Sequence[TickRecord]
    times: list[float]

    @classmethod
    def of(cls, records: Sequence[TickRecord]) -> _Ticks:
        """The ticks among ``records``: the others would cut every line into one-point pieces.

        >>> _Ticks.of([TickRecord(deployment="d", time=5.0),
        ...            TickRecord(deployment="d", time=10.0, ran_load=True)]).times
        [10.0]
        """
        ticks = [k for k in records if is_tick(k)]
        return cls(ticks, [k.time for k in ticks])

    def column(self, get: _TickColumn) -> list[float | None]:
        """``get`` of every tick."""
        return [get(k) for k in self.records]

    def sparse(self, name: str, values: Sequence[float | None], dashed: bool = False) -> Series:
        """A line joining the ticks that have a value: values known only on some ticks (every
        throughput interval; the engines' estimates and loads on load ticks only)."""
        kept = [(x, v) for x, v in zip(self.times, values, strict=True) if v is not None]
        return Series(name, [x for x, _ in kept], [v for _, v in kept], dashed=dashed)


def _replicas_panel(ticks: _Ticks) -> Panel | None:
    """Ready replicas per role (steps), decided targets (points) and throughput floors."""
    t = ticks.times
    rep: list[Series] = []
    for i, role in enumerate(("prefill", "decode")):
        color = PALETTE[i]
        ready = ticks.column(_tick_value(f"ready_{role}"))
        if _some(ready):
            rep.append(Series(f"ready {role}", t, ready, color=color, step=True))
        target = ticks.column(_tick_value(f"num_{role}", "decision"))
        if _some(target):
            rep.append(Series(f"target {role}", t, target, color=color, points=True))
        bound = ticks.column(_tick_value(f"throughput_lower_bound_{role}", "diagnostics"))
        if _some(bound):
            rep.append(
                Series(f"throughput floor {role}", t, bound, color=color, dashed=True, step=True)
            )
    return Panel("Replicas (ready) and decisions", rep) if rep else None


def _observed_rate(k: TickRecord) -> float | None:
    """The request rate a tick observed over its traffic window."""
    o = k.observed_traffic
    return o.num_req / o.duration_s if o is not None and o.duration_s > 0 else None


def _predicted_rate(k: TickRecord) -> float | None:
    """The request rate a tick predicted, over the same window as the observed one."""
    o, p = k.observed_traffic, k.diagnostics.predicted_num_req
    return p / o.duration_s if p is not None and o is not None and o.duration_s > 0 else None


def _rate_panel(ticks: _Ticks) -> Panel | None:
    """Observed against predicted request rate."""
    rate = [
        ticks.sparse("observed", ticks.column(_observed_rate)),
        ticks.sparse("predicted", ticks.column(_predicted_rate), dashed=True),
    ]
    if any(_some(s.values) for s in rate):
        return Panel("Request rate (planner)", rate, y_label="req/s")
    return None


def _estimate_panel(ticks: _Ticks, key: str, label: str, sla: float | None) -> Panel | None:
    """The estimated latency ``key`` (``ttft``, ``itl``) against its SLA, if either is known."""
    est = ticks.column(_tick_value(f"estimated_{key}_ms", "diagnostics"))
    if not _some(est) and sla is None:
        return None
    return Panel(
        f"Estimated {label} vs SLA",
        [ticks.sparse(f"estimated {label}", est)],  # load ticks only
        y_label="ms",
        hlines=[("SLA", sla)] if sla is not None else [],
    )


def _prefill_load_panel(ticks: _Ticks, prefilling: str) -> Panel | None:
    """Queued prompt tokens summed over the engines of role ``prefilling``."""
    pf = ticks.column(_engine_sum(prefilling, "queued_prefill_tokens"))
    if not _some(pf):
        return None
    return Panel(
        "Prefill engine load", [ticks.sparse("queued prefill tokens", pf)], y_label="tokens"
    )


def _decode_load_panel(ticks: _Ticks, max_kv_tokens: int | None) -> Panel | None:
    """Queued and in-flight KV tokens summed over the decode engines, with one engine's KV
    capacity (when known) as a reference line."""
    dq = ticks.column(_engine_sum("decode", "queued_decode_kv_tokens"))
    di = ticks.column(_engine_sum("decode", "inflight_decode_kv_tokens"))
    if not (_some(dq) or _some(di)):
        return None
    cap = [("KV capacity per engine", float(max_kv_tokens))] if max_kv_tokens else []
    return Panel(
        "Decode engine load (sum over engines)",
        [ticks.sparse("queued KV", dq), ticks.sparse("in-flight KV", di)],
        y_label="tokens",
        hlines=cap,
    )


def _lengths_panel(ticks: _Ticks) -> Panel | None:
    """Input and output sequence lengths, observed against predicted."""
    lengths = []
    for name, obs, pred in (("ISL", "isl", "predicted_isl"), ("OSL", "osl", "predicted_osl")):
        o = ticks.column(_tick_value(obs, "observed_traffic"))
        p = ticks.column(_tick_value(pred, "diagnostics"))
        if _some(o):
            lengths.append(ticks.sparse(f"observed {name}", o))
        if _some(p):
            lengths.append(ticks.sparse(f"predicted {name}", p, dashed=True))
    return Panel("Sequence lengths", lengths, y_label="tokens") if lengths else None


def _capacity_panel(ticks: _Ticks) -> Panel | None:
    """Requests per second one engine of each role sustains within the SLA (spec §12 row 5)."""
    capacity = [
        ticks.sparse(f"{role} engine", values)
        for role in ("prefill", "decode")
        if _some(values := ticks.column(_tick_value(f"engine_rps_{role}", "diagnostics")))
    ]
    return Panel("Engine capacity (within SLA)", capacity, y_label="req/s") if capacity else None


def _reasons_panel(ticks: _Ticks, title: str, attr: str, names: Sequence[str]) -> Panel | None:
    """The decision reason ``attr`` per tick, as points on the reasons of ``names`` seen."""
    codes = ticks.column(_reason_code(attr, names))
    if not _some(codes):
        return None
    used = sorted({int(c) for c in codes if c is not None})
    remap = {c: i for i, c in enumerate(used)}
    return Panel(
        title,
        [
            Series(
                "reason",
                ticks.times,
                [None if c is None else float(remap[int(c)]) for c in codes],
                points=True,
            )
        ],
        categories=[names[c] for c in used],
        y_min=None,
    )


def panels_from_ticks(
    ticks: Sequence[TickRecord],
    ttft_ms: float | None = None,
    itl_ms: float | None = None,
    max_kv_tokens: int | None = None,
    mode: Mode = "disagg",
) -> dict[str, Panel]:
    """Panels from planner tick records, keyed by topic.

    Topics: ``replicas`` (ready counts and decided targets), ``rate`` (observed vs predicted),
    ``ttft``/``itl`` (estimated, against the SLA), ``prefill_load``/``decode_load`` (sums over
    engines; in ``agg`` ``mode`` the prefill queue is that of the agg engines, which report as
    ``decode`` and whose queued prompt tokens drive the agg TTFT rule, spec §4.4), ``lengths``
    (ISL/OSL observed vs predicted), ``capacity`` (requests per second
    one engine sustains within the SLA, spec §12 row 5), ``load_reasons`` and
    ``throughput_reasons`` (decision reason per tick). Records that are not ticks
    (:func:`is_tick`) are left out: they would cut every line into one-point pieces.

    >>> from schemas import TickDiagnostics
    >>> ticks = [TickRecord(deployment="d", time=5.0 * i, ready_decode=2,
    ...                     diagnostics=TickDiagnostics(estimated_itl_ms=20.0 + i))
    ...          for i in range(3)]
    >>> p = panels_from_ticks(ticks, itl_ms=50)
    >>> p["itl"].hlines, [s.name for s in p["itl"].series]
    ([('SLA', 50)], ['estimated ITL'])
    """
    builders: dict[str, Callable[[_Ticks], Panel | None]] = {
        "replicas": _replicas_panel,
        "rate": _rate_panel,
        "ttft": partial(_estimate_panel, key="ttft", label="TTFT", sla=ttft_ms),
        "itl": partial(_estimate_panel, key="itl", label="ITL", sla=itl_ms),
        "prefill_load": partial(
            _prefill_load_panel, prefilling="decode" if mode == "agg" else "prefill"
        ),
        "decode_load": partial(_decode_load_panel, max_kv_tokens=max_kv_tokens),
        "lengths": _lengths_panel,
        "capacity": _capacity_panel,
        "load_reasons": partial(
            _reasons_panel,
            title="Load decisions",
            attr="load_decision_reason",
            names=LOAD_REASONS,
        ),
        "throughput_reasons": partial(
            _reasons_panel,
            title="Throughput decisions",
            attr="throughput_decision_reason",
            names=THROUGHPUT_REASONS,
        ),
    }
    drawn = _Ticks.of(ticks)
    return {
        topic: panel for topic, build in builders.items() if (panel := build(drawn)) is not None
    }


def closed_loop_panels(
    timeline: Mapping[str, Sequence[float]] | None = None,
    ticks: Sequence[TickRecord] | None = None,
    ttft_ms: float | None = None,
    itl_ms: float | None = None,
    max_kv_tokens: int | None = None,
) -> list[Panel]:
    """The closed-loop report: simulator timeline and planner ticks, with the planner's
    estimated TTFT/ITL drawn on the same panels as the observed ones.

    >>> cols = {"time": [10.0], "ttft_ms_mean": [80.0], "ttft_sla_ms": [500.0]}
    >>> [p.title for p in closed_loop_panels(cols, [], ttft_ms=500)]
    ['TTFT vs SLA']
    """
    sim = panels_from_timeline(timeline or {})
    plan = panels_from_ticks(ticks or [], ttft_ms, itl_ms, max_kv_tokens)
    for key in ("ttft", "itl"):
        if key in plan and key in sim:
            est = [s for s in plan.pop(key).series if any(is_finite_number(v) for v in s.values)]
            base = sim[key]
            sim[key] = Panel(
                base.title,
                [*base.series, *(Series(s.name, s.times, s.values, color="#2ca02c") for s in est)],
                y_label=base.y_label,
                hlines=base.hlines,
            )
        elif key in plan and not any(
            is_finite_number(v) for s in plan[key].series for v in s.values
        ):
            plan.pop(key)
    order = (
        "rate",
        "replicas",
        "queues",
        "ttft",
        "itl",
        "prefill_load",
        "decode_load",
        "lengths",
        "capacity",
        "load_reasons",
        "throughput_reasons",
    )
    panels: list[Panel] = []
    for key in order:
        for src in (sim, plan):
            if key in src:
                panels.append(src.pop(key))
    panels.extend(sim.values())
    panels.extend(plan.values())
    return panels
