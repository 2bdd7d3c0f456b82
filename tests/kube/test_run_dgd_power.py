"""``flowplanner run`` with power awareness on a DGD: the per-GPU caps come from the services'
``dynamo.nvidia.com/gpu-power-limit`` annotations, and a scale-up the power limit cannot fund
never reaches the DGD."""

from __future__ import annotations

import signal

from tests.flow.runner import read_jsonl, start_flowplanner, write_config
from tests.services.process import wait_until

from .conftest import create_dgd, load_fixture
from .test_run_dgd import LIVE_CONFIG, start_decode_load


def annotated_dgd(watts: str) -> dict:
    manifest = load_fixture("dgd_disagg.yaml")
    for service in ("VllmPrefillWorker", "VllmDecodeWorker"):
        manifest["spec"]["services"][service]["extraPodMetadata"] = {
            "annotations": {"dynamo.nvidia.com/gpu-power-limit": watts}
        }
    return manifest


def test_a_scale_up_beyond_the_power_limit_never_reaches_the_dgd(
    tmp_path, apiserver, kube, dgd_crd, kafka_bootstrap, kafka_topic
):
    dgd = create_dgd(apiserver, kube, annotated_dgd("700"), delay_s=1.0)
    power = {
        "prefill_engine_num_gpu": 1,
        "decode_engine_num_gpu": 1,
        "enable_power_awareness": True,
        "total_gpu_power_limit": 1400,  # one prefill and one decode GPU at 700 W
    }
    config = write_config(tmp_path / "c.yaml", {"llama": LIVE_CONFIG | power})
    # the load that scales decode to 2 without a power limit (test_run_dgd)
    stop = start_decode_load(kafka_bootstrap, kafka_topic)
    target = f"dgd://{dgd.namespace}/{dgd.name}?deployment=llama&host={apiserver.url}&interval=1"
    ticks = tmp_path / "ticks.jsonl"
    planner = start_flowplanner(
        "run",
        "--config",
        str(config),
        "--input",
        f"kafka://{kafka_bootstrap}/{kafka_topic}",
        "--output",
        target,
        "--ticks",
        str(ticks),
    )

    def held() -> list[dict]:
        records = read_jsonl(ticks) if ticks.exists() else []
        return [
            t
            for t in records
            if t["diagnostics"]["load_decision_reason_decode"] == "power_budget_clamp"
        ]

    try:
        wait_until(lambda: len(held()) >= 3, "three decode scale-ups held by power", 180)
    finally:
        stop.set()
        planner.send_signal(signal.SIGTERM)
        _, err = planner.communicate(timeout=30)
    assert planner.returncode == 0, err
    assert dgd.patches() == []
    assert dgd.get()["spec"]["services"]["VllmDecodeWorker"]["replicas"] == 1
    for tick in held():
        assert tick["decision"] is None
        assert tick["diagnostics"]["power_budget_total_watts"] == 1400
        assert tick["diagnostics"]["power_projected_watts"] == 1400  # the caps came from the DGD
