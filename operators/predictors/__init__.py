"""Load predictors: forecast next-interval request count, ISL and OSL (reference spec §7)."""

from operators.predictors.base import Predictor
from operators.predictors.constant import ConstantPredictor

__all__ = ["ConstantPredictor", "Predictor"]
