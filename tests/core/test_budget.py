"""GPU budget clamps (reference spec §8.1, §16.6 ceiling cases, §16.1a erratum)."""

from __future__ import annotations

import itertools

import pytest

from operators.budget import apply_global_budget, apply_single_budget, budget_clamp_single

# -- single component --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("desired", "gpus", "budget", "min_endpoint", "expected"),
    [
        (3, 2, 8, 1, 3),  # 6 GPUs fit
        (4, 2, 8, 1, 4),  # exactly at the budget
        (5, 2, 8, 1, 4),  # floor(8 / 2)
        (10, 3, 8, 1, 2),  # floor(8 / 3)
        (10, 3, 8, 2, 2),
        (3, 4, 6, 2, 0),  # 2 × 4 > 6: infeasible → 0
        (1, 4, 3, 1, 0),  # even one replica does not fit
        (5, 1, 0, 0, 0),  # budget 0 with min 0: scale to zero
        (30, 4, -1, 1, 30),  # disabled
        (30, None, 8, 1, 30),  # unknown GPUs per replica → no clamping
    ],
)
def test_budget_clamp_single(
    desired: int, gpus: int | None, budget: int, min_endpoint: int, expected: int
) -> None:
    assert budget_clamp_single(desired, gpus, budget, min_endpoint) == expected


def test_apply_single_budget_raises_to_min_endpoint_first() -> None:
    assert apply_single_budget(0, 1, 8, 2) == 2
    assert budget_clamp_single(0, 1, 8, 2) == 0  # the bare clamp does not raise
    assert apply_single_budget(0, 4, 6, 2) == 0  # raised to 2 → 8 GPUs > 6 → infeasible
    assert apply_single_budget(9, 1, 8, 2) == 8
    assert apply_single_budget(1, None, 8, 3) == 3
    assert apply_single_budget(1, 2, -1, 3) == 3


def test_single_budget_invariants_on_a_grid() -> None:
    for desired, gpus, budget, min_ep in itertools.product(
        range(0, 12), range(1, 4), range(0, 20), range(0, 3)
    ):
        got = apply_single_budget(desired, gpus, budget, min_ep)
        wanted = max(desired, min_ep)
        if budget < min_ep * gpus:
            assert got == (wanted if wanted * gpus <= budget else 0)
            continue
        assert got * gpus <= budget
        assert min_ep <= got <= wanted
        assert got == wanted or (got + 1) * gpus > budget  # as many as fit, never fewer


# -- prefill/decode pair -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ((10, 1, 8, 1, 20, 1, 1), (2, 4)),  # §16.1a erratum: decode grows under §8.1
        ((3, 5, 1, 1, -1, 1, 1), (3, 5)),  # disabled
        ((10, 10, 1, 1, 5, 2, 1), (2, 3)),  # component-specific minimums
        ((5, 5, 1, 1, 4, 1, 1), (2, 2)),
        ((1, 1, 1, 2, 10, 1, 1), (1, 1)),  # fits
        ((2, 2, 1, 1, 4, 1, 1), (2, 2)),  # exactly at the budget
        ((5, 5, 1, 1, 1, 1, 1), (0, 0)),  # infeasible: minimums need 2 GPUs
        ((1, 2, 2, 2, 3, 1, 1), (0, 0)),  # infeasible: minimums need 4 GPUs
        ((7, 9, None, 1, 4, 1, 1), (7, 9)),  # unknown prefill GPUs → no clamping
        ((7, 9, 1, None, 4, 1, 1), (7, 9)),  # unknown decode GPUs → no clamping
        ((0, 9, 1, 1, 4, 0, 1), (0, 4)),  # prefill may scale to zero with min 0
        ((6, 6, 2, 1, 12, 1, 1), (4, 4)),  # scale 12/18 → p 4, d gets the remaining 4
        ((3, 1, 1, 1, 4, 1, 1), (3, 1)),  # §16.6 (3,1,1,1,4,4,1): at the ceiling, kept
    ],
)
def test_apply_global_budget(
    args: tuple[int, int, int | None, int | None, int, int, int], expected: tuple[int, int]
) -> None:
    assert apply_global_budget(*args) == expected


def test_global_budget_invariants_on_a_grid() -> None:
    for p, d, pg, dg, budget, p_min, d_min in itertools.product(
        range(0, 9), range(0, 9), (1, 2, 4), (1, 3), range(0, 24, 3), (0, 1, 2), (1, 2)
    ):
        got_p, got_d = apply_global_budget(p, d, pg, dg, budget, p_min, d_min)
        if p * pg + d * dg <= budget:
            assert (got_p, got_d) == (p, d)
        elif budget < p_min * pg + d_min * dg:
            assert (got_p, got_d) == (0, 0)
        else:
            assert got_p * pg + got_d * dg <= budget
            assert got_p >= p_min and got_d >= d_min
            assert got_p <= max(p, p_min)
            # decode takes every GPU prefill leaves: one more decode replica would not fit
            assert (got_d + 1) * dg > budget - got_p * pg or got_d == d_min


@pytest.mark.parametrize(
    "call",
    [
        lambda: budget_clamp_single(-1, 1, 8, 1),
        lambda: budget_clamp_single(1, 0, 8, 1),
        lambda: budget_clamp_single(1, 1, 8, -1),
        lambda: budget_clamp_single(1, 1, 8.5, 1),
        lambda: apply_single_budget(True, 1, 8, 1),
        lambda: apply_global_budget(1, -2, 1, 1, 8, 1, 1),
        lambda: apply_global_budget(1, 1, 0, 1, 8, 1, 1),
        lambda: apply_global_budget(1, 1, 1, 1, 8, 1, -1),
    ],
)
def test_bad_arguments_raise_value_error(call: object) -> None:
    with pytest.raises(ValueError):
        call()  # type: ignore[operator]


def test_numpy_integers_are_accepted_and_plain_ints_returned() -> None:
    import numpy as np

    got = apply_global_budget(*(np.int64(v) for v in (10, 1, 8, 1, 20, 1, 1)))  # type: ignore[arg-type]
    assert got == (2, 4) and all(type(v) is int for v in got)
    single = apply_single_budget(np.int64(9), np.int64(1), np.int64(8), np.int64(2))  # type: ignore[arg-type]
    assert single == 8 and type(single) is int
