"""Shared pytest fixtures: a thin registry; each fixture lives beside its service."""

import os

# Small-matrix BLAS calls (statsmodels fits in the load predictors) run ~10x slower with
# OpenBLAS worker threads on a busy 2-core machine; this must be set before numpy is imported.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from tests.flow.cluster import workers
from tests.services.kafka import kafka_bootstrap, kafka_topic

__all__ = ["kafka_bootstrap", "kafka_topic", "workers"]
