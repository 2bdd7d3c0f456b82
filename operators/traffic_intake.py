"""What the planner learns from traffic observations (reference spec §5.1, §5.5, §6.5, §7.1).

Two consumers:

* :class:`TrafficForecaster` feeds the request count, ISL and OSL of each throughput window to
  one predictor each and forecasts the next window. After live traffic has been seen, an idle
  window (``num_req == 0``) pushes the last observed ISL/OSL instead of 0, so time-based
  predictors keep one point per interval without learning zero lengths; idle windows before
  any traffic seed nothing.
* :class:`RuntimeMetadata` keeps the last observed KV hit rate and speculative-decoding accept
  length (last-value semantics): a missing or non-finite observation keeps the previous value;
  at cold start there is no KV discount and the accept length is 1.0.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from operators.predictors import Predictor, build_predictor
from schemas import PlannerConfig, TrafficObservation

SCORED_WARM_UP_WINDOWS = 192
"""Windows of a warm-up the selector scores: eight half-lives of its loss memory (24
windows), four of its margins' window (48)."""


@dataclass(frozen=True)
class LoadForecast:
    """Forecast of the next throughput window: request count (not a rate), mean ISL and OSL.

    >>> forecast = LoadForecast(num_req=120.0, isl=3000.0, osl=150.0)
    >>> forecast.num_req / 60  # demand over a 60 s window, in requests per second
    2.0
    """

    num_req: float
    isl: float
    osl: float


def _finite_or_none(value: float | None) -> float | None:
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None


@dataclass
class TrafficForecaster:
    """Three predictors (num_req, isl, osl) behind the common intake rules.

    >>> f = TrafficForecaster.from_config(PlannerConfig(load_predictor="constant"))
    >>> for num_req, isl, osl in ((0, 0, 0), (10, 512, 128), (0, 0, 0)):
    ...     f.observe(TrafficObservation(duration_s=60, num_req=num_req, isl=isl, osl=osl))
    >>> f.num_req.values, f.isl.values, f.osl.values
    ([10.0, 0.0], [512.0, 512.0], [128.0, 128.0])
    >>> f.forecast()
    LoadForecast(num_req=0.0, isl=512.0, osl=128.0)
    """

    num_req: Predictor
    isl: Predictor
    osl: Predictor
    live_traffic_seen: bool = False
    last_isl: float = 0.0
    last_osl: float = 0.0
    last_shape: TrafficObservation | None = None
    """The latest observation that carried requests (its length quantiles size capacity)."""
    length_floor_windows: int | None = PlannerConfig.model_fields[
        "length_forecast_floor_windows"
    ].default
    """``PlannerConfig.length_forecast_floor_windows`` (:meth:`forecast`)."""

    @classmethod
    def from_config(cls, config: PlannerConfig) -> TrafficForecaster:
        """Fresh predictors of the configured kind."""
        return cls(
            build_predictor(config),
            build_predictor(config),
            build_predictor(config),
            length_floor_windows=config.length_forecast_floor_windows,
        )

    def observe(self, obs: TrafficObservation) -> None:
        """Feed one window's count, ISL and OSL (with the idle carry-forward)."""
        num_req = _finite_or_none(obs.num_req) or 0.0
        if num_req > 0:
            self.live_traffic_seen = True
            self.last_isl = _finite_or_none(obs.isl) or 0.0
            self.last_osl = _finite_or_none(obs.osl) or 0.0
            self.last_shape = obs
            self.num_req.learn_one(num_req)
            self.isl.learn_one(self.last_isl)
            self.osl.learn_one(self.last_osl)
        elif self.live_traffic_seen:
            self.num_req.learn_one(0.0)
            self.isl.learn_one(self.last_isl)
            self.osl.learn_one(self.last_osl)
        # Idle windows before any traffic seed nothing (the predictors would skip the zeros).

    def warm_up(self, observations: Iterable[TrafficObservation]) -> int:
        """Pre-train from historical windows (e.g. a trace), then skip leading idle again.

        Only the last :data:`SCORED_WARM_UP_WINDOWS` are scored (the selector weighs its
        options by them); the windows before only train the models. Scoring a window
        forecasts with every candidate: a week of 3-minute windows, all scored, took minutes
        of the first window's time, for weights that forget a window within a few dozen.

        Returns the number of windows fed. Warm-up never touches the runtime metadata.
        """
        history = list(observations)
        split = max(0, len(history) - SCORED_WARM_UP_WINDOWS)
        predictors = (self.num_req, self.isl, self.osl)
        for scored, part in ((False, history[:split]), (True, history[split:])):
            for predictor in predictors:
                predictor.scored = scored
            for obs in part:
                self.observe(obs)
        for predictor in predictors:
            predictor.reset_idle_skip()
        self.live_traffic_seen = False
        return len(history)

    def forecast(self) -> LoadForecast:
        """One-step-ahead forecasts (may raise if a predictor fails; callers handle it).

        When requests are forecast, a length forecast is at least the shortest of the last
        ``length_floor_windows`` observed (ours; ``None``: the reference): a trend model
        overshooting a fall in ISL (8000 to 1000) forecast 16 tokens, then 0 — sizing prefill
        for 16-token prompts (10 replicas to 1), then nothing (the tick held as if the model
        were not ready). Overshooting a rise only costs GPUs, and is left.

        >>> f = TrafficForecaster.from_config(PlannerConfig(load_predictor="constant"))
        >>> f.observe(TrafficObservation(duration_s=60, num_req=10, isl=512, osl=128))
        >>> f.isl.learn_one(0.0)  # as a clamped overshoot would forecast
        >>> f.forecast()
        LoadForecast(num_req=10.0, isl=512.0, osl=128.0)
        """
        num_req = float(self.num_req.forecast())
        isl, osl = float(self.isl.forecast()), float(self.osl.forecast())
        windows = self.length_floor_windows
        if num_req > 0 and windows is not None:
            isl = _floored(isl, self.isl.values[-windows:], self.last_isl)
            osl = _floored(osl, self.osl.values[-windows:], self.last_osl)
        return LoadForecast(num_req=num_req, isl=isl, osl=osl)


def _floored(forecast: float, lengths: list[float], last: float) -> float:
    """``forecast`` raised to the shortest positive one of ``lengths`` (``last`` if none)."""
    return max(forecast, min((value for value in lengths if value > 0), default=last))


@dataclass
class RuntimeMetadata:
    """Last observed KV hit rate and accept length (G3 last-value semantics, spec §5.5/§6.5).

    >>> meta = RuntimeMetadata()
    >>> meta.kv_hit_rate is None, meta.accept_length(nextn=2)
    (True, 1.0)
    >>> meta.observe(TrafficObservation(duration_s=5, num_req=0, isl=0, osl=0,
    ...                                 kv_hit_rate=0.3, accept_length=4.5))
    >>> meta.observe(TrafficObservation(duration_s=5, num_req=0, isl=0, osl=0))
    >>> meta.kv_hit_rate, meta.accept_length(nextn=2), meta.accept_length(nextn=0)
    (0.3, 3.0, 1.0)
    """

    kv_hit_rate: float | None = None
    observed_accept_length: float | None = None

    def observe(self, obs: TrafficObservation) -> None:
        """Adopt the observation's values; missing or non-finite ones keep the last value."""
        hit = _finite_or_none(obs.kv_hit_rate)
        if hit is not None:
            self.kv_hit_rate = min(1.0, max(0.0, hit))
        accept = _finite_or_none(obs.accept_length)
        if accept is not None:
            self.observed_accept_length = accept

    def accept_length(self, nextn: int) -> float:
        """Effective accept length: 1.0 without speculation or observation, else the last
        observation clamped to ``[1, nextn + 1]``."""
        if nextn <= 0 or self.observed_accept_length is None:
            return 1.0
        return min(float(nextn + 1), max(1.0, self.observed_accept_length))
