"""The GPU budget band of the current reference tree (spec §8.2, §16.5, §16.6).

A deployment's GPUs (replicas × GPUs per replica, summed over roles) should stay in the band
``[min_gpu_budget - tolerance, max_gpu_budget]``; a negative bound is off. ``max`` is a hard
ceiling and is never relaxed; ``tolerance`` (the largest GPUs-per-replica, only when both bounds
are on) relaxes the floor alone, because whole replicas cannot always land exactly on it.

Three layers:

* clamps — :func:`proportional_clamp_pair` / :func:`proportional_clamp_single` move any count
  into the band (used to reconcile a fleet that is out of it);
* direction-preserving guards for load actions — :func:`guard_single_scaling_budget`,
  :func:`guard_disagg_scaling_budget`: a constraint may shrink a requested move but never
  reverse it, never invent a donor at a full budget, and a floor never turns a scale-down into
  a scale-up (``gpu_budget_guard_hold``); a current fleet already out of band is reconciled
  from the fleet itself (``gpu_budget_reconcile``); one in band but below a minimum endpoint
  takes the proposal raised to the minimum endpoints (so a budget that does not bind changes
  nothing), clamped into the band if it is out (``gpu_budget_reconcile``), unless that leaves
  a role below what reconciling from the fleet gives (then that);
* :func:`fit_directional_budget_pair` and the throughput fits built on it
  (:func:`fit_throughput_single`, :func:`fit_throughput_pair`).

Unknown GPUs per replica (``None``) disable the budget, as in §8.1. Integer arithmetic only.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from operators.budget import check_count

BudgetReason = Literal["gpu_budget_guard_hold", "gpu_budget_reconcile"]
HOLD: BudgetReason = "gpu_budget_guard_hold"
RECONCILE: BudgetReason = "gpu_budget_reconcile"


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _between(current: int, proposed: int, value: int) -> bool:
    return min(current, proposed) <= value <= max(current, proposed)


def _gpus(name: str, value: int | None) -> int | None:
    if value is None:
        return None
    check_count(name, value, 1)
    return int(value)


def compute_tolerance(gpus_per_replica: Iterable[int]) -> int:
    """The floor's slack: the largest positive GPUs-per-replica (0 if there is none).

    >>> compute_tolerance([1, 2]), compute_tolerance([0, 0]), compute_tolerance([])
    (2, 0, 0)
    """
    return max((int(g) for g in gpus_per_replica if g > 0), default=0)


def bounds_for_total(total: int, min_gpus: int, max_gpus: int, tolerance: int) -> tuple[bool, str]:
    """Is ``total`` GPUs in ``[min_gpus - tolerance, max_gpus]``? Returns ``(in_band, why_not)``
    (``why_not`` is ``""`` in band). A negative bound is off; the ceiling is never relaxed.

    >>> bounds_for_total(8, 4, 8, 0), bounds_for_total(2, 4, 8, 2)
    ((True, ''), (True, ''))
    >>> bounds_for_total(9, 4, 8, 0)
    (False, 'total 9 exceeds ceiling (8)')
    >>> bounds_for_total(3, 4, 8, 0)[1], bounds_for_total(1, 4, 8, 2)[1]
    ('total 3 below floor (4)', 'total 1 below floor (4 - tolerance 2)')
    """
    if max_gpus >= 0 and total > max_gpus:
        return False, f"total {total} exceeds ceiling ({max_gpus})"
    if min_gpus >= 0 and total < min_gpus - tolerance:
        slack = f" - tolerance {tolerance}" if tolerance else ""
        return False, f"total {total} below floor ({min_gpus}{slack})"
    return True, ""


def _tolerance(min_gpus: int, max_gpus: int, *gpus: int) -> int:
    return compute_tolerance(gpus) if min_gpus >= 0 and max_gpus >= 0 else 0


def _in_band(total: int, min_gpus: int, max_gpus: int, tolerance: int) -> bool:
    return bounds_for_total(total, min_gpus, max_gpus, tolerance)[0]


def proportional_clamp_pair(
    num_p: int,
    num_d: int,
    p_gpu: int | None,
    d_gpu: int | None,
    min_gpus: int,
    max_gpus: int,
    prefill_min_endpoint: int,
    decode_min_endpoint: int | None = None,
) -> tuple[int, int]:
    """Move a (prefill, decode) pair into the band (``decode_min_endpoint`` defaults to the
    prefill one).

    In band: kept. Above the ceiling: ``(0, 0)`` if the minimum endpoints alone overshoot it,
    else prefill scales by ``max / total`` (floored, within its minimum and what leaves room for
    the decode minimum) and decode takes the rest — but never more than it asked for (so unlike
    §8.1, ``(10, 1)`` at 8 and 1 GPUs under 20 stays at one decode). Below the floor: both grow
    by ``min / total``, each ceiled (§8.2; an empty pair splits the floor evenly). Where the two
    roundings up overshoot the ceiling — with ``min == max`` they usually do — the reference
    returns the inputs and the fleet stays below its floor; *ours*: prefill keeps its growth as
    far as the decode minimum leaves room and decode takes what the ceiling leaves; only if that
    pair is still out of the band are the inputs returned.

    >>> proportional_clamp_pair(3, 5, 1, 1, -1, -1, 1)
    (3, 5)
    >>> proportional_clamp_pair(10, 10, 1, 1, -1, 5, 2, 1)  # minimums 2 and 1
    (2, 3)
    >>> proportional_clamp_pair(10, 1, 8, 1, -1, 20, 1)  # decode is not grown to 4
    (2, 1)
    >>> proportional_clamp_pair(5, 5, 1, 1, -1, 1, 1)  # the minimums need 2 GPUs
    (0, 0)
    >>> proportional_clamp_pair(1, 1, 1, 1, 4, 4, 1), proportional_clamp_pair(0, 0, 1, 1, 4, 4, 1)
    ((2, 2), (2, 2))
    >>> proportional_clamp_pair(2, 2, 1, 1, 100, 4, 1)  # infeasible floor: inputs back
    (2, 2)
    >>> proportional_clamp_pair(3, 2, 1, 1, 12, 20, 1)  # ×12/5, each ceiled: 13 GPUs
    (8, 5)
    >>> proportional_clamp_pair(30, 1, 1, 1, 64, 64, 30, 1)  # (62, 3) overshoots: decode fills
    (62, 2)
    """
    p_min = prefill_min_endpoint
    d_min = prefill_min_endpoint if decode_min_endpoint is None else decode_min_endpoint
    for name, value in (("num_p", num_p), ("num_d", num_d), ("min_endpoint", p_min)):
        check_count(name, value, 0)
    check_count("decode_min_endpoint", d_min, 0)
    check_count("min_gpus", min_gpus, None)
    check_count("max_gpus", max_gpus, None)
    num_p, num_d, p_min, d_min = int(num_p), int(num_d), int(p_min), int(d_min)
    pg, dg = _gpus("p_gpu", p_gpu), _gpus("d_gpu", d_gpu)
    if pg is None or dg is None or (min_gpus < 0 and max_gpus < 0):
        return num_p, num_d
    total = num_p * pg + num_d * dg
    if _in_band(total, min_gpus, max_gpus, _tolerance(min_gpus, max_gpus, pg, dg)):
        return num_p, num_d
    if max_gpus >= 0 and total > max_gpus:
        if max_gpus < p_min * pg + d_min * dg:
            return 0, 0
        most_p = (max_gpus - d_min * dg) // pg
        new_p = max(p_min, min(most_p, num_p * max_gpus // total))
        new_d = max(d_min, min(num_d, (max_gpus - new_p * pg) // dg))
        return new_p, new_d
    if total == 0:  # nothing yet: half the floor each (decode takes the rounding)
        new_p = max(p_min, _ceil_div(min_gpus, 2 * pg))
        new_d = max(d_min, _ceil_div(max(0, min_gpus - new_p * pg), dg))
    else:  # each grows by min / total, ceiled (§8.2): both may round up past the floor
        new_p = max(p_min, _ceil_div(num_p * min_gpus, total))
        new_d = max(d_min, _ceil_div(num_d * min_gpus, total))
    if max_gpus >= 0 and new_p * pg + new_d * dg > max_gpus:  # ours: fit under the ceiling
        new_p = max(p_min, min(new_p, (max_gpus - d_min * dg) // pg))
        new_d = max(d_min, (max_gpus - new_p * pg) // dg)
    if not _in_band(
        new_p * pg + new_d * dg, min_gpus, max_gpus, _tolerance(min_gpus, max_gpus, pg, dg)
    ):
        return num_p, num_d
    return new_p, new_d


def proportional_clamp_single(
    desired: int, gpus: int | None, min_gpus: int, max_gpus: int, min_endpoint: int
) -> int:
    """One role's count into the band: above the ceiling the most replicas that fit (0 if
    ``min_endpoint`` replicas do not); below the floor ``ceil(min / gpus)``, or if that
    overshoots the ceiling, the most that fit.

    >>> proportional_clamp_single(70, 1, -1, 64, 1), proportional_clamp_single(2, 2, 8, 10, 1)
    (64, 4)
    >>> proportional_clamp_single(1, 2, 5, 5, 1)  # ceil(5/2)=3 would be 6 GPUs > 5: 2 fit
    2
    >>> proportional_clamp_single(3, 4, -1, 6, 2)  # 2 × 4 > 6: infeasible
    0
    """
    check_count("desired", desired, 0)
    check_count("min_endpoint", min_endpoint, 0)
    check_count("min_gpus", min_gpus, None)
    check_count("max_gpus", max_gpus, None)
    desired, min_endpoint = int(desired), int(min_endpoint)
    g = _gpus("gpus", gpus)
    if g is None or (min_gpus < 0 and max_gpus < 0):
        return desired
    total = desired * g
    if _in_band(total, min_gpus, max_gpus, _tolerance(min_gpus, max_gpus, g)):
        return desired
    fitting = None if max_gpus < 0 else max_gpus // g
    if fitting is not None and total > max_gpus:
        return 0 if fitting < min_endpoint else max(min_endpoint, fitting)
    grown = max(min_endpoint, _ceil_div(min_gpus, g))
    if fitting is not None and grown > fitting:
        return 0 if fitting < min_endpoint else max(min_endpoint, fitting)
    return grown


def guard_single_scaling_budget(
    current: int,
    proposed: int,
    gpus: int | None,
    min_gpus: int,
    max_gpus: int,
    min_endpoint: int,
) -> tuple[int, BudgetReason | None]:
    """Apply the band to one role's load action without reversing its direction.

    A current count out of band is reconciled from itself (``gpu_budget_reconcile``, which may
    exceed any step cap). One in band but below ``min_endpoint`` takes the proposal raised to
    ``min_endpoint`` (no reason: the budget does not bind), or if that is out of band the
    proposal clamped into it (``gpu_budget_reconcile``). At/below the floor a scale-down,
    at/above the ceiling a scale-up is held (``gpu_budget_guard_hold``); otherwise the proposal
    is clamped, and held if the clamp would turn it around.

    >>> guard_single_scaling_budget(64, 63, 1, 64, 64, 1)
    (64, 'gpu_budget_guard_hold')
    >>> guard_single_scaling_budget(63, 62, 1, 64, 64, 1)  # at the tolerance edge
    (63, 'gpu_budget_guard_hold')
    >>> guard_single_scaling_budget(70, 69, 1, -1, 64, 1)
    (64, 'gpu_budget_reconcile')
    >>> guard_single_scaling_budget(10, 18, 1, -1, 100, 1)
    (18, None)
    >>> guard_single_scaling_budget(2, 5, 1, -1, 16, 3)  # below min 3: the scale-up fits
    (5, None)
    >>> guard_single_scaling_budget(2, 20, 1, -1, 16, 3)  # ... it does not: the funded part
    (16, 'gpu_budget_reconcile')
    >>> guard_single_scaling_budget(2, 4, 2, -1, 5, 1)  # 5 GPUs fund 2 replicas of 2: held
    (2, 'gpu_budget_guard_hold')
    """
    check_count("current", current, 0)
    check_count("proposed", proposed, 0)
    current, proposed = int(current), int(proposed)
    g = _gpus("gpus", gpus)
    if g is None or (min_gpus < 0 and max_gpus < 0):
        return proposed, None
    total = current * g
    tolerance = _tolerance(min_gpus, max_gpus, g)
    in_band = _in_band(total, min_gpus, max_gpus, tolerance)
    if current < min_endpoint or not in_band:
        start = max(current, min_endpoint)
        reconciled = proportional_clamp_single(start, g, min_gpus, max_gpus, min_endpoint)
        if in_band:  # only the endpoint is short: the proposal, fitted, if it keeps the recovery
            raised = max(proposed, min_endpoint)
            fitted = proportional_clamp_single(raised, g, min_gpus, max_gpus, min_endpoint)
            if reconciled <= fitted <= raised:
                return fitted, None if fitted == raised else RECONCILE
        return reconciled, RECONCILE
    if min_gpus >= 0 and total <= min_gpus and proposed < current:
        return current, HOLD
    if max_gpus >= 0 and total >= max_gpus and proposed > current:
        return current, HOLD
    final = proportional_clamp_single(proposed, g, min_gpus, max_gpus, min_endpoint)
    if final == current != proposed or not _between(current, proposed, final):
        return current, HOLD  # (the first: a budget not a whole number of replicas' GPUs)
    return final, None


def _directions(cp: int, cd: int, pp: int, pd: int) -> tuple[bool, bool, bool]:
    """(any scale-down, any scale-up, an opposing rebalance) of a pair proposal."""
    downs, ups = (pp < cp, pd < cd), (pp > cp, pd > cd)
    return any(downs), any(ups), (downs[0] and ups[1]) or (ups[0] and downs[1])


def _move(current_p: int, current_d: int, proposed_p: int, proposed_d: int) -> tuple[int, ...]:
    """A pair move's four counts, checked (each a count >= 0)."""
    named = (
        ("current_p", current_p),
        ("current_d", current_d),
        ("proposed_p", proposed_p),
        ("proposed_d", proposed_d),
    )
    for name, value in named:
        check_count(name, value, 0)
    return tuple(int(value) for _, value in named)


def _endpoints_met(cp: int, cd: int, p_min: int, d_min: int) -> bool:
    return cp >= p_min and cd >= d_min


def guard_disagg_scaling_budget(
    current_p: int,
    current_d: int,
    proposed_p: int,
    proposed_d: int,
    p_gpu: int | None,
    d_gpu: int | None,
    min_gpus: int,
    max_gpus: int,
    prefill_min_endpoint: int,
    decode_min_endpoint: int,
) -> tuple[int, int, BudgetReason | None]:
    """Apply the band to a disagg load action without reversing a direction.

    A current pair out of band is reconciled from itself (``gpu_budget_reconcile``: endpoints
    first, then :func:`proportional_clamp_pair`, which may take the GPUs from the other role).
    One in band but below a minimum endpoint takes the proposal raised to the minimum endpoints
    (no reason: the budget does not bind), or if that is out of band the proposal clamped into
    it (``gpu_budget_reconcile``) — unless either leaves a role below what reconciling from the
    pair gives: then that. At/below the floor, down/down or down/hold is held; at a
    full budget a scale-up passes only as an opposing rebalance (one role down, the other up)
    fitted with both legs moving (:func:`fit_directional_budget_pair`), never by inventing a
    donor. Otherwise the proposal is clamped, and held if that would reverse a direction.

    >>> guard_disagg_scaling_budget(28, 36, 27, 36, 1, 1, 64, 64, 1, 1)
    (28, 36, 'gpu_budget_guard_hold')
    >>> guard_disagg_scaling_budget(27, 37, 26, 38, 1, 1, 64, 64, 1, 1)
    (26, 38, None)
    >>> guard_disagg_scaling_budget(28, 36, 29, 37, 1, 1, 64, 64, 1, 1)
    (28, 36, 'gpu_budget_guard_hold')
    >>> guard_disagg_scaling_budget(24, 40, 23, 39, 1, 1, 64, 64, 30, 8)  # prefill below 30
    (30, 34, 'gpu_budget_reconcile')
    >>> guard_disagg_scaling_budget(0, 2, 0, 3, 1, 1, -1, 16, 1, 1)  # prefill at 0: both fit
    (1, 3, None)
    """
    cp, cd, pp, pd = _move(current_p, current_d, proposed_p, proposed_d)
    p_min, d_min = int(prefill_min_endpoint), int(decode_min_endpoint)
    pg, dg = _gpus("p_gpu", p_gpu), _gpus("d_gpu", d_gpu)
    if pg is None or dg is None or (min_gpus < 0 and max_gpus < 0):
        return pp, pd, None
    band = (min_gpus, max_gpus)
    tolerance = _tolerance(*band, pg, dg)
    total = cp * pg + cd * dg
    in_band = _in_band(total, *band, tolerance)
    if not _endpoints_met(cp, cd, p_min, d_min) or not in_band:
        new_p, new_d = proportional_clamp_pair(
            max(cp, p_min), max(cd, d_min), pg, dg, *band, p_min, d_min
        )
        if in_band:  # only an endpoint is short: the proposal, fitted, if it keeps the recovery
            raised = (max(pp, p_min), max(pd, d_min))
            fit_p, fit_d = proportional_clamp_pair(*raised, pg, dg, *band, p_min, d_min)
            if (
                new_p <= fit_p <= raised[0]
                and new_d <= fit_d <= raised[1]
                and _in_band(fit_p * pg + fit_d * dg, *band, tolerance)
            ):
                return fit_p, fit_d, None if (fit_p, fit_d) == raised else RECONCILE
        return new_p, new_d, RECONCILE
    any_down, any_up, opposing = _directions(cp, cd, pp, pd)
    at_floor = min_gpus >= 0 and total <= min_gpus
    at_ceiling = max_gpus >= 0 and total >= max_gpus
    if at_floor and any_down and not any_up:
        return cp, cd, HOLD
    if (at_floor and opposing) or (at_ceiling and any_up):
        if not opposing:
            return cp, cd, HOLD
        fit = fit_directional_budget_pair(cp, cd, pp, pd, pg, dg, *band, p_min, d_min)
        return (cp, cd, HOLD) if fit == (cp, cd) else (*fit, None)
    new_p, new_d = proportional_clamp_pair(pp, pd, pg, dg, *band, p_min, d_min)
    if not (_between(cp, pp, new_p) and _between(cd, pd, new_d)) or not _in_band(
        new_p * pg + new_d * dg, *band, _tolerance(*band, pg, dg)
    ):
        return cp, cd, HOLD
    return new_p, new_d, None


def fit_directional_budget_pair(
    current_p: int,
    current_d: int,
    proposed_p: int,
    proposed_d: int,
    p_gpu: int | None,
    d_gpu: int | None,
    min_gpus: int,
    max_gpus: int,
    prefill_min_endpoint: int,
    decode_min_endpoint: int,
) -> tuple[int, int]:
    """The in-band pair closest (L1) to the proposal with each role between its current and
    proposed count (and at least its minimum endpoint); ties go to the least proportional skew
    between the two roles' progress, then the most progress. In an opposing rebalance both legs
    move or neither does. Nothing fits → the current pair.

    >>> fit_directional_budget_pair(24, 40, 32, 48, 1, 1, 64, 64, 1, 1)
    (24, 40)
    >>> fit_directional_budget_pair(24, 40, 23, 48, 1, 1, 64, 64, 1, 1)  # funded part only
    (23, 41)
    >>> fit_directional_budget_pair(16, 16, 15, 24, 2, 1, 48, 48, 1, 1)
    (15, 18)
    >>> fit_directional_budget_pair(24, 36, 32, 44, 1, 1, -1, 64, 1, 1)  # headroom shared
    (26, 38)
    """
    cp, cd, pp, pd = _move(current_p, current_d, proposed_p, proposed_d)
    p_min, d_min = int(prefill_min_endpoint), int(decode_min_endpoint)
    pg, dg = _gpus("p_gpu", p_gpu), _gpus("d_gpu", d_gpu)
    if pg is None or dg is None:
        return pp, pd
    tolerance = _tolerance(min_gpus, max_gpus, pg, dg)
    floor = min_gpus - tolerance if min_gpus >= 0 else None
    if pp >= p_min and pd >= d_min and _in_band(pp * pg + pd * dg, min_gpus, max_gpus, tolerance):
        return pp, pd
    _, _, opposing = _directions(cp, cd, pp, pd)
    band = _Band(min_gpus, max_gpus, floor)
    # Each role's range: between current and proposed, at least its minimum endpoint, and
    # (so an extreme proposal cannot blow up the walk) within what the band leaves it.
    prefill = _Leg(max(min(cp, pp), p_min), max(cp, pp), cp, pp, pg)
    decode = _Leg(max(min(cd, pd), d_min), max(cd, pd), cd, pd, dg)
    for mine, other in ((prefill, decode), (decode, prefill)):
        mine.high = band.counts(mine.low, mine.high, other.low * other.unit, mine.unit)[1]
        mine.low = band.counts(mine.low, mine.high, other.high * other.unit, mine.unit)[0]
    # Walk the shorter range; for each value the other role's best count is the point of its
    # feasible interval nearest its proposal (the only one that can minimise the distance).
    walk_prefill = prefill.high - prefill.low <= decode.high - decode.low
    outer, inner = (prefill, decode) if walk_prefill else (decode, prefill)
    best: tuple[tuple[int, ...], tuple[int, int]] | None = None
    for o in range(outer.low, outer.high + 1):
        low, high = band.counts(inner.low, inner.high, o * outer.unit, inner.unit)
        if opposing:  # both legs move or neither does
            low, high = inner.moving_with(o != outer.current, low, high)
        if low > high:
            continue
        i = min(max(inner.proposed, low), high)
        p, d = (o, i) if walk_prefill else (i, o)
        if not _in_band(p * pg + d * dg, min_gpus, max_gpus, tolerance):
            continue
        score = _fit_score(p, d, cp, cd, pp, pd)
        if best is None or score < best[0]:
            best = (score, (p, d))
    return (cp, cd) if best is None else best[1]


@dataclass(frozen=True)
class _Band:
    """A GPU band for one role's count next to the other's GPUs (``floor``: the lower bound
    less the tolerance, ``None`` without one)."""

    min_gpus: int
    max_gpus: int
    floor: int | None

    def counts(self, low: int, high: int, fixed_cost: int, unit: int) -> tuple[int, int]:
        """``[low, high]`` narrowed to the counts of ``unit`` GPUs that keep a pair with
        ``fixed_cost`` GPUs besides within the band."""
        if self.max_gpus >= 0:
            high = min(high, (self.max_gpus - fixed_cost) // unit)
        if self.floor is not None:
            low = max(low, _ceil_div(self.floor - fixed_cost, unit))
        return low, high


@dataclass
class _Leg:
    """One role in a directional fit: its feasible range, current and proposed count, and GPUs
    per replica."""

    low: int
    high: int
    current: int
    proposed: int
    unit: int

    def moving_with(self, partner_moves: bool, low: int, high: int) -> tuple[int, int]:
        """``[low, high]`` narrowed so this leg moves toward its proposal exactly when its
        partner moves (an opposing rebalance)."""
        if not partner_moves:
            return max(low, self.current), min(high, self.current)
        if self.proposed > self.current:
            return max(low, self.current + 1), high
        return low, min(high, self.current - 1)


def _fit_score(p: int, d: int, cp: int, cd: int, pp: int, pd: int) -> tuple[int, ...]:
    """Ranks a fitted pair: the L1 distance to the proposal, then the skew between the two
    roles' progress, then the most progress (then the counts, for a total order)."""
    moved_p, moved_d = abs(p - cp), abs(d - cd)
    return (
        abs(pp - p) + abs(pd - d),
        abs(moved_p * abs(pd - cd) - moved_d * abs(pp - cp)),
        -(moved_p + moved_d),
        p,
        d,
    )


def fit_throughput_single(
    current: int | None,
    proposed: int,
    gpus: int | None,
    min_gpus: int,
    max_gpus: int,
    min_endpoint: int,
) -> tuple[int, BudgetReason | None]:
    """A throughput target (already step-capped and floored at ``min_endpoint``) into the band.

    From a current count in band: :func:`guard_single_scaling_budget`. From a count out of band
    or below ``min_endpoint`` (endpoint recovery, or nothing known yet): the proposal itself is
    clamped (:func:`proportional_clamp_single`), so recovery may exceed the step cap. For
    throughput lower bounds pass ``min_gpus=-1``: the floor holds load scale-downs, it never
    inflates a bound (§16.5).

    >>> fit_throughput_single(64, 72, 1, 64, 64, 1), fit_throughput_single(64, 56, 1, -1, 64, 1)
    ((64, 'gpu_budget_guard_hold'), (56, None))
    >>> fit_throughput_single(1, 30, 1, -1, 64, 30)
    (30, None)
    """
    g = _gpus("gpus", gpus)
    tolerance = _tolerance(min_gpus, max_gpus, g or 0)
    if (
        current is None
        or current < min_endpoint
        or (g is not None and not _in_band(current * g, min_gpus, max_gpus, tolerance))
    ):
        return proportional_clamp_single(proposed, g, min_gpus, max_gpus, min_endpoint), None
    return guard_single_scaling_budget(current, proposed, g, min_gpus, max_gpus, min_endpoint)


def fit_throughput_pair(
    current: tuple[int, int] | None,
    proposed: tuple[int, int],
    p_gpu: int | None,
    d_gpu: int | None,
    min_gpus: int,
    max_gpus: int,
    prefill_min_endpoint: int,
    decode_min_endpoint: int,
) -> tuple[int, int, BudgetReason | None]:
    """A disagg throughput target (step-capped, floored at the endpoints) into the band.

    From a current pair in band: down/down or down/hold at the floor is held; otherwise
    :func:`fit_directional_budget_pair` (only the funded part of a move; held when nothing is).
    From a pair out of band or below a minimum endpoint: :func:`proportional_clamp_pair` of the
    proposal — endpoint recovery may pick a donor and exceed the step cap (§8.2). For lower
    bounds pass ``min_gpus=-1`` (see :func:`fit_throughput_single`).

    >>> fit_throughput_pair((24, 40), (32, 48), 1, 1, 64, 64, 1, 1)
    (24, 40, 'gpu_budget_guard_hold')
    >>> fit_throughput_pair((24, 36), (32, 36), 1, 1, -1, 64, 1, 1)
    (28, 36, None)
    >>> fit_throughput_pair((24, 40), (30, 48), 1, 1, 64, 64, 30, 8)  # prefill below 30
    (30, 34, None)
    """
    pp, pd = proposed
    pg, dg = _gpus("p_gpu", p_gpu), _gpus("d_gpu", d_gpu)
    if pg is None or dg is None or (min_gpus < 0 and max_gpus < 0):
        return pp, pd, None
    p_min, d_min = prefill_min_endpoint, decode_min_endpoint
    tolerance = _tolerance(min_gpus, max_gpus, pg, dg)
    if (
        current is None
        or not _endpoints_met(*current, p_min, d_min)
        or not _in_band(current[0] * pg + current[1] * dg, min_gpus, max_gpus, tolerance)
    ):
        return (*proportional_clamp_pair(pp, pd, pg, dg, min_gpus, max_gpus, p_min, d_min), None)
    cp, cd = current
    any_down, any_up, _ = _directions(cp, cd, pp, pd)
    if min_gpus >= 0 and cp * pg + cd * dg <= min_gpus and any_down and not any_up:
        return cp, cd, HOLD
    fit = fit_directional_budget_pair(cp, cd, pp, pd, pg, dg, min_gpus, max_gpus, p_min, d_min)
    if fit == (cp, cd) and (pp, pd) != (cp, cd):
        return cp, cd, HOLD
    return (*fit, None)
