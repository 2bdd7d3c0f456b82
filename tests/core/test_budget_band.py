"""The GPU budget band primitives (reference spec §8.2, every case of §16.6, §16.1a)."""

from __future__ import annotations

import functools
import itertools

import pytest

from operators.budget import apply_global_budget
from operators.budget_band import (
    bounds_for_total,
    compute_tolerance,
    fit_directional_budget_pair,
    fit_throughput_pair,
    fit_throughput_single,
    guard_disagg_scaling_budget,
    guard_single_scaling_budget,
    proportional_clamp_pair,
    proportional_clamp_single,
)

HOLD, RECONCILE = "gpu_budget_guard_hold", "gpu_budget_reconcile"

# -- tolerance and the band --------------------------------------------------------------------


def test_compute_tolerance() -> None:
    assert compute_tolerance([1, 2]) == 2
    assert compute_tolerance([0, 0]) == 0
    assert compute_tolerance([]) == 0
    assert compute_tolerance([1, 0, 2, -1]) == 2


@pytest.mark.parametrize(
    ("args", "in_band", "why"),
    [
        ((8, 4, 8, 0), True, ""),
        ((9, 4, 8, 0), False, "exceeds ceiling"),
        ((3, 4, 8, 0), False, "below floor"),
        ((2, 4, 8, 2), True, ""),  # the tolerance relaxes the floor...
        ((1, 4, 8, 2), False, "below floor"),
        ((9, 4, 8, 2), False, "exceeds ceiling"),  # ...never the ceiling
        ((0, -1, 8, 0), True, ""),  # floor off
        ((100, 4, -1, 0), True, ""),  # ceiling off
        ((3, 4, -1, 0), False, "below floor"),
    ],
)
def test_bounds_for_total(args: tuple[int, int, int, int], in_band: bool, why: str) -> None:
    got, reason = bounds_for_total(*args)
    assert got is in_band
    assert (why in reason) if why else reason == ""


def test_ceiling_reason_never_mentions_the_tolerance() -> None:
    assert "tolerance" not in bounds_for_total(9, 4, 8, 2)[1]
    assert "tolerance 2" in bounds_for_total(1, 4, 8, 2)[1]


# -- proportional clamps -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ((3, 5, 1, 1, -1, -1, 1), (3, 5)),  # both bounds off
        ((10, 10, 1, 1, -1, 5, 2, 1), (2, 3)),  # component-specific minimums
        ((3, 1, 1, 1, 4, 4, 1), (3, 1)),  # in band
        ((1, 1, 1, 2, 4, 10, 1), (1, 1)),  # 3 GPUs in [4 - 2, 10]
        ((5, 5, 1, 1, -1, 1, 1), (0, 0)),  # minimums need 2 > 1
        ((1, 2, 2, 2, 3, 3, 1), (0, 0)),  # minimums need 4 > 3
        ((2, 2, 1, 1, 100, 4, 1), (2, 2)),  # infeasible band: inputs back
        ((10, 0, 8, 1, -1, 20, 1), (2, 1)),  # the decode cap keeps decode's minimum
        ((3, 5, None, 1, 4, 8, 1), (3, 5)),  # unknown GPUs per replica
    ],
)
def test_proportional_clamp_pair(args: tuple, expected: tuple[int, int]) -> None:
    assert proportional_clamp_pair(*args) == expected


def test_clamp_pair_totals() -> None:
    p, d = proportional_clamp_pair(5, 5, 1, 1, -1, 4, 1)
    assert p + d == 4  # ceiling only: strict
    p, d = proportional_clamp_pair(1, 1, 2, 2, 5, 5, 1)
    assert 2 * p + 2 * d == 4  # 5 is unreachable in steps of 2: 4 is in [5 - 2, 5]
    assert proportional_clamp_pair(p, d, 2, 2, 5, 5, 1) == (p, d)  # a fixed point
    for args in ((1, 1, 1, 1, 4, 4, 1), (0, 0, 1, 1, 4, 4, 1)):  # floor path, empty pair split
        p, d = proportional_clamp_pair(*args)
        assert 3 <= p + d <= 4 and p >= 1 and d >= 1
    p, d = proportional_clamp_pair(1, 1, 1, 2, 5, 5, 1)  # [3, 5], never above 5
    assert 3 <= p + 2 * d <= 5


def test_ceiling_path_never_grows_either_pool() -> None:
    # §16.6 / §16.1a: under §8.1 (10, 1) at 8 and 1 GPUs in 20 becomes (2, 4); the band does
    # not seat decode replicas nobody asked for
    assert apply_global_budget(10, 1, 8, 1, 20, 1, 1) == (2, 4)
    p, d = proportional_clamp_pair(10, 1, 8, 1, -1, 20, 1)
    assert p <= 10 and d <= 1 and 8 * p + d <= 20
    for p0, d0, pg, dg, ceiling in itertools.product(
        range(1, 13), range(1, 9), (1, 2, 4, 8), (1, 3), (4, 12, 20, 32)
    ):
        total = p0 * pg + d0 * dg
        if total <= ceiling or ceiling < pg + dg:
            continue
        p, d = proportional_clamp_pair(p0, d0, pg, dg, -1, ceiling, 1)
        assert 1 <= p <= p0 and 1 <= d <= d0
        assert p * pg + d * dg <= ceiling


def _pair_in_band(p: int, d: int, pg: int, dg: int, lo: int, hi: int, tolerance: int) -> bool:
    return bounds_for_total(p * pg + d * dg, lo, hi, tolerance)[0]


def test_clamp_pair_lands_in_band_when_feasible() -> None:
    """Whenever a pair at or above the inputs fits the band (min == max included, where the
    reference's two roundings up overshoot the ceiling), the clamp finds one."""
    for p0, d0, pg, dg, lo, hi in itertools.product(
        range(0, 7), range(0, 7), (1, 2), (1, 3), (-1, 4, 9, 12), (-1, 9, 12, 14)
    ):
        if 0 <= hi < lo:
            continue
        tolerance = max(pg, dg) if lo >= 0 and hi >= 0 else 0
        in_band = functools.partial(_pair_in_band, pg=pg, dg=dg, lo=lo, hi=hi, tolerance=tolerance)
        p, d = proportional_clamp_pair(p0, d0, pg, dg, lo, hi, 1)
        if (p, d) == (0, 0) or in_band(p0, d0):
            continue  # infeasible ceiling, or in band already
        below_floor = lo >= 0 and p0 * pg + d0 * dg < lo
        reachable = any(
            in_band(q, e)
            for q in range(max(p0, 1), 3 * lo + 2)
            for e in range(max(d0, 1), 3 * lo + 2)
        )
        if (p, d) == (p0, d0):
            assert not (below_floor and reachable), (p0, d0, pg, dg, lo, hi)
            continue
        assert in_band(p, d), (p0, d0, pg, dg, lo, hi, p, d)
        assert proportional_clamp_pair(p, d, pg, dg, lo, hi, 1) == (p, d)  # no oscillation


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ((70, 1, -1, 64, 1), 64),
        ((30, 4, -1, -1, 1), 30),
        ((3, 4, -1, 6, 2), 0),  # infeasible
        ((2, 2, 8, 10, 1), 4),  # floor push: ceil(8 / 2)
        ((1, 2, 5, 5, 1), 2),  # ceil(5/2) = 3 is 6 GPUs > 5: the most that fit
        ((3, 1, 4, 8, 1), 3),  # in band
        ((3, None, 4, 8, 1), 3),
    ],
)
def test_proportional_clamp_single(args: tuple, expected: int) -> None:
    assert proportional_clamp_single(*args) == expected


# -- direction-preserving guards ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ((64, 63, 1, 64, 64, 1), (64, HOLD)),  # scale-down at the floor
        ((63, 62, 1, 64, 64, 1), (63, HOLD)),  # at the tolerance edge: no bounce to the floor
        ((70, 69, 1, -1, 64, 1), (64, RECONCILE)),  # out of band: may exceed the step
        ((64, 65, 1, -1, 64, 1), (64, HOLD)),  # scale-up at the ceiling
        ((60, 70, 1, -1, 64, 1), (64, None)),  # clamped, direction kept
        ((10, 18, 1, -1, 100, 1), (18, None)),
        ((2, 1, 1, 64, 64, 3), (64, RECONCILE)),  # below the floor and the minimum endpoint
        # in band below the minimum endpoint: a proposal the budget funds stands ...
        ((2, 5, 1, -1, 16, 3), (5, None)),
        ((0, 3, 1, -1, 8, 3), (3, None)),  # lifted from zero by a floor
        ((2, 1, 1, -1, 16, 3), (3, None)),  # a scale-down is raised to the minimum
        # ... one it cannot fund keeps the funded part (reported as the budget's)
        ((2, 20, 1, -1, 16, 3), (16, RECONCILE)),
        ((2, 5, 2, -1, 8, 3), (4, RECONCILE)),  # 10 GPUs > 8: 4 replicas fit
        ((2, 5, 2, -1, 5, 3), (0, RECONCILE)),  # not even the minimum fits
        ((5, 9, None, 4, 8, 1), (9, None)),  # unknown GPUs: no budget
    ],
)
def test_guard_single_scaling_budget(args: tuple, expected: tuple) -> None:
    assert guard_single_scaling_budget(*args) == expected


def guard(current, proposed, *, pg=1, dg=1, lo=64, hi=64, p_min=1, d_min=1):
    return guard_disagg_scaling_budget(*current, *proposed, pg, dg, lo, hi, p_min, d_min)


@pytest.mark.parametrize(
    ("current", "proposed", "expected"),
    [
        ((28, 36), (27, 36), (28, 36, HOLD)),  # down/hold at the floor
        ((27, 36), (26, 35), (27, 36, HOLD)),  # down/down at the tolerance edge
        ((27, 37), (26, 38), (26, 38, None)),  # explicit opposing swap
        ((27, 37), (28, 36), (28, 36, None)),
        ((28, 36), (28, 37), (28, 36, HOLD)),  # hold/up at a full budget: no invented donor
        ((28, 36), (29, 37), (28, 36, HOLD)),  # up/up
    ],
)
def test_guard_disagg_scaling_budget(current, proposed, expected) -> None:
    assert guard(current, proposed) == expected


def test_guard_disagg_clamps_an_in_band_move_without_reversing_it() -> None:
    assert guard((24, 30), (25, 31), lo=50) == (25, 31, None)  # fits
    assert guard((30, 30), (33, 34), lo=-1) == (31, 33, None)  # 67 > 64: both shrink, both up
    # below the ceiling the proportional clamp would cut prefill past its proposal: held
    assert guard((30, 30), (29, 40), lo=-1) == (30, 30, HOLD)


def test_guard_disagg_weighted_swap_that_does_not_fit_is_held() -> None:
    # one 1-GPU prefill cannot fund one 2-GPU decode
    assert guard((2, 1), (1, 2), dg=2, lo=4, hi=4) == (2, 1, HOLD)


def test_guard_disagg_reconciles_an_out_of_band_fleet_from_itself() -> None:
    # 70 GPUs over a 64 ceiling: reconciled from the fleet, not from the (down) proposal
    assert guard((30, 40), (29, 39), lo=-1) == (27, 37, RECONCILE)
    # in GPUs but prefill below its minimum endpoint: decode is the donor (§16.5)
    assert guard((24, 40), (23, 39), p_min=30, d_min=8) == (30, 34, RECONCILE)
    # below the floor: grown toward it
    assert guard((10, 10), (10, 10)) == (32, 32, RECONCILE)


def test_guard_disagg_takes_a_funded_proposal_while_recovering_an_endpoint() -> None:
    # prefill at 0 (min 1), decode asks 2 -> 3: 4 GPUs fit a 16-GPU ceiling, nothing binds
    assert guard((0, 2), (0, 3), lo=-1, hi=16) == (1, 3, None)
    assert guard((24, 30), (24, 33), lo=-1, p_min=30) == (30, 33, None)  # 63 <= 64
    assert guard((0, 4), (0, 5), lo=4, hi=8) == (1, 5, None)  # a floor in band too
    # over the ceiling once raised: the funded part, never below reconciling the fleet
    assert guard((24, 40), (23, 39), p_min=30, d_min=8) == (30, 34, RECONCILE)  # §16.5 donor
    assert guard((24, 30), (24, 35), lo=-1, p_min=30) == (30, 34, RECONCILE)
    assert guard((0, 2), (0, 3), lo=-1, hi=3) == (1, 2, RECONCILE)
    # a proposal lowering a role below what reconciling keeps: reconciled
    assert guard((0, 5), (0, 4), lo=-1, hi=16) == (1, 5, RECONCILE)
    # weighted: 1 prefill (2 GPUs) + 3 decodes (2 GPUs) fit 8, a 4th decode does not
    assert guard((0, 2), (0, 3), pg=2, dg=2, lo=-1, hi=8) == (1, 3, None)
    assert guard((0, 2), (0, 4), pg=2, dg=2, lo=-1, hi=8) == (1, 3, RECONCILE)


def test_guards_never_reverse_a_direction_on_a_grid() -> None:
    for cp, cd, dp, dd, pg, dg in itertools.product(
        range(1, 6), range(1, 6), (-2, -1, 0, 1, 2), (-2, -1, 0, 1, 2), (1, 2), (1, 3)
    ):
        pp, pd = max(cp + dp, 1), max(cd + dd, 1)
        budget = cp * pg + cd * dg
        for lo, hi in ((budget, budget), (-1, budget), (budget - 1, budget + pg)):
            p, d, reason = guard((cp, cd), (pp, pd), pg=pg, dg=dg, lo=lo, hi=hi)
            assert reason in (None, HOLD)  # the current fleet is in band
            assert min(cp, pp) <= p <= max(cp, pp) and min(cd, pd) <= d <= max(cd, pd)
            assert p * pg + d * dg <= hi
            if reason == HOLD:
                assert (p, d) == (cp, cd)
        single, reason = guard_single_scaling_budget(cp, pp, pg, budget - 1, budget + 1, 1)
        if reason is None or reason == HOLD:
            assert min(cp, pp) <= single <= max(cp, pp)


# -- the directional fit -----------------------------------------------------------------------


def fit(current, proposed, *, pg=1, dg=1, lo=64, hi=64):
    return fit_directional_budget_pair(*current, *proposed, pg, dg, lo, hi, 1, 1)


@pytest.mark.parametrize(
    ("current", "proposed", "kwargs", "expected"),
    [
        ((24, 40), (32, 48), {}, (24, 40)),  # up/up at the ceiling: nothing is funded
        ((24, 40), (23, 48), {}, (23, 41)),  # only the funded part of the rebalance
        ((16, 16), (15, 24), {"pg": 2, "lo": 48, "hi": 48}, (15, 18)),  # weighted, both legs
        ((24, 36), (32, 44), {"lo": -1}, (26, 38)),  # headroom shared between two scale-ups
        ((24, 36), (40, 36), {"lo": -1}, (28, 36)),
        ((20, 20), (12, 20), {"lo": -1}, (12, 20)),  # in band: the proposal itself
    ],
)
def test_fit_directional_budget_pair(current, proposed, kwargs, expected) -> None:
    assert fit(current, proposed, **kwargs) == expected


@pytest.mark.parametrize(("pg", "dg"), [(1, 1), (1, 2), (2, 3)])
def test_fit_preserves_directions_and_the_band_exhaustively(pg: int, dg: int) -> None:
    for cp, cd in itertools.product(range(1, 5), range(1, 5)):
        budget = cp * pg + cd * dg
        for pp, pd in itertools.product(
            range(max(0, cp - 2), cp + 3), range(max(0, cd - 2), cd + 3)
        ):
            p, d = fit_directional_budget_pair(cp, cd, pp, pd, pg, dg, budget, budget, 0, 0)
            assert min(cp, pp) <= p <= max(cp, pp) and min(cd, pd) <= d <= max(cd, pd)
            assert bounds_for_total(p * pg + d * dg, budget, budget, max(pg, dg))[0]
            if (pp < cp and pd > cd) or (pp > cp and pd < cd):  # both legs or neither
                assert (p == cp) == (d == cd)


def test_fit_walk_is_bounded_by_the_envelope() -> None:
    # a huge proposal under a small ceiling answers at once (the walk spans only what fits)
    assert fit((1, 1), (10**9, 10**9), lo=-1, hi=6) == (3, 3)


# -- throughput fits (§16.5 numbers) -----------------------------------------------------------


def test_fit_throughput_pair() -> None:
    tp = fit_throughput_pair
    assert tp((24, 40), (16, 48), 1, 1, 64, 64, 1, 1) == (16, 48, None)
    assert tp((24, 40), (32, 48), 1, 1, 64, 64, 1, 1) == (24, 40, HOLD)
    assert tp((28, 36), (27, 36), 1, 1, 64, 64, 1, 1) == (28, 36, HOLD)
    assert tp((27, 36), (19, 28), 1, 1, -1, 64, 1, 1) == (19, 28, None)  # a bound: no floor
    assert tp((24, 40), (30, 48), 1, 1, 64, 64, 30, 8) == (30, 34, None)  # donor
    assert tp((21, 34), (30, 34), 1, 1, 64, 64, 30, 34) == (30, 34, None)
    assert tp(None, (30, 48), 1, 1, 64, 64, 30, 8) == (30, 34, None)  # counts unknown
    assert tp((24, 40), (24, 40), 1, 1, 64, 64, 1, 1) == (24, 40, None)


def test_fit_throughput_single() -> None:
    ts = fit_throughput_single
    assert ts(64, 72, 1, 64, 64, 1) == (64, HOLD)
    assert ts(64, 72, 1, -1, 64, 1) == (64, HOLD)
    assert ts(63, 62, 1, 64, 64, 1) == (63, HOLD)
    assert ts(64, 56, 1, -1, 64, 1) == (56, None)  # a lower bound is not inflated
    assert ts(1, 30, 1, -1, 64, 30) == (30, None)  # endpoint recovery
    assert ts(None, 70, 1, -1, 64, 1) == (64, None)
    assert ts(10, 18, 1, -1, 100, 1) == (18, None)


@pytest.mark.parametrize(
    "call",
    [
        lambda: proportional_clamp_pair(-1, 1, 1, 1, 4, 8, 1),
        lambda: proportional_clamp_pair(1, 1, 0, 1, 4, 8, 1),
        lambda: proportional_clamp_single(1.5, 1, 4, 8, 1),
        lambda: guard_single_scaling_budget(True, 1, 1, 4, 8, 1),
        lambda: guard_disagg_scaling_budget(1, 1, 1, -3, 1, 1, 4, 8, 1, 1),
        lambda: fit_directional_budget_pair(1, 1, 1, 1, 1, 0, 4, 8, 1, 1),
    ],
)
def test_bad_arguments_raise_value_error(call) -> None:
    with pytest.raises(ValueError):
        call()


# -- config (spec §9.5) ------------------------------------------------------------------------


def test_config_defaults_and_reference() -> None:
    from schemas import PlannerConfig

    config = PlannerConfig()
    assert (config.min_gpu_budget, config.max_gpu_budget, config.gpu_budget_rule) == (
        -1,
        8,
        "band",
    )
    assert config.reference_variant().gpu_budget_rule == "pair_clamp"
    banded = PlannerConfig(min_gpu_budget=4, max_gpu_budget=8)
    assert banded.min_gpu_budget == 4


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"min_gpu_budget": 9, "max_gpu_budget": 8}, "min_gpu_budget 9 is above max_gpu_budget 8"),
        ({"min_gpu_budget": 4, "gpu_budget_rule": "pair_clamp"}, "needs gpu_budget_rule 'band'"),
        ({"max_gpu_budget": 1}, "max_gpu_budget 1 is below the 2 GPUs"),
        ({"gpu_budget_rule": "floor"}, "gpu_budget_rule"),
    ],
)
def test_config_refuses_an_unusable_band(fields: dict, message: str) -> None:
    from pydantic import ValidationError

    from schemas import PlannerConfig

    with pytest.raises(ValidationError, match=message):
        PlannerConfig(**fields)
    assert PlannerConfig(min_gpu_budget=9, max_gpu_budget=-1).min_gpu_budget == 9  # no ceiling


def test_config_file_takes_min_gpu_budget(tmp_path) -> None:
    from schemas.config_file import load_config

    path = tmp_path / "planner.yaml"
    path.write_text("deployments:\n  a:\n    min_gpu_budget: 6\n    max_gpu_budget: 12\n")
    assert load_config(path)["a"].min_gpu_budget == 6
