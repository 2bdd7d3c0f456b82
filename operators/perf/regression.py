"""The shared machinery of the FPM perf models (reference spec §3.1): a river regressor over a
bucketed sample store, refitted lazily by exact least squares.

Conventions shared by :class:`~operators.perf.PrefillPerfModel`,
:class:`~operators.perf.DecodePerfModel` and :class:`~operators.perf.AggPerfModel`:

* ``learn_one(x, y)`` adds one sample: ``x`` maps every feature name of the model to a finite,
  non-negative number (extra keys are ignored), ``y`` is the forward-pass wall time in seconds
  (finite and > 0). Anything else raises ``ValueError`` naming the problem; nothing is stored.
* ``predict_one(x)`` is the fitted wall time in seconds, floored at 1 µs. It returns **0.0 when
  the model is not ready** (too few samples, or the fit was rejected for a negative slope);
  planner code uses the ``estimate_*`` / ``find_best_*`` methods, which say "not ready" with
  ``None`` / zero rates instead.
* ``add_observation(fpm)`` always updates the moving averages first; an idle heartbeat
  (``wall_time == 0``) is not a sample. A forward pass far off the model (ours, below) waits
  for a second one before it is learned from.
* The constructor stores parameters (``clone()`` works); all state is plain attributes that pickle.
* ``basis`` (ours, ``PlannerConfig.perf_model_basis``): ``"linear"`` is the reference's OLS;
  ``"piecewise"`` fits the features a model lists in ``piecewise_features`` as a monotone
  continuous piecewise-linear function (:mod:`operators.perf.basis`). Whether a model is ready,
  and why not, is decided by the linear fit in both cases: the piecewise basis changes the shape
  of an accepted fit, never whether there is one. Only the prefill model takes ``basis``; decode
  and agg are always linear (a model without ``piecewise_features`` is linear under either basis).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from numbers import Integral, Real
from typing import Any, ClassVar

from river import base
from river.base.typing import FeatureName

from operators.perf.basis import (
    PERF_MODEL_BASES,
    PerfModelBasis,
    WallTimeFit,
    monotone_least_squares,
)
from operators.perf.samples import MIN_WALL_TIME_S, BucketedSampleStore, LinearFit, least_squares
from schemas import ForwardPassMetrics

log = logging.getLogger(__name__)

MAX_KV_HIT_RATE_DISCOUNT = 0.95
"""The KV-cache hit rate discount on prefill work is clamped to ``[0, 0.95]`` (spec §3.3)."""


def clamp_kv_hit_rate(kv_hit_rate: float | None) -> float:
    """Clamp a KV hit rate to ``[0, 0.95]``; ``None`` and NaN mean 0 (no discount).

    >>> clamp_kv_hit_rate(1.5), clamp_kv_hit_rate(-0.3), clamp_kv_hit_rate(float("nan"))
    (0.95, 0.0, 0.0)
    """
    if kv_hit_rate is None or math.isnan(kv_hit_rate):
        return 0.0
    return min(max(float(kv_hit_rate), 0.0), MAX_KV_HIT_RATE_DISCOUNT)


def effective_accept_length(accept_length: float | None) -> float:
    """Speculative-decoding tokens per forward pass: 1.0 unless finite and >= 1 (spec §5.5).

    >>> effective_accept_length(2.5), effective_accept_length(0.5), effective_accept_length(None)
    (2.5, 1.0, 1.0)
    """
    if accept_length is None or not math.isfinite(accept_length) or accept_length < 1.0:
        return 1.0
    return float(accept_length)


def require_finite(name: str, value: float) -> float:
    """``value`` as a float, or ``ValueError`` naming ``name`` when it is not a finite number."""
    if isinstance(value, bool) or not isinstance(value, Real) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    return float(value)


def chunked_prefill_seconds(
    total_tokens: float, max_num_batched_tokens: float, chunk_seconds: Callable[[float], float]
) -> float:
    """Time to prefill ``total_tokens`` in chunks of at most ``max_num_batched_tokens``.

    ``ceil(total / mbt) - 1`` full chunks plus one tail chunk; 0 when there is nothing to do.

    >>> chunked_prefill_seconds(5300, 2048, lambda c: 0.001 * c)
    5.3
    """
    if total_tokens <= 0:
        return 0.0
    chunks = math.ceil(total_tokens / max_num_batched_tokens)
    tail = total_tokens - (chunks - 1) * max_num_batched_tokens
    return (chunks - 1) * chunk_seconds(max_num_batched_tokens) + chunk_seconds(tail)


@dataclass(frozen=True)
class Suspect:
    """A forward pass held back: its features, wall time, side and when it came.

    >>> Suspect(values=(512.0,), wall_time=5.0, slow=True, arrival=65).slow
    True
    """

    values: tuple[float, ...]
    wall_time: float
    slow: bool
    """Slower than the model says (else faster)."""
    arrival: int
    """Its number among the forward passes the model was offered (``live_offered``)."""


class FpmRegressor(base.Regressor):
    """Base class: OLS of forward-pass wall time on a few FPM features (see module docstring).

    **Suspects** (ours, with ``suspect_factor``; ``None``, the default, learns every forward
    pass as the reference does; the planner's config gives 4). Least squares over at most
    ``max_num_fpm_samples`` samples lets one wrong forward pass — a 5 s stall, a wall time in
    the wrong unit, within every bound a dead letter checks — pull the fit for as long as the
    store keeps it, which for a lone sample in an outer bucket is a long time, or reject it
    outright (a negative slope). So a forward pass offered through :meth:`add_observation`
    whose wall time is more than ``suspect_factor`` times the *screening fit's* prediction, or
    less than its inverse, is held back as a suspect. A second suspect on the same side
    (slower, or faster) within the next ``max_num_fpm_samples`` forward passes confirms it:
    both are learned, in order — a real change of the engine's speed (or a region the fit does
    not reach) comes through in pairs, nothing of it is lost. A suspect nobody confirms in that
    time is set aside (:attr:`set_aside` counts them; the planner exports the count). The
    screening fit is the last *accepted* fit made from at least half the store: computed at a
    tick, never per forward pass (screening costs one prediction), and kept while later fits
    are rejected, so a confirmed pair of stalls that rejects the fit does not switch screening
    off. Before the first such fit nothing is screened. Benchmark FPMs and :meth:`learn_one`
    (river's interface, given curated samples) are never screened.

    **A bootstrap the engine contradicts** (ours, with ``suspect_factor``) is dropped: once the
    store holds ``min_observations`` live samples, the benchmark samples go — all of them —
    when the live wall times are, by their median, more than ``suspect_factor`` times off what
    the benchmark samples alone fitted (before the first live sample), or when those fitted
    no model at all (a rejected fit: columns swapped, say). A profile in the wrong
    unit (an ITL in ms read as seconds) or of another engine otherwise outvoted the engine's own
    forward passes for as long as the store kept it, and its outer buckets kept it for ever.
    The suspects held back against it are learned, and screening starts again from the next
    fit. :attr:`bootstrap_contradicted` keeps that median ratio.

    Subclasses set ``feature_names`` (and ``relaxable_features``, ``piecewise_features``) and
    implement ``_features_of`` and ``_observe_averages``.

    >>> class TokensModel(FpmRegressor):
    ...     feature_names = ("tokens",)
    ...     def _features_of(self, fpm): return (float(fpm.scheduled_requests.sum_prefill_tokens),)
    ...     def _observe_averages(self, fpm): pass
    >>> m = TokensModel(min_observations=2)
    >>> m.learn_one({"tokens": 100}, 0.2); m.learn_one({"tokens": 200}, 0.3)
    >>> round(m.predict_one({"tokens": 300}), 6)
    0.4
    >>> {name: round(value, 12) for name, value in m.coefficients.items()}
    {'tokens': 0.001, 'intercept': 0.1}
    """

    feature_names: ClassVar[tuple[str, ...]] = ()
    relaxable_features: ClassVar[frozenset[int]] = frozenset()
    piecewise_features: ClassVar[frozenset[int]] = frozenset()
    """Features the ``"piecewise"`` basis expands into segments (at most ``bucket_count`` per
    axis, as the sample store buckets them); the others stay linear."""
    basis: PerfModelBasis = "linear"  # class default: models pickled before the option existed
    # Suspect screening (class defaults, as for ``basis``: models pickled before it existed).
    suspect_factor: float | None = None  # models pickled before screening learn everything
    suspects: tuple[Suspect, ...] = ()  # at most one per side
    live_offered = 0  # forward passes offered through add_observation
    set_aside = 0  # suspects never confirmed
    _screen: WallTimeFit | None = None  # the last accepted fit made from half the store or more
    rejected_kept: tuple[ForwardPassMetrics, ...] = ()
    """Benchmark FPMs the last :meth:`retire_benchmarks` rejected but kept (the floor)."""
    bootstrap_contradicted: float | None = None
    """Live wall time over the benchmark fit's (median) when that dropped the bootstrap."""
    _bootstrap_fit: WallTimeFit | None = None  # the fit of the benchmark samples alone
    _floor_warned = False  # the latest fit was warned of as priced at the floor

    def __init__(
        self,
        max_num_fpm_samples: int = 64,
        min_observations: int = 5,
        bucket_count: int = 16,
        basis: PerfModelBasis = "linear",
        suspect_factor: float | None = None,
    ) -> None:
        if suspect_factor is not None and not (
            isinstance(suspect_factor, Real)
            and math.isfinite(suspect_factor)
            and suspect_factor > 1
        ):
            raise ValueError(f"suspect_factor must be a number > 1 or None, got {suspect_factor!r}")
        self.suspect_factor = suspect_factor
        for name, value in (
            ("max_num_fpm_samples", max_num_fpm_samples),
            ("min_observations", min_observations),
            ("bucket_count", bucket_count),
        ):
            if isinstance(value, bool) or not isinstance(value, Integral) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        if basis not in PERF_MODEL_BASES:
            raise ValueError(f"basis must be one of {list(PERF_MODEL_BASES)}, got {basis!r}")
        self.basis = basis
        self.max_num_fpm_samples = max_num_fpm_samples
        self.min_observations = min_observations
        self.bucket_count = bucket_count
        ndim = len(self.feature_names)
        per_axis = bucket_count if ndim == 1 else math.isqrt(bucket_count)
        self.samples = BucketedSampleStore(ndim, max_num_fpm_samples, max(1, per_axis))
        self.benchmark_samples: dict[int, ForwardPassMetrics] = {}  # sample seq -> its FPM
        self._outcome: tuple[WallTimeFit | None, str] | None = None  # None = refit needed

    def _get_params(self) -> dict[str, Any]:
        # river's clone() and repr read the constructor parameters; the reference basis is left
        # out so a linear model keeps the reference's parameter set.
        params = super()._get_params()
        if params.get("basis") == "linear":
            del params["basis"]
        return params

    # -- river interface ---------------------------------------------------------------------

    def learn_one(self, x: dict[FeatureName, Any], y: Any) -> None:
        """Add one sample: features ``x`` (by name) took ``y`` seconds."""
        values = self._feature_values(x)
        wall = require_finite("y (wall time)", y)
        if wall <= 0.0:
            raise ValueError(f"y (wall time) must be > 0 seconds, got {y!r}")
        self._add_sample(values, wall)

    def predict_one(self, x: dict[FeatureName, Any]) -> float:
        """Fitted wall time (s) for features ``x``, floored at 1 µs; 0.0 when not ready."""
        values = self._feature_values(x)
        fit = self._fit()
        return fit.predict(values) if fit is not None else 0.0

    # -- FPM intake --------------------------------------------------------------------------

    def add_observation(self, fpm: ForwardPassMetrics) -> None:
        """Update the moving averages; then, unless it is a heartbeat, add the FPM as a sample."""
        if not isinstance(fpm, ForwardPassMetrics):
            raise TypeError(f"expected ForwardPassMetrics, got {type(fpm).__name__}")
        self._observe_averages(fpm)
        if fpm.wall_time == 0.0:
            return
        self._offer(self._features_of(fpm), fpm.wall_time)

    def load_benchmark_fpms(self, fpms: Iterable[ForwardPassMetrics]) -> None:
        """Add benchmark / profile FPMs (bootstrap), in order.

        The model remembers which samples came from a benchmark, so
        :meth:`retire_benchmarks` can later drop the ones that turn out not to fit the engine.
        """
        for fpm in fpms:
            if not isinstance(fpm, ForwardPassMetrics):
                raise TypeError(f"expected ForwardPassMetrics, got {type(fpm).__name__}")
            self._observe_averages(fpm)
            if fpm.wall_time != 0.0:
                seq = self._add_sample(self._features_of(fpm), fpm.wall_time)
                self.benchmark_samples[seq] = fpm
        self._fit_bootstrap()

    def _fit_bootstrap(self) -> None:
        """Remember what the benchmark samples alone fit, while they are alone in the store
        (live samples later retire some of them): the fit live ones are checked against."""
        entries = self.samples.entries()
        if all(seq in self.benchmark_samples for seq, _, _ in entries):
            xs, ys = [x for _, x, _ in entries], [y for _, _, y in entries]
            enough = len(entries) >= self.min_observations
            self._bootstrap_fit = (
                least_squares(xs, ys, self.relaxable_features).fit if enough else None
            )

    def retire_benchmarks(
        self,
        keep: Callable[[ForwardPassMetrics], bool],
        nearness: Callable[[ForwardPassMetrics], float] | None = None,
    ) -> int:
        """Drop the retained benchmark samples whose FPM ``keep`` rejects; returns how many.

        Live samples are never touched. The moving averages keep what they saw.

        Never below ``min_observations`` samples (ours): a bootstrap is there to give a model
        before live data, and one left too few samples to fit gives none. When dropping every
        rejected sample would leave fewer, the rejected samples ranked first by ``nearness``
        (smallest first; ties, and every sample without ``nearness``, in load order) stay, as
        few as make up ``min_observations``; :attr:`rejected_kept` lists them.

        >>> from schemas import ForwardPassMetrics, ScheduledRequestMetrics
        >>> from operators.perf import PrefillPerfModel
        >>> model = PrefillPerfModel(min_observations=2)
        >>> model.load_benchmark_fpms([ForwardPassMetrics(wall_time=0.001 * t + 0.02,
        ...     scheduled_requests=ScheduledRequestMetrics(num_prefill_requests=1,
        ...                                                sum_prefill_tokens=t))
        ...     for t in (1000, 8000, 16000)])
        >>> model.retire_benchmarks(lambda f: f.scheduled_requests.sum_prefill_tokens <= 8192)
        1
        >>> model.num_observations
        2
        >>> tokens = lambda f: f.scheduled_requests.sum_prefill_tokens
        >>> model.retire_benchmarks(lambda f: tokens(f) <= 4096, nearness=tokens)  # the floor
        0
        >>> [tokens(f) for f in model.rejected_kept]
        [8000]
        """
        retained = self.samples.seqs()
        self.benchmark_samples = {
            seq: fpm for seq, fpm in self.benchmark_samples.items() if seq in retained
        }
        rejected = [seq for seq, fpm in self.benchmark_samples.items() if not keep(fpm)]
        if nearness is not None:
            rejected.sort(key=lambda seq: (nearness(self.benchmark_samples[seq]), seq))
        spare = max(0, len(retained) - self.min_observations)
        kept = rejected[: max(0, len(rejected) - spare)]
        self.rejected_kept = tuple(self.benchmark_samples[seq] for seq in kept)
        drop = set(rejected[len(kept) :])
        for seq in drop:
            del self.benchmark_samples[seq]
        removed = self.samples.remove(drop)
        if removed:
            self._outcome = None
            self._fit_bootstrap()
        return removed

    def has_sufficient_data(self) -> bool:
        """At least ``min_observations`` samples are retained."""
        return len(self.samples) >= self.min_observations

    @property
    def num_observations(self) -> int:
        """Samples currently retained (at most ``max_num_fpm_samples``)."""
        return len(self.samples)

    @property
    def is_ready(self) -> bool:
        """Enough samples and the fit was not rejected."""
        return self._fit() is not None

    @property
    def rejection_reason(self) -> str | None:
        """Why the model is not ready (``None`` when ready)."""
        if self._fit() is not None:
            return None
        if not self.has_sufficient_data():
            return f"insufficient data ({self.num_observations} < {self.min_observations})"
        assert self._outcome is not None
        return self._outcome[1]

    @property
    def coefficients(self) -> dict[str, float] | None:
        """Slope per feature name plus ``"intercept"`` (seconds), or ``None`` when not ready.

        Under the piecewise basis: the first segment's slope per feature name, the change of
        slope at each interior knot under ``"name>knot"`` (the hinge form of
        :mod:`operators.perf.basis`), and the value at zero as ``"intercept"``.
        """
        fit = self._fit()
        if fit is None:
            return None
        return fit.named_coefficients(self.feature_names)

    # -- internals ---------------------------------------------------------------------------

    def _features_of(self, fpm: ForwardPassMetrics) -> tuple[float, ...]:
        raise NotImplementedError

    def _observe_averages(self, fpm: ForwardPassMetrics) -> None:
        raise NotImplementedError

    def _feature_values(self, x: dict[FeatureName, Any]) -> tuple[float, ...]:
        if not isinstance(x, dict):
            raise ValueError(f"features must be a dict, got {type(x).__name__}")
        missing = [name for name in self.feature_names if name not in x]
        if missing:
            raise ValueError(f"missing feature(s) {missing}; expected {list(self.feature_names)}")
        values = tuple(require_finite(name, x[name]) for name in self.feature_names)
        negative = [n for n, v in zip(self.feature_names, values, strict=True) if v < 0]
        if negative:
            raise ValueError(f"feature(s) {negative} must be >= 0")
        return values

    def _offer(self, values: tuple[float, ...], wall_time: float) -> None:
        """Learn a live forward pass, unless it is an unconfirmed suspect (class docstring)."""
        self.live_offered += 1
        self._screen_and_learn(values, wall_time)
        window = self.max_num_fpm_samples
        expired = [s for s in self.suspects if self.live_offered - s.arrival >= window]
        if expired:
            self.set_aside += len(expired)
            self.suspects = tuple(s for s in self.suspects if s not in expired)

    def _screen_and_learn(self, values: tuple[float, ...], wall_time: float) -> None:
        factor, screen = self.suspect_factor, self._screen
        if factor is None or screen is None:
            self._add_sample(values, wall_time)
            return
        predicted = screen.predict(values)  # floored at 1 µs
        if 1 / factor <= wall_time / predicted <= factor:
            self._add_sample(values, wall_time)
            return
        slow = wall_time > predicted
        held = [s for s in self.suspects if s.slow == slow]
        if not held:
            self.suspects = (*self.suspects, Suspect(values, wall_time, slow, self.live_offered))
            return
        self.suspects = tuple(s for s in self.suspects if s.slow != slow)
        for suspect in held:
            self._add_sample(suspect.values, suspect.wall_time)
        self._add_sample(values, wall_time)

    def _add_sample(self, values: tuple[float, ...], wall_time: float) -> int:
        seq = self.samples.add(values, wall_time)
        self._outcome = None
        return seq

    def _drop_contradicted_bootstrap(self) -> None:
        """Drop the benchmark samples when the live ones contradict them (class docstring)."""
        factor = self.suspect_factor
        if factor is None or not self.benchmark_samples:
            return
        fit = self._bootstrap_fit
        entries = self.samples.entries()
        live = [(x, y) for seq, x, y in entries if seq not in self.benchmark_samples]
        if len(live) < self.min_observations:
            return
        median = None
        if fit is not None:  # else no model of its own: nothing it could add to the engine's
            ratios = sorted(y / fit.predict(x) for x, y in live)
            median = ratios[len(ratios) // 2]
            if 1 / factor <= median <= factor:
                return
        self.samples.remove(set(self.benchmark_samples))
        self.benchmark_samples = {}
        self.rejected_kept = ()
        self.bootstrap_contradicted = median
        self._screen = None
        held, self.suspects = self.suspects, ()
        for suspect in held:
            self._add_sample(suspect.values, suspect.wall_time)
        why = (
            "its samples alone fit no model"
            if median is None
            else f"the engine's forward passes take {median:.3g}× what it says (median of "
            f"{len(live)})"
        )
        log.warning(
            "%s: the bootstrap profile is dropped, %s; the model learns from the engine alone "
            "(a profile in the wrong unit, or of another engine?)",
            type(self).__name__,
            why,
        )

    def _warn_of_floor_pricing(self, fit: WallTimeFit | None) -> None:
        """Warn once per stretch of fits whose straight line through a piecewise-capable
        feature starts below zero: every pass short enough is priced at the 1 µs floor, so
        a capacity query for short prompts answers about a million requests per second."""
        if not (isinstance(fit, LinearFit) and self.piecewise_features and fit.intercept < 0):
            self._floor_warned = False
            return
        if not self._floor_warned:
            below = ", ".join(
                f"{self.feature_names[i]} < {-fit.intercept / fit.coefficients[i]:.4g}"
                for i in sorted(self.piecewise_features)
                if fit.coefficients[i] > 0
            )
            log.warning(
                "%s: the linear fit has a negative intercept (%.3g s): passes with %s are "
                "priced at the %g s floor, as almost free (a profile whose latency grows "
                "faster than linearly: set perf_model_basis: piecewise)",
                type(self).__name__,
                fit.intercept,
                below or "few enough tokens",
                MIN_WALL_TIME_S,
            )
        self._floor_warned = True

    def _fit(self) -> WallTimeFit | None:
        if self._outcome is None:
            self._drop_contradicted_bootstrap()
        if not self.has_sufficient_data():
            return None
        if self._outcome is None:
            stored = self.samples.samples()
            xs, ys = [x for x, _ in stored], [y for _, y in stored]
            outcome = least_squares(xs, ys, self.relaxable_features, self.feature_names)
            fit: WallTimeFit | None = outcome.fit
            if fit is not None and self.basis == "piecewise" and self.piecewise_features:
                per_axis = self.samples.buckets_per_axis
                segments = [
                    per_axis if i in self.piecewise_features else 1
                    for i in range(len(self.feature_names))
                ]
                fit = monotone_least_squares(xs, ys, segments)
            self._outcome = (fit, outcome.reason)
            self._warn_of_floor_pricing(fit)
            if fit is not None and len(stored) * 2 >= self.max_num_fpm_samples:
                self._screen = fit
        return self._outcome[0]
