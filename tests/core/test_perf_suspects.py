"""A forward pass far off the perf model waits for a second one before it is learned from.

One wrong forward pass within every dead-letter bound (a stall, a wall time in the wrong unit)
must not move the fit; a real change of the engine's speed, which repeats, must come through
whole; clean streams are untouched.
"""

from __future__ import annotations

import pickle
import random

from operators.perf import DecodePerfModel, PrefillPerfModel
from tests.core.test_perf_models import decode_fpm, prefill_fpm

TOKENS = (512, 1024, 2048, 4096, 8192)
FACTOR = 4.0  # the planner's default (PlannerConfig.perf_model_suspect_factor)


def wall(tokens: int, speed: float = 1.0) -> float:
    """Prefill wall time of ``tokens`` on an engine ``speed`` times slower than the first."""
    return speed * (2e-5 * tokens + 0.004)


def trained_prefill(samples: int = 64) -> PrefillPerfModel:
    """A full store of clean forward passes, and a fit made from it (as a tick makes)."""
    model = PrefillPerfModel(suspect_factor=FACTOR)
    for i in range(samples):
        tokens = TOKENS[i % len(TOKENS)]
        model.add_observation(prefill_fpm(tokens, wall(tokens)))
    assert model.coefficients is not None  # the tick's fit: what the next passes are screened by
    return model


def ttft_of_4096(model: PrefillPerfModel) -> float:
    return model.predict_one({"sum_prefill_tokens": 4096})


def test_one_stall_is_set_aside_and_leaves_the_fit_alone() -> None:
    model = trained_prefill()
    before = model.coefficients
    model.add_observation(prefill_fpm(512, 5.0))  # a 5 s stall on a 14 ms chunk
    assert len(model.suspects) == 1 and model.set_aside == 0
    assert model.coefficients == before
    for i in range(64):  # the next forward passes are clean: nobody confirms it
        tokens = TOKENS[i % len(TOKENS)]
        model.add_observation(prefill_fpm(tokens, wall(tokens)))
    assert model.set_aside == 1 and model.suspects == ()
    assert abs(ttft_of_4096(model) / wall(4096) - 1) < 1e-9


def test_without_the_screen_the_same_stall_would_have_moved_the_fit() -> None:
    # What the screen prevents: the stall learned as a sample (through river's learn_one, which
    # is not screened) leaves the planner without a prefill model until the store drops it.
    model = trained_prefill()
    model.learn_one({"sum_prefill_tokens": 512}, 5.0)
    assert model.coefficients is None  # the least squares slope went negative: no model at all
    assert model.rejection_reason is not None


def test_an_engine_that_became_slower_is_learned_whole() -> None:
    # Five times slower from now on (say a co-located job): every pass is a suspect for the old
    # fit, each second one confirms the first, and the model follows; nothing is set aside.
    model = trained_prefill()
    for i in range(128):
        tokens = TOKENS[i % len(TOKENS)]
        model.add_observation(prefill_fpm(tokens, wall(tokens, speed=5.0)))
        if i % 16 == 15:
            model.coefficients  # noqa: B018 - a tick refits (and renews the screen)
    assert model.set_aside == 0 and model.suspects == ()
    assert abs(ttft_of_4096(model) / wall(4096, speed=5.0) - 1) < 0.02


def test_suspects_on_opposite_sides_do_not_confirm_each_other() -> None:
    model = trained_prefill()
    before = model.coefficients
    model.add_observation(prefill_fpm(512, 5.0))  # far too slow
    model.add_observation(prefill_fpm(8192, 1e-4))  # far too fast
    assert sorted(s.slow for s in model.suspects) == [False, True]
    assert model.coefficients == before


def test_screening_waits_for_a_fit_from_half_the_store() -> None:
    # Early on the fit rests on a few samples; a pass far off it is learned at once.
    model = trained_prefill(samples=20)
    model.add_observation(prefill_fpm(512, 5.0))
    assert model.suspects == () and model.num_observations == 21


def test_screening_starts_once_the_store_is_half_full() -> None:
    # protects: a fit from half the store (32 of 64 samples) already screens, so a stall on a
    # young engine is held back instead of moving its fit; one sample fewer does not screen
    model = trained_prefill(samples=32)
    before = model.coefficients
    model.add_observation(prefill_fpm(512, 100 * wall(512)))
    assert len(model.suspects) == 1 and model.num_observations == 32
    assert model.coefficients == before
    early = trained_prefill(samples=31)
    early.add_observation(prefill_fpm(512, 100 * wall(512)))
    assert early.suspects == () and early.num_observations == 32


def test_noisy_clean_stream_is_never_screened_out() -> None:
    # ±30 % noise on every pass (far more than a healthy engine shows) stays inside the factor.
    rng = random.Random(7)
    model = DecodePerfModel(suspect_factor=FACTOR)
    for i in range(2000):
        n = rng.randint(1, 256)
        kv = n * rng.randint(200, 4000)
        model.add_observation(decode_fpm(n, kv, (1e-7 * kv + 0.008) * rng.uniform(0.7, 1.3)))
        if i % 50 == 49:
            model.coefficients  # noqa: B018 - a tick
    assert model.set_aside == 0 and model.suspects == ()


def test_suspects_survive_a_snapshot() -> None:
    model = trained_prefill()
    model.add_observation(prefill_fpm(512, 5.0))
    restored = pickle.loads(pickle.dumps(model))
    assert restored.suspects == model.suspects and len(restored.suspects) == 1
    restored.add_observation(prefill_fpm(1024, 6.0))  # confirms the held one
    assert restored.suspects == ()
    learned = [wall for _, wall in restored.samples.samples()]
    assert learned[-2:] == [5.0, 6.0]  # both, in order


def test_a_confirmed_pair_that_rejects_the_fit_does_not_switch_screening_off() -> None:
    # Two stalls confirm each other and are learned; the fit they leave is rejected (negative
    # slope). The screen keeps the last accepted fit, so the next lone stall is still held.
    model = trained_prefill()
    model.add_observation(prefill_fpm(512, 5.0))
    model.add_observation(prefill_fpm(1024, 6.0))
    assert model.coefficients is None  # the refit a tick makes is rejected
    model.add_observation(prefill_fpm(2048, 7.0))
    assert len(model.suspects) == 1


def test_models_learn_every_pass_unless_given_a_factor() -> None:
    # The reference behaviour is the models' default; the planner's config asks for the screen.
    model = PrefillPerfModel()
    for i in range(64):
        tokens = TOKENS[i % len(TOKENS)]
        model.add_observation(prefill_fpm(tokens, wall(tokens)))
    assert model.coefficients is not None
    model.add_observation(prefill_fpm(512, 5.0))
    assert model.suspects == () and model.coefficients is None
