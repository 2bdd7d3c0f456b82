"""Load predictors: forecast next-interval request count, ISL and OSL (reference spec §7)."""

from __future__ import annotations

from operators.predictors.arima import ArimaPredictor
from operators.predictors.base import Predictor
from operators.predictors.constant import ConstantPredictor
from operators.predictors.holt_winters import HoltWintersPredictor
from operators.predictors.kalman import KalmanPredictor
from operators.predictors.periodic import PeriodicPredictor
from operators.predictors.selector import SelectorPredictor
from schemas import PlannerConfig

SINGLE_PREDICTORS = ("constant", "arima", "kalman", "holt_winters", "periodic")
"""The single-model kinds; the ``selector`` runs one of each."""


def season_length(config: PlannerConfig) -> int:
    """Points per season: ``seasonal_period_seconds / throughput_adjustment_interval_seconds``.

    >>> season_length(PlannerConfig(throughput_adjustment_interval_seconds=180))
    480
    """
    return max(
        1, round(config.seasonal_period_seconds / config.throughput_adjustment_interval_seconds)
    )


def build_single(kind: str, config: PlannerConfig) -> Predictor:
    """A fresh single-model predictor of ``kind`` configured from ``config``.

    >>> build_single("kalman", PlannerConfig(kalman_min_points=3)).min_points
    3
    """
    predictor = _single(kind, config)
    predictor.plausible_factor = config.forecast_plausibility_factor
    return predictor


def _single(kind: str, config: PlannerConfig) -> Predictor:
    if kind == "constant":
        return ConstantPredictor()
    if kind == "arima":
        return ArimaPredictor(log1p=config.load_predictor_log1p, refit=config.arima_refits)
    if kind == "kalman":
        return KalmanPredictor(
            q_level=config.kalman_q_level,
            q_trend=config.kalman_q_trend,
            r=config.kalman_r,
            min_points=config.kalman_min_points,
            log1p=config.load_predictor_log1p,
        )
    if kind == "holt_winters":
        return HoltWintersPredictor(
            season_length=season_length(config), log1p=config.load_predictor_log1p
        )
    if kind == "periodic":
        return PeriodicPredictor()
    raise ValueError(f"unknown load predictor {kind!r}; expected one of {SINGLE_PREDICTORS}")


def build_predictor(config: PlannerConfig) -> Predictor:
    """A fresh predictor of the kind ``config.load_predictor`` names.

    >>> build_predictor(PlannerConfig(load_predictor="constant")).forecast()
    0.0
    >>> build_predictor(PlannerConfig(load_predictor="selector")).names
    ['constant', 'arima', 'kalman', 'holt_winters', 'periodic']
    """
    if config.load_predictor == "selector":
        selector = SelectorPredictor(
            candidates=tuple(build_single(kind, config) for kind in SINGLE_PREDICTORS)
        )
        selector.plausible_factor = config.forecast_plausibility_factor
        return selector
    return build_single(config.load_predictor, config)


__all__ = [
    "SINGLE_PREDICTORS",
    "ArimaPredictor",
    "ConstantPredictor",
    "HoltWintersPredictor",
    "KalmanPredictor",
    "PeriodicPredictor",
    "Predictor",
    "SelectorPredictor",
    "build_predictor",
    "build_single",
    "season_length",
]
