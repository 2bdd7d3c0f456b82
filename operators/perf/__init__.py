"""Online performance models of prefill, decode and aggregated engines (reference spec §3).

Each model is a river regressor fed with ForwardPassMetrics: exact least squares over a bucketed
sample window, refitted lazily, with moving averages of the observed load. See
:mod:`operators.perf.regression` for the shared conventions.
"""

from operators.perf.agg import AggPerfModel
from operators.perf.decode import DecodePerfModel
from operators.perf.moving_average import MovingAverage
from operators.perf.prefill import PrefillPerfModel
from operators.perf.regression import (
    MAX_KV_HIT_RATE_DISCOUNT,
    FpmRegressor,
    clamp_kv_hit_rate,
    effective_accept_length,
)
from operators.perf.samples import MIN_WALL_TIME_S, BucketedSampleStore, LinearFit, least_squares

__all__ = [
    "MAX_KV_HIT_RATE_DISCOUNT",
    "MIN_WALL_TIME_S",
    "AggPerfModel",
    "BucketedSampleStore",
    "DecodePerfModel",
    "FpmRegressor",
    "LinearFit",
    "MovingAverage",
    "PrefillPerfModel",
    "clamp_kv_hit_rate",
    "effective_accept_length",
    "least_squares",
]
