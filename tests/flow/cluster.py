"""Run a dataflow in the real bytewax runtime in this process, on one worker or as a cluster.

Every flow test runs both single-worker and as a 2-worker cluster (the architecture's style
anchors): a test takes the :func:`workers` fixture and runs its flow with :func:`run_flow`.
With more than one worker, each worker's sink partition writes to the same ``TestingSink``
list, so records of keys that live on different workers interleave in any order; the records
of one key (one deployment) are still in the order its worker made them.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from bytewax.dataflow import Dataflow
from bytewax.recovery import RecoveryConfig
from bytewax.testing import cluster_main, run_main

WORKER_COUNTS = [1, 2]


def run_flow(flow: Dataflow, workers: int, *, recovery: Path | None = None) -> None:
    """Run ``flow`` to completion on ``workers`` worker threads of this process (``run_main``
    for one, a one-process ``cluster_main`` for more), resuming from ``recovery`` if given."""
    config = RecoveryConfig(str(recovery)) if recovery is not None else None
    if workers == 1:
        run_main(flow, recovery_config=config)
    else:
        cluster_main(flow, [], 0, recovery_config=config, worker_count_per_proc=workers)


@pytest.fixture(params=WORKER_COUNTS, ids=lambda n: f"{n}w")
def workers(request: pytest.FixtureRequest) -> int:
    """How many workers the test's flow runs on: each test runs once per count."""
    return request.param
