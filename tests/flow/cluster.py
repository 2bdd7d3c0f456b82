"""Run a dataflow in the real bytewax runtime in this process, on one worker or as a cluster.

The in-process flow tests run both single-worker and as a 2-worker cluster (the architecture's
style anchors): a test takes the :func:`workers` fixture and runs its flow with
:func:`run_flow` (the DGD hang tests stay on one worker, where a held request would block the
other input). On two workers bytewax places the deployments ``alpha`` and ``beta`` on one
worker and ``llama`` and ``d`` on the other (:func:`worker_of`; a test checks it), so a test
that needs its deployments to cross workers names them accordingly.
With more than one worker, each worker's sink partition writes to the same ``TestingSink``
list, so records of keys that live on different workers interleave in any order; the records
of one key (one deployment) are still in the order its worker made them.
"""

from __future__ import annotations

from pathlib import Path

import bytewax.operators as op
import pytest
from bytewax.dataflow import Dataflow
from bytewax.outputs import DynamicSink, StatelessSinkPartition
from bytewax.recovery import RecoveryConfig
from bytewax.testing import TestingSource, cluster_main, run_main

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


class _WorkerSink(DynamicSink[tuple[str, str]]):
    """Records which worker wrote each keyed item."""

    def __init__(self, seen: dict[str, int]) -> None:
        self.seen = seen

    def build(self, step_id: str, worker_index: int, worker_count: int) -> StatelessSinkPartition:
        seen = self.seen

        class _Partition(StatelessSinkPartition[tuple[str, str]]):
            def write_batch(self, items: list[tuple[str, str]]) -> None:
                seen.update((key, worker_index) for key, _ in items)

        return _Partition()


def worker_of(keys: list[str], workers: int) -> dict[str, int]:
    """The worker each key's state lives on when a flow keyed by it runs on ``workers``."""
    flow = Dataflow("placement")
    keyed = op.key_on("key", op.input("keys", flow, TestingSource(keys)), lambda k: k)
    owned = op.stateful_map("own", keyed, lambda state, key: (state, key))
    seen: dict[str, int] = {}
    op.output("where", owned, _WorkerSink(seen))
    run_flow(flow, workers)
    return seen
