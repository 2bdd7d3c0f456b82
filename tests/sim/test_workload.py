"""Synthetic load and trace transforms (speed-up, load scaling): shapes, counts, determinism."""

from __future__ import annotations

import itertools
from dataclasses import fields, replace

import numpy as np
import pytest

from schemas.trace import TraceRequest
from sim.workload import (
    LengthSampler,
    burst_load,
    poisson_load,
    scale_load,
    sinusoidal_load,
    speed_up,
    trace_span,
)


def test_scale_load_superimposes_shifted_wrapped_copies(azure_conv: list[TraceRequest]) -> None:
    base = azure_conv[:2000]
    span = trace_span(base)
    out = scale_load(base, 4, seed=1)
    assert len(out) == 4 * len(base)
    assert all(0.0 <= r.arrival_s < span for r in out)
    assert all(a.arrival_s <= b.arrival_s for a, b in itertools.pairwise(out))
    # copy 0 is the original trace, in order
    assert [r for r in out if r.request_id is None] == base
    # copy k is the original shifted by one offset modulo the span
    for k in (1, 2, 3):
        copy = sorted(
            (r for r in out if r.request_id and r.request_id.endswith(f"#{k}")),
            key=lambda r: int(r.request_id.split("#")[0]),  # type: ignore[union-attr]
        )
        assert len(copy) == len(base)
        shift = np.mod(
            np.array([c.arrival_s - b.arrival_s for c, b in zip(copy, base, strict=True)]), span
        )
        assert np.ptp(shift) < 1e-6
        assert [(c.isl, c.osl) for c in copy] == [(b.isl, b.osl) for b in base]
    assert out == scale_load(base, 4, seed=1)
    assert out != scale_load(base, 4, seed=2)
    assert scale_load(base, 1, seed=3) == base
    with pytest.raises(ValueError):
        scale_load(base, 0)


def test_speed_up(azure_conv: list[TraceRequest]) -> None:
    fast = speed_up(azure_conv[:100], 10.0)
    assert [r.arrival_s for r in fast] == [r.arrival_s / 10.0 for r in azure_conv[:100]]
    assert [(r.isl, r.osl) for r in fast] == [(r.isl, r.osl) for r in azure_conv[:100]]
    with pytest.raises(ValueError):
        speed_up(fast, 0.0)


def test_transforms_keep_every_other_field_of_a_request() -> None:
    # speed_up and scale_load copy requests with dataclasses.replace: only the fields they
    # mean to change differ (a field added to TraceRequest is carried, not dropped)
    full = TraceRequest(
        arrival_s=8.0, isl=700, osl=30, hash_ids=(5, 6), request_id="r", block_size=64
    )
    base = [TraceRequest(arrival_s=0.0, isl=1, osl=1), full]
    [_, fast] = speed_up(base, 4.0)
    assert fast == replace(full, arrival_s=2.0)
    copy = next(r for r in scale_load(base, 2, seed=0) if r.request_id == "r#1")
    changed = {"arrival_s", "hash_ids", "request_id"}
    for f in fields(TraceRequest):
        if f.name not in changed:
            assert getattr(copy, f.name) == getattr(full, f.name), f.name


def test_synthetic_shapes_and_seeds() -> None:
    lengths = LengthSampler(isl_mean=2000, osl_mean=200, cv=0.5)
    p = poisson_load(10.0, 600.0, lengths, seed=4)
    assert abs(len(p) - 6000) < 4 * 6000**0.5
    assert abs(np.mean([r.isl for r in p]) - 2000) < 60
    assert np.std([r.isl for r in p]) / 2000 == pytest.approx(0.5, abs=0.05)
    assert p == poisson_load(10.0, 600.0, lengths, seed=4)
    assert p != poisson_load(10.0, 600.0, lengths, seed=5)
    s = sinusoidal_load(5.0, 4.0, 300.0, 600.0, seed=6)
    counts = np.bincount([int(r.arrival_s // 75) for r in s], minlength=8)
    assert counts[0] + counts[1] > 2 * (counts[2] + counts[3])  # peak then trough
    b = burst_load(2.0, [(100.0, 20.0, 40.0)], 300.0, seed=7)
    inside = sum(100 <= r.arrival_s < 120 for r in b)
    assert abs(inside - 800) < 4 * 800**0.5
    assert all(a.arrival_s <= c.arrival_s for a, c in itertools.pairwise(b))
