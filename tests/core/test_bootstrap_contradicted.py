"""A bootstrap profile the engine's own forward passes contradict is dropped (ours, with
``suspect_factor``): a profile in the wrong unit or of another engine outvoted the live passes
for as long as the sample store kept it, and its outer buckets kept it for ever — a decode
profile with its ITL in ms read as seconds scaled a fleet up 123 times in 30 minutes on
passes a third of its SLA. The reference (no ``suspect_factor``) keeps what it loaded."""

from __future__ import annotations

import logging

import pytest

from operators.perf import PrefillPerfModel
from tests.core.test_perf_models import prefill_fpm

TOKENS = (512, 1024, 2048, 4096, 8192)


def wall(tokens: int) -> float:
    """The live engine's prefill wall time."""
    return 2e-5 * tokens + 0.004


def bootstrapped(factor: float | None, profile_wall) -> PrefillPerfModel:
    model = PrefillPerfModel(max_num_fpm_samples=50, suspect_factor=factor)
    model.load_benchmark_fpms(
        prefill_fpm(t, profile_wall(t)) for t in (256, 1536, 3072, 6144, 12288, 16384)
    )
    return model


def serve(model: PrefillPerfModel, passes: int = 40) -> None:
    """Live forward passes, with a tick (a refit) every eight."""
    for i in range(passes):
        tokens = TOKENS[i % len(TOKENS)]
        model.add_observation(prefill_fpm(tokens, wall(tokens)))
        if i % 8 == 7:
            model.coefficients  # noqa: B018 - a tick refits


@pytest.mark.parametrize(
    ("case", "profile_wall", "ratio"),
    [
        ("ms read as s", lambda t: 1000 * wall(t), 0.001),
        ("another engine, 5x faster", lambda t: wall(t) / 5, 5.0),
        ("no model of its own", lambda t: 0.5 - 1e-5 * t, None),  # falls with the prompt
    ],
)
def test_a_contradicted_bootstrap_is_dropped(case, profile_wall, ratio, caplog) -> None:
    model = bootstrapped(4.0, profile_wall)
    with caplog.at_level(logging.WARNING):
        serve(model)
    assert model.benchmark_samples == {}
    assert model.predict_one({"sum_prefill_tokens": 4096}) == pytest.approx(wall(4096), rel=1e-6)
    if ratio is None:
        assert model.bootstrap_contradicted is None
        assert "its samples alone fit no model" in caplog.text
    else:
        assert model.bootstrap_contradicted == pytest.approx(ratio, rel=1e-6)
        assert "forward passes take" in caplog.text


def test_the_reference_keeps_the_bootstrap() -> None:
    model = bootstrapped(None, lambda t: 1000 * wall(t))
    serve(model)
    assert model.benchmark_samples
    assert model.predict_one({"sum_prefill_tokens": 4096}) > 10 * wall(4096)


def test_a_bootstrap_within_the_factor_stays(caplog) -> None:
    model = bootstrapped(4.0, lambda t: 2.5 * wall(t))  # a slower profile, but this engine's
    with caplog.at_level(logging.WARNING):
        serve(model)
    assert model.benchmark_samples and model.bootstrap_contradicted is None
    assert "bootstrap" not in caplog.text
