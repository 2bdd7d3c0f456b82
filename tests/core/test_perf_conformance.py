"""One conformance suite run over every perf model (as river's estimator checks do).

Checked for each model: pickling before and after learning, ``clone()``, inputs not mutated,
determinism, and behaviour on empty and non-finite input. The decision on bad input: it is
rejected with ``ValueError`` naming the problem and leaves the model unchanged (never stored,
never silently repaired). Exceptions: a NaN KV hit rate means "unknown" (no discount) and a bad
accept length means 1.0, as the reference specifies.
"""

from __future__ import annotations

import copy
import math
import pickle
import random
from collections.abc import Callable

import pytest

from operators.perf import AggPerfModel, DecodePerfModel, FpmRegressor, PrefillPerfModel
from schemas import ForwardPassMetrics, ScheduledRequestMetrics

MODELS: list[type[FpmRegressor]] = [PrefillPerfModel, DecodePerfModel, AggPerfModel]


def random_fpm(rng: random.Random, heartbeat_every: int = 7, i: int = 0) -> ForwardPassMetrics:
    """A plausible mixed forward pass; every ``heartbeat_every``-th one is an idle heartbeat."""
    p, n_p = rng.randint(0, 8192), rng.randint(0, 8)
    n_d, kv = rng.randint(0, 128), rng.randint(0, 400_000)
    wall = 0.0 if i % heartbeat_every == 0 else 0.004 + 2e-5 * p + 1e-4 * n_d + 4e-8 * kv
    return ForwardPassMetrics(
        wall_time=wall + (rng.random() * 1e-3 if wall else 0.0),
        scheduled_requests=ScheduledRequestMetrics(
            num_prefill_requests=n_p if p else 0,
            sum_prefill_tokens=p,
            num_decode_requests=n_d,
            sum_decode_kv_tokens=kv if n_d else 0,
        ),
    )


def fpms(seed: int, count: int = 120) -> list[ForwardPassMetrics]:
    rng = random.Random(seed)
    return [random_fpm(rng, i=i) for i in range(count)]


def features(model: FpmRegressor, fpm: ForwardPassMetrics) -> dict[str, float]:
    s = fpm.scheduled_requests.model_dump()
    return {name: float(s[name]) for name in model.feature_names}


def trained(cls: type[FpmRegressor], seed: int = 0) -> FpmRegressor:
    model = cls(max_num_fpm_samples=32)
    model.load_benchmark_fpms(fpms(seed))
    return model


def probes(model: FpmRegressor) -> list[dict[str, float]]:
    rng = random.Random(99)
    return [features(model, random_fpm(rng, i=i + 1)) for i in range(10)]


def answers(model: FpmRegressor) -> list[object]:
    """Everything a caller can read from a model, for equality checks."""
    out: list[object] = [model.predict_one(x) for x in probes(model)]
    out += [model.num_observations, model.is_ready, model.coefficients]
    if isinstance(model, PrefillPerfModel):
        out += [
            model.avg_isl,
            model.avg_num_prefill,
            model.estimate_next_ttft(3000, 2048, 0.3),
            model.find_best_engine_prefill_rps(500, 3000, 2048),
        ]
    elif isinstance(model, DecodePerfModel):
        out += [
            model.avg_decode_length,
            model.avg_num_decode,
            model.max_observed_kv,
            model.estimate_next_itl(50_000, 1000),
            model.find_best_engine_decode_rps(50, 3000, 300, 500_000, 256),
        ]
    elif isinstance(model, AggPerfModel):
        out += [
            model.avg_isl,
            model.avg_prefill_tokens,
            model.avg_decode_length,
            model.avg_num_prefill,
            model.avg_num_decode,
            model.estimate_next_ttft(3000, 2048, 50_000, 0.3),
            model.estimate_next_itl(50_000, 1000),
            model.find_best_engine_agg_rps(3000, 300, 2048, 2000, 100, 500_000, 256, 0.2),
        ]
    return out


@pytest.fixture(params=MODELS, ids=lambda cls: cls.__name__)
def model_cls(request: pytest.FixtureRequest) -> type[FpmRegressor]:
    cls: type[FpmRegressor] = request.param
    return cls


def test_trained_models_are_ready(model_cls: type[FpmRegressor]) -> None:
    """Precondition of the checks below: the synthetic stream trains every model."""
    model = trained(model_cls)
    assert model.is_ready and model.num_observations == 32
    assert all(model.predict_one(x) > 0 for x in probes(model))


def test_pickle_before_learning(model_cls: type[FpmRegressor]) -> None:
    fresh = model_cls(max_num_fpm_samples=32)
    restored = pickle.loads(pickle.dumps(fresh))
    for model in (fresh, restored):
        model.load_benchmark_fpms(fpms(1))
    assert answers(restored) == answers(fresh)


def test_pickle_after_learning(model_cls: type[FpmRegressor]) -> None:
    model = trained(model_cls)
    before = answers(model)
    restored = pickle.loads(pickle.dumps(model))
    assert answers(restored) == before
    more = fpms(2, count=40)
    model.load_benchmark_fpms(more)
    restored.load_benchmark_fpms(more)
    assert answers(restored) == answers(model)


def test_pickle_keeps_an_unrefitted_change(model_cls: type[FpmRegressor]) -> None:
    """Pickled between a new sample and the lazy refit: the restored model refits the same."""
    model = trained(model_cls)
    answers(model)
    model.add_observation(fpms(3, count=2)[1])
    restored = pickle.loads(pickle.dumps(model))
    assert answers(restored) == answers(model)


def test_clone_is_unfitted_with_the_same_parameters(model_cls: type[FpmRegressor]) -> None:
    model = model_cls(max_num_fpm_samples=17, min_observations=3, bucket_count=9, suspect_factor=3)
    model.load_benchmark_fpms(fpms(4))
    twin = model.clone()
    assert type(twin) is model_cls
    assert twin._get_params() == {
        "max_num_fpm_samples": 17,
        "min_observations": 3,
        "bucket_count": 9,
        "suspect_factor": 3,
    }
    assert twin.num_observations == 0 and not twin.is_ready and twin.coefficients is None
    assert answers(twin) == answers(
        model_cls(max_num_fpm_samples=17, min_observations=3, bucket_count=9)
    )
    twin.load_benchmark_fpms(fpms(5))
    assert model.num_observations == 17  # the original does not share state with its clone


def test_inputs_are_not_mutated(model_cls: type[FpmRegressor]) -> None:
    model = trained(model_cls)
    stream = fpms(6, count=30)
    stream_copy = copy.deepcopy(stream)
    model.load_benchmark_fpms(stream)
    assert stream == stream_copy
    x = probes(model)[0]
    x["an_extra_key"] = 1.0  # ignored, and left in place
    x_copy = dict(x)
    model.learn_one(x, 0.05)
    model.predict_one(x)
    assert x == x_copy


def test_determinism(model_cls: type[FpmRegressor]) -> None:
    a, b = trained(model_cls, seed=8), trained(model_cls, seed=8)
    assert a.coefficients == b.coefficients  # bit for bit
    assert answers(a) == answers(b)
    # learn_one and add_observation are the same path for the regression
    c = model_cls(max_num_fpm_samples=32)
    for fpm in fpms(8):
        if fpm.wall_time > 0:
            c.learn_one(features(c, fpm), fpm.wall_time)
    assert c.coefficients == a.coefficients


def test_empty_input(model_cls: type[FpmRegressor]) -> None:
    model = model_cls()
    assert model.num_observations == 0 and not model.has_sufficient_data()
    model.load_benchmark_fpms([])
    assert model.num_observations == 0
    with pytest.raises(ValueError, match="missing feature"):
        model.learn_one({}, 0.01)
    with pytest.raises(ValueError, match="missing feature"):
        model.predict_one({})
    assert model.num_observations == 0
    x = {name: 1.0 for name in model.feature_names}
    assert model.predict_one(x) == 0.0  # not ready
    assert not model.is_ready and model.coefficients is None
    assert model.rejection_reason is not None


def _bad_values() -> list[float]:
    return [math.nan, math.inf, -math.inf]


@pytest.mark.parametrize("bad", _bad_values(), ids=["nan", "inf", "-inf"])
def test_non_finite_input_is_rejected_and_nothing_is_stored(
    model_cls: type[FpmRegressor], bad: float
) -> None:
    model = trained(model_cls)
    before = answers(model)
    x = {name: 100.0 for name in model.feature_names}
    for name in model.feature_names:
        with pytest.raises(ValueError, match=name):
            model.learn_one({**x, name: bad}, 0.01)
        with pytest.raises(ValueError, match=name):
            model.predict_one({**x, name: bad})
    with pytest.raises(ValueError, match="wall time"):
        model.learn_one(x, bad)
    assert answers(model) == before


@pytest.mark.parametrize("y", [0.0, -0.01])
def test_non_positive_wall_time_is_rejected(model_cls: type[FpmRegressor], y: float) -> None:
    model = model_cls()
    with pytest.raises(ValueError, match="wall time"):
        model.learn_one({name: 1.0 for name in model.feature_names}, y)
    assert model.num_observations == 0


def test_negative_feature_and_wrong_types_are_rejected(model_cls: type[FpmRegressor]) -> None:
    model = model_cls()
    x = {name: 1.0 for name in model.feature_names}
    with pytest.raises(ValueError, match=">= 0"):
        model.learn_one({**x, model.feature_names[-1]: -5.0}, 0.01)
    with pytest.raises(ValueError, match="finite number"):
        model.learn_one({**x, model.feature_names[0]: "12"}, 0.01)  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="dict"):
        model.learn_one([1.0, 2.0], 0.01)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="ForwardPassMetrics"):
        model.add_observation({"wall_time": 0.01})  # type: ignore[arg-type]
    assert model.num_observations == 0


def _estimate_calls(model: FpmRegressor) -> list[Callable[[float], object]]:
    if isinstance(model, PrefillPerfModel):
        return [
            lambda v: model.estimate_next_ttft(v, 2048),
            lambda v: model.estimate_next_ttft(100, v),
            lambda v: model.find_best_engine_prefill_rps(500, v),
        ]
    if isinstance(model, DecodePerfModel):
        return [
            lambda v: model.estimate_next_itl(v, 0),
            lambda v: model.find_best_engine_decode_rps(50, v, 100),
            lambda v: model.find_best_engine_decode_rps(v, 1000, 100),
        ]
    assert isinstance(model, AggPerfModel)
    return [
        lambda v: model.estimate_next_ttft(100, 2048, v),
        lambda v: model.estimate_next_itl(0, v),
        lambda v: model.find_best_engine_agg_rps(v, 100, 2048, 500, 50),
    ]


@pytest.mark.parametrize("bad", _bad_values(), ids=["nan", "inf", "-inf"])
def test_non_finite_estimate_arguments_raise(model_cls: type[FpmRegressor], bad: float) -> None:
    model = trained(model_cls)
    for call in _estimate_calls(model):
        with pytest.raises(ValueError, match="finite"):
            call(bad)


@pytest.mark.parametrize(
    "params",
    [
        {"max_num_fpm_samples": 0},
        {"min_observations": 0},
        {"bucket_count": 0},
        {"bucket_count": 2.5},
        {"max_num_fpm_samples": True},
    ],
)
def test_invalid_parameters(model_cls: type[FpmRegressor], params: dict[str, object]) -> None:
    with pytest.raises(ValueError, match=next(iter(params))):
        model_cls(**params)  # type: ignore[arg-type]


def test_repr_names_the_parameters(model_cls: type[FpmRegressor]) -> None:
    text = repr(model_cls(max_num_fpm_samples=10))
    assert model_cls.__name__ in text and "max_num_fpm_samples" in text


def test_numpy_scalars_are_numbers(model_cls: type[FpmRegressor]) -> None:
    import numpy as np

    a, b = model_cls(min_observations=2), model_cls(min_observations=2)
    for k in (1, 2, 3):
        a.learn_one({name: float(1000 * k + i) for i, name in enumerate(a.feature_names)}, 0.01 * k)
        b.learn_one(
            {name: np.int64(1000 * k + i) for i, name in enumerate(b.feature_names)},
            np.float64(0.01 * k),
        )
    assert a.coefficients == b.coefficients
    x = {name: np.int32(500) for name in a.feature_names}
    assert a.predict_one(x) == a.predict_one({name: 500.0 for name in a.feature_names})
