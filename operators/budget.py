"""GPU budget clamps of replica targets (reference spec §8.1, with the §16.1a erratum).

``max_gpu_budget < 0`` disables the budget; an unknown per-replica GPU count (``None``) also
leaves targets unclamped, because a budget in GPUs cannot be turned into replicas without it.
All arithmetic is on integers, so a clamp is exact (no float rounding at the boundaries).
"""

from __future__ import annotations

from numbers import Integral


def check_count(name: str, value: int, minimum: int | None) -> None:
    """Refuse a count that is not an integer (``bool`` included) or is below ``minimum``.

    >>> check_count("replicas", 3, 0)
    >>> check_count("replicas", 2.5, 0)
    Traceback (most recent call last):
    ...
    ValueError: replicas must be an integer, got 2.5
    """
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value!r}")


def budget_clamp_single(
    desired: int, gpus_per_replica: int | None, max_gpu_budget: int, min_endpoint: int
) -> int:
    """Fit one component's replicas under the GPU budget.

    Kept if ``desired * gpus <= budget``; 0 if even ``min_endpoint`` replicas do not fit
    (infeasible budget); else ``max(min_endpoint, budget // gpus)``.

    >>> budget_clamp_single(10, 2, 8, 1), budget_clamp_single(3, 2, 8, 1)
    (4, 3)
    >>> budget_clamp_single(3, 4, 6, 2)  # 2 replicas x 4 GPUs > 6: infeasible
    0
    >>> budget_clamp_single(30, 4, -1, 1), budget_clamp_single(30, None, 8, 1)
    (30, 30)
    """
    check_count("desired", desired, 0)
    check_count("min_endpoint", min_endpoint, 0)
    check_count("max_gpu_budget", max_gpu_budget, None)
    desired, max_gpu_budget, min_endpoint = int(desired), int(max_gpu_budget), int(min_endpoint)
    if max_gpu_budget < 0 or gpus_per_replica is None:
        return desired
    check_count("gpus_per_replica", gpus_per_replica, 1)
    gpus_per_replica = int(gpus_per_replica)
    if desired * gpus_per_replica <= max_gpu_budget:
        return desired
    if max_gpu_budget < min_endpoint * gpus_per_replica:
        return 0
    return max(min_endpoint, max_gpu_budget // gpus_per_replica)


def apply_single_budget(
    desired: int, gpus_per_replica: int | None, max_gpu_budget: int, min_endpoint: int
) -> int:
    """Raise to ``min_endpoint``, then :func:`budget_clamp_single`.

    >>> apply_single_budget(0, 1, 8, 2), apply_single_budget(9, 1, 8, 2)
    (2, 8)
    """
    check_count("desired", desired, 0)
    check_count("min_endpoint", min_endpoint, 0)
    return budget_clamp_single(
        max(desired, min_endpoint), gpus_per_replica, max_gpu_budget, min_endpoint
    )


def apply_global_budget(
    num_prefill: int,
    num_decode: int,
    prefill_gpus: int | None,
    decode_gpus: int | None,
    max_gpu_budget: int,
    prefill_min_endpoint: int,
    decode_min_endpoint: int,
) -> tuple[int, int]:
    """Fit a (prefill, decode) pair under one GPU budget.

    Kept if the pair fits; ``(0, 0)`` if the minimum endpoints alone do not fit; otherwise
    prefill is scaled by ``budget / total`` (floored, at most what leaves room for the decode
    minimum, at least its own minimum) and decode gets the rest (floored, at least its minimum).
    Decode may GROW here: ``(10, 1)`` at 8 and 1 GPUs under 20 becomes ``(2, 4)`` (§16.1a).

    >>> apply_global_budget(10, 1, 8, 1, 20, 1, 1)
    (2, 4)
    >>> apply_global_budget(10, 10, 1, 1, 5, 2, 1), apply_global_budget(5, 5, 1, 1, 1, 1, 1)
    ((2, 3), (0, 0))
    """
    check_count("num_prefill", num_prefill, 0)
    check_count("num_decode", num_decode, 0)
    check_count("prefill_min_endpoint", prefill_min_endpoint, 0)
    check_count("decode_min_endpoint", decode_min_endpoint, 0)
    check_count("max_gpu_budget", max_gpu_budget, None)
    num_prefill, num_decode, budget = int(num_prefill), int(num_decode), int(max_gpu_budget)
    p_min, d_min = int(prefill_min_endpoint), int(decode_min_endpoint)
    if budget < 0 or prefill_gpus is None or decode_gpus is None:
        return num_prefill, num_decode
    check_count("prefill_gpus", prefill_gpus, 1)
    check_count("decode_gpus", decode_gpus, 1)
    p_gpus, d_gpus = int(prefill_gpus), int(decode_gpus)
    total = num_prefill * p_gpus + num_decode * d_gpus
    if total <= budget:
        return num_prefill, num_decode
    if budget < p_min * p_gpus + d_min * d_gpus:
        return 0, 0
    max_prefill = (budget - d_min * d_gpus) // p_gpus
    scaled_prefill = num_prefill * budget // total  # floor(p * budget / total), exact
    prefill = max(p_min, min(max_prefill, scaled_prefill))
    decode = max(d_min, (budget - prefill * p_gpus) // d_gpus)
    return prefill, decode
