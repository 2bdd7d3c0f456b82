"""DGD reads whose replica counts are well-typed JSON but no real fleet's: a count above what a
``WorkerCounts`` can hold (2**70) or above ``MAX_REPLICAS`` (2**62). The inventory source must
skip such a poll with a warning and a count in ``flowplanner_dgd_read_errors_total`` — never end
the dataflow, never send the planner an inventory of 4.6e18 workers — and read the next good one.
(A scripted HTTP server with real sockets and the real ``kubernetes`` client, as in
``tests/kube/test_dgd_faults.py``.)"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from prometheus_client import REGISTRY

from connectors.dgd import DgdActuator
from connectors.dgd_api import kube_api_client
from tests.kube.conftest import Sleeps, poll_inventory
from tests.kube.scripted_server import Reply, ScriptedServer

GOOD: dict[str, Any] = {
    "apiVersion": "nvidia.com/v1alpha1",
    "kind": "DynamoGraphDeployment",
    "metadata": {
        "name": "vllm-disagg",
        "namespace": "dynamo",
        "generation": 1,
        "resourceVersion": "1",
    },
    "spec": {
        "services": {
            "VllmPrefillWorker": {"subComponentType": "prefill", "replicas": 1},
            "VllmDecodeWorker": {"subComponentType": "decode", "replicas": 2},
        }
    },
    "status": {
        "observedGeneration": 1,
        "services": {
            "VllmPrefillWorker": {"replicas": 1, "updatedReplicas": 1, "readyReplicas": 1},
            "VllmDecodeWorker": {"replicas": 2, "updatedReplicas": 2, "readyReplicas": 2},
        },
    },
}


def with_ready(count: int) -> dict[str, Any]:
    dgd = copy.deepcopy(GOOD)
    dgd["status"]["services"]["VllmDecodeWorker"]["availableReplicas"] = count
    return dgd


def read_errors() -> float:
    labels = {"dgd": "dynamo/vllm-disagg"}
    return REGISTRY.get_sample_value("flowplanner_dgd_read_errors_total", labels) or 0.0


@pytest.mark.parametrize("count", [2**70, 2**62], ids=["beyond u64", "implausible"])
def test_an_absurd_replica_count_is_a_skipped_poll(count: int, workers: int) -> None:
    before = read_errors()
    script = [Reply.json(GOOD), Reply.json(GOOD), Reply.json(with_ready(count))]
    with ScriptedServer(*script, default=Reply.json(GOOD)) as server:

        def actuator() -> DgdActuator:
            return DgdActuator(
                kube_api_client(server.url),
                "dynamo",
                "vllm-disagg",
                mode="disagg",
                sleep=Sleeps(),
            )

        events = poll_inventory(actuator, workers)

    assert len(server.requests) == 4  # the validation and three polls
    assert [e.time for e in events] == [100.0, 110.0]  # the absurd poll yielded nothing
    assert all(e.payload.ready_num_decode == 2 for e in events)
    assert read_errors() == before + 1
