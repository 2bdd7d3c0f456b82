"""Drawing of report panels: :class:`Panel` s of :class:`Series` → inline SVG and a whole HTML page.

No scripts, no CDN, no domain records: a :class:`Panel` is a few named time series and optional
horizontal reference lines (SLA targets, capacities); :func:`render_panel` draws one as an
``<svg>`` element and :func:`render_report` puts panels in a self-contained page (it opens
offline). ``connectors.report`` builds the panels from what the system produces.
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import NamedTuple

PALETTE = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#17becf",
    "#7f7f7f",
    "#bcbd22",
    "#d62728",
)
_W, _H = 560, 250
_ML, _MR, _MT, _MB = 62, 14, 54, 36


@dataclass(frozen=True)
class Series:
    """One named line (or point set) over time; ``None``/``nan`` values leave gaps.

    >>> Series("ready decode", [0, 5], [1, 2], step=True).step
    True
    """

    name: str
    times: Sequence[float]
    values: Sequence[float | None]
    color: str | None = None
    dashed: bool = False
    step: bool = False
    points: bool = False


@dataclass(frozen=True)
class Panel:
    """A plot: series, reference lines ``(label, y)``, optional category labels for the y axis
    (``categories[i]`` is drawn at ``y == i``).

    >>> Panel("TTFT", [Series("observed", [0, 1], [100, 120])], hlines=[("SLA", 500)]).title
    'TTFT'
    """

    title: str
    series: Sequence[Series]
    y_label: str = ""
    hlines: Sequence[tuple[str, float]] = ()
    categories: Sequence[str] = ()
    y_min: float | None = 0.0


@dataclass(frozen=True)
class _Frame:
    """The time (``x``) and value (``y``) ranges a panel's plot area shows; :meth:`px` and
    :meth:`py` map them to pixels."""

    x0: float
    x1: float
    y0: float
    y1: float

    @classmethod
    def fitted(cls, panel: Panel, xs: Sequence[float], ys: Sequence[float]) -> _Frame:
        """The frame around the points ``xs``/``ys`` of ``panel``: the y range is that of its
        categories, or from the lower of ``y_min`` and the lowest value (the lowest value when
        ``y_min`` is ``None``) to 5 % above the highest value."""
        x0, x1 = min(xs), max(xs)
        if x1 <= x0:
            x1 = x0 + 1.0
        if panel.categories:
            return cls(x0, x1, -0.5, len(panel.categories) - 0.5)
        y0 = min(ys) if panel.y_min is None else min(panel.y_min, min(ys))
        y1 = max(ys)
        if y1 <= y0:
            y1 = y0 + 1.0
        return cls(x0, x1, y0, y1 + 0.05 * (y1 - y0))

    def px(self, x: float) -> float:
        return _ML + (x - self.x0) / (self.x1 - self.x0) * (_W - _ML - _MR)

    def py(self, y: float) -> float:
        return _H - _MB - (y - self.y0) / (self.y1 - self.y0) * (_H - _MT - _MB)


def is_finite_number(v: float | None) -> bool:
    """Whether ``v`` is a finite int or float: a value that is drawn (others leave a gap).

    >>> is_finite_number(3), is_finite_number(None), is_finite_number(float("nan"))
    (True, False, False)
    """
    return v is not None and isinstance(v, int | float) and math.isfinite(v)


def _nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    if hi <= lo:
        hi = lo + 1.0
    raw = (hi - lo) / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first = math.ceil(lo / step) * step
    ticks = []
    k = 0
    while first + k * step <= hi + 1e-9 * step:
        ticks.append(first + k * step)
        k += 1
    return ticks


def _fmt(v: float) -> str:
    a = abs(v)
    if a >= 1e6:
        return f"{v / 1e6:g}M"
    if a >= 1e4:
        return f"{v / 1e3:g}k"
    if a == int(a):
        return str(int(v))
    return f"{v:.3g}"


UNIX_SCALE_S = 1e8
"""Times from here on (1973-03-03) are taken for Unix time (a live run's event time)."""


def _time_origin(x0: float, x1: float, unit: float) -> tuple[float, str]:
    """Where the time axis counts from, and what its title adds to say so.

    Replays (event time from 0) are labelled in their own time while that reads as short plain
    numbers (below 10000 of the axis unit). Unix-scale times (live runs), and other starts too
    far from 0 for that, count from the first tick, named in UTC for Unix times:

    >>> _time_origin(0.0, 300.0, 1.0)
    (0.0, '')
    >>> _time_origin(1_700_000_000.0, 1_700_000_300.0, 1.0)
    (1700000000.0, ' since 2023-11-14 22:13:20 UTC')
    >>> _time_origin(100_000.0, 100_300.0, 1.0)
    (100000.0, ' since t=100000 s')
    >>> _time_origin(82_800.0, 86_400.0, 60.0)  # minutes 1380 .. 1440
    (0.0, '')
    """
    if x0 < UNIX_SCALE_S:
        if max(abs(x0), abs(x1)) / unit < 1e4:
            return 0.0, ""
        return x0, f" since t={x0:.10g} s"
    start = datetime.fromtimestamp(x0, tz=UTC).strftime("%Y-%m-%d %H:%M:%S")
    return x0, f" since {start} UTC"


def _thin(xs: list[float], ys: list[float], limit: int) -> tuple[list[float], list[float]]:
    """Keep at most ~``limit`` points: per bucket its first point and its extremes."""
    n = len(xs)
    if n <= limit:
        return xs, ys
    per = math.ceil(n / (limit / 3))
    ox: list[float] = []
    oy: list[float] = []
    for i in range(0, n, per):
        bx, by = xs[i : i + per], ys[i : i + per]
        lo = min(range(len(by)), key=by.__getitem__)
        hi = max(range(len(by)), key=by.__getitem__)
        for j in sorted({0, lo, hi}):
            ox.append(bx[j])
            oy.append(by[j])
    return ox, oy


_Segments = list[tuple[list[float], list[float]]]
"""A series' gapless runs of finite points: ``(times, values)`` per run."""


def _segments(s: Series) -> _Segments:
    """The gapless runs of ``s``: a ``None``/``nan``/infinite time or value ends one."""
    segs: _Segments = []
    cur_x: list[float] = []
    cur_y: list[float] = []
    for x, y in zip(s.times, s.values, strict=False):
        if is_finite_number(x) and is_finite_number(y):
            cur_x.append(float(x))
            cur_y.append(float(y))  # type: ignore[arg-type]
        elif cur_x:
            segs.append((cur_x, cur_y))
            cur_x, cur_y = [], []
    if cur_x:
        segs.append((cur_x, cur_y))
    return segs


class _LegendKey(NamedTuple):
    """One legend entry: its label, and the colour and dashing of its sample line."""

    label: str
    color: str
    dashed: bool


def _reference_color(k: int) -> str:
    """The colour of a panel's ``k``-th reference line: red for the first (the SLA, say)."""
    return "#d62728" if k == 0 else "#555"


def _series_color(i: int, s: Series) -> str:
    """The colour of a panel's ``i``-th series: its own, or the palette's ``i``-th."""
    return s.color or PALETTE[i % len(PALETTE)]


def _svg_heading(panel: Panel) -> list[str]:
    """The opening ``<svg>`` tag, the white background and the panel's title."""
    return [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{_W}" height="{_H}" '
        f'viewBox="0 0 {_W} {_H}" role="img" aria-label="{html.escape(panel.title)}" '
        'font-family="Helvetica, Arial, sans-serif" font-size="11" fill="#333">',
        f'<rect width="{_W}" height="{_H}" fill="#fff"/>',
        f'<text x="{_ML}" y="16" font-size="13" font-weight="600">'
        f"{html.escape(panel.title)}</text>",
    ]


def _time_grid(f: _Frame, origin: float, unit: float) -> list[str]:
    """Vertical grid lines and their labels, in ``unit`` s counted from ``origin``."""
    out: list[str] = []
    for tx in _nice_ticks((f.x0 - origin) / unit, (f.x1 - origin) / unit):
        px = f.px(origin + tx * unit)
        out.append(
            f'<line stroke="#e8e8e8" x1="{px:.1f}" y1="{_MT}" x2="{px:.1f}" y2="{_H - _MB}"/>'
            f'<text x="{px:.1f}" y="{_H - _MB + 14}" text-anchor="middle">{_fmt(tx)}</text>'
        )
    return out


def _value_grid(panel: Panel, f: _Frame) -> list[str]:
    """Horizontal grid lines and their labels: the panel's categories, or round values."""
    if panel.categories:
        yticks = [(float(i), c) for i, c in enumerate(panel.categories)]
    else:
        yticks = [(t, _fmt(t)) for t in _nice_ticks(f.y0, f.y1)]
    out: list[str] = []
    for ty, label in yticks:
        py = f.py(ty)
        out.append(
            f'<line stroke="#e8e8e8" x1="{_ML}" y1="{py:.1f}" x2="{_W - _MR}" y2="{py:.1f}"/>'
            f'<text x="{_ML - 4}" y="{py + 4:.1f}" text-anchor="end">'
            f"{html.escape(label)}</text>"
        )
    return out


def _axes(panel: Panel, f: _Frame) -> list[str]:
    """Both axes with their grids and titles; time in minutes when it spans over 10 minutes."""
    minutes = f.x1 - f.x0 > 600
    unit = 60.0 if minutes else 1.0
    origin, since = _time_origin(f.x0, f.x1, unit)
    out = [
        f'<g stroke="#333"><line x1="{_ML}" y1="{_H - _MB}" x2="{_W - _MR}" y2="{_H - _MB}"/>'
        f'<line x1="{_ML}" y1="{_MT}" x2="{_ML}" y2="{_H - _MB}"/></g>',
        *_time_grid(f, origin, unit),
        *_value_grid(panel, f),
        f'<text x="{(_ML + _W - _MR) / 2}" y="{_H - 4}" text-anchor="middle">'
        f"time ({'min' if minutes else 's'}{since})</text>",
    ]
    if panel.y_label:
        out.append(
            f'<text transform="translate(12,{(_MT + _H - _MB) / 2}) rotate(-90)" '
            f'text-anchor="middle">{html.escape(panel.y_label)}</text>'
        )
    return out


def _reference_lines(panel: Panel, f: _Frame) -> list[str]:
    """The panel's horizontal reference lines (SLA targets, capacities), dashed."""
    out: list[str] = []
    for k, (_, y) in enumerate(panel.hlines):
        py = f.py(y)
        out.append(
            f'<line x1="{_ML}" y1="{py:.1f}" x2="{_W - _MR}" y2="{py:.1f}" '
            f'stroke="{_reference_color(k)}" stroke-dasharray="6 4" stroke-width="1.2"/>'
        )
    return out


def _series_marks(s: Series, color: str, segments: _Segments, f: _Frame) -> list[str]:
    """One series drawn: a polyline (steps if ``s.step``) or dots per gapless segment, each
    thinned to its share of about three points per pixel of plot width."""
    dash = ' stroke-dasharray="5 3"' if s.dashed else ""
    total = sum(len(sx) for sx, _ in segments)
    out: list[str] = []
    for sx, sy in segments:
        thin_x, thin_y = _thin(sx, sy, max(30, 3 * (_W - _ML - _MR) * len(sx) // total))
        if s.points:
            out.extend(
                f'<circle cx="{f.px(x):.1f}" cy="{f.py(y):.1f}" r="2.2" fill="{color}"/>'
                for x, y in zip(thin_x, thin_y, strict=True)
            )
            continue
        pts = []
        prev_y: float | None = None
        for x, y in zip(thin_x, thin_y, strict=True):
            if s.step and prev_y is not None:
                pts.append(f"{f.px(x):.1f},{f.py(prev_y):.1f}")
            pts.append(f"{f.px(x):.1f},{f.py(y):.1f}")
            prev_y = y
        out.append(
            f'<polyline fill="none" stroke="{color}" stroke-width="1.5"{dash} '
            f'points="{" ".join(pts)}"/>'
        )
    return out


def _legend_keys(panel: Panel) -> list[_LegendKey]:
    """The legend's entries: the reference lines (with their values), then the series."""
    return [
        *(
            _LegendKey(f"{label} ({_fmt(y)})", _reference_color(k), True)
            for k, (label, y) in enumerate(panel.hlines)
        ),
        *(_LegendKey(s.name, _series_color(i, s), s.dashed) for i, s in enumerate(panel.series)),
    ]


def _legend(panel: Panel) -> list[str]:
    """The legend above the plot, in rows across the panel; entries that do not fit in the
    space above the plot are left out."""
    out: list[str] = []
    lx: float = _ML
    ly = 32
    for label, color, dashed in _legend_keys(panel):
        width = 6.6 * len(label) + 30
        if lx + width > _W - _MR and lx > _ML:
            lx, ly = _ML, ly + 13
            if ly > _MT - 8:
                break
        dash = ' stroke-dasharray="4 2"' if dashed else ""
        out.append(
            f'<line x1="{lx:.0f}" y1="{ly - 4}" x2="{lx + 16:.0f}" y2="{ly - 4}" '
            f'stroke="{color}" stroke-width="2"{dash}/>'
            f'<text x="{lx + 20:.0f}" y="{ly}">{html.escape(label)}</text>'
        )
        lx += width
    return out


def render_panel(panel: Panel) -> str:
    """One panel as an inline ``<svg>`` element.

    >>> svg = render_panel(Panel("rate", [Series("obs", [0, 60, 120], [1.0, None, 3.0])]))
    >>> svg.startswith("<svg") and svg.count("<polyline") == 2
    True
    """
    segments = [_segments(s) for s in panel.series]
    xs = [x for ss in segments for sx, _ in ss for x in sx]
    ys = [y for ss in segments for _, sy in ss for y in sy] + [y for _, y in panel.hlines]
    out = _svg_heading(panel)
    if not xs:
        out.append(
            f'<text x="{_W / 2}" y="{_H / 2}" text-anchor="middle" fill="#999">no data</text>'
        )
    else:
        f = _Frame.fitted(panel, xs, ys)
        out.extend(_axes(panel, f))
        out.extend(_reference_lines(panel, f))
        for i, (s, ss) in enumerate(zip(panel.series, segments, strict=True)):
            out.extend(_series_marks(s, _series_color(i, s), ss, f))
        out.extend(_legend(panel))
    out.append("</svg>")
    return "\n".join(out)


_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:24px;color:#222}
h1{font-size:20px;margin:0 0 8px}
.grid{display:grid;grid-template-columns:repeat(2,minmax(0,560px));gap:12px}
svg{border:1px solid #ddd;border-radius:4px;max-width:100%;height:auto}
table.s{border-collapse:collapse;margin:8px 0 16px;font-size:13px}
table.s td{padding:2px 12px 2px 0;vertical-align:top}
table.s td:first-child{color:#555}
pre{font-size:12px;background:#f7f7f7;padding:8px;overflow:auto}
"""


def render_report(
    panels: Sequence[Panel],
    title: str = "Planner report",
    summary: Mapping[str, str] | None = None,
    notes: str | None = None,
) -> str:
    """A complete HTML page: title, an optional key/value summary, preformatted notes, panels.

    >>> page = render_report([Panel("x", [Series("a", [0, 1], [0, 1])])], "T", {"k": "v"})
    >>> "<script" in page, page.count("<svg"), "http://" in page.replace(
    ...     'xmlns="http://www.w3.org/2000/svg"', "")
    (False, 1, False)
    """
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{html.escape(title)}</title>",
        f"<style>{_CSS}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
    ]
    if summary:
        parts.append('<table class="s">')
        parts.extend(
            f"<tr><td>{html.escape(k)}</td><td>{html.escape(v)}</td></tr>"
            for k, v in summary.items()
        )
        parts.append("</table>")
    if notes:
        parts.append(f"<pre>{html.escape(notes)}</pre>")
    parts.append('<div class="grid">')
    parts.extend(render_panel(p) for p in panels)
    parts.append("</div></body></html>")
    return "\n".join(parts)
