"""Load predictors: forecast next-interval request count, ISL and OSL (reference spec §7)."""

from __future__ import annotations

from operators.predictors.base import Predictor
from operators.predictors.constant import ConstantPredictor
from schemas import PlannerConfig


def build_predictor(config: PlannerConfig) -> Predictor:
    """A fresh predictor of the kind ``config.load_predictor`` names.

    >>> build_predictor(PlannerConfig(load_predictor="constant")).forecast()
    0.0
    """
    if config.load_predictor == "constant":
        return ConstantPredictor()
    raise NotImplementedError(f"load_predictor {config.load_predictor!r} is not implemented yet")


__all__ = ["ConstantPredictor", "Predictor", "build_predictor"]
