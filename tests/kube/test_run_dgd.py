"""``flowplanner run`` with a DGD output: a live planner reads the deployment's inventory from
the DGD status, decides from FPMs streamed in real time, and patches the DGD's replicas."""

from __future__ import annotations

import json
import signal
import threading
import time

from confluent_kafka import Producer
from kubernetes import client as k8s

from connectors.dgd import LAST_DECISION_ANNOTATION
from flows.display import format_time
from tests.flow.runner import read_jsonl, start_flowplanner, write_config
from tests.flow.streams import DECODE_CONFIG, decode_fpm
from tests.services.process import wait_until

from .conftest import create_dgd


def stream_decode_load(bootstrap: str, topic: str, stop: threading.Event) -> None:
    """One decode engine whose KV load climbs, four passes a second, timed as they happen."""
    producer = Producer({"bootstrap.servers": bootstrap})
    counter, start = 0, time.time()
    # the fleet as it starts (the DGD's polls say so too): a replay of the topic knows it
    inventory = {"ready_num_prefill": 1, "expected_num_prefill": 1}
    inventory |= {"ready_num_decode": 1, "expected_num_decode": 1}
    event = {"type": "inventory", "deployment": "llama", "time": start, "payload": inventory}
    producer.produce(topic, key="llama", value=json.dumps(event).encode())
    while not stop.is_set():
        counter += 1
        kv = int(min(650_000, 200_000 + 40_000 * (time.time() - start)))
        event = {
            "type": "fpm",
            "deployment": "llama",
            "time": time.time(),
            "payload": {"role": "decode", "fpm": decode_fpm("w0", kv, kv // 2000, counter)},
        }
        producer.produce(topic, key="llama", value=json.dumps(event).encode())
        producer.poll(0)
        time.sleep(0.25)
    producer.flush(10)


LIVE_CONFIG = {**DECODE_CONFIG, "mode": "disagg", "ttft_ms": 500, "allowed_lateness_seconds": 0.5}
"""The live planner's config: decode load scaling of the disagg DGD fixture."""


def start_decode_load(bootstrap: str, topic: str) -> threading.Event:
    """:func:`stream_decode_load` on a thread until the returned event is set."""
    stop = threading.Event()
    producer = threading.Thread(
        target=stream_decode_load, args=(bootstrap, topic, stop), daemon=True
    )
    producer.start()
    return stop


def test_run_scales_the_dgd(tmp_path, apiserver, kube, dgd_crd, kafka_bootstrap, kafka_topic):
    dgd = create_dgd(apiserver, kube, delay_s=1.0)
    config = write_config(tmp_path / "c.yaml", {"llama": LIVE_CONFIG})
    stop = start_decode_load(kafka_bootstrap, kafka_topic)
    target = f"dgd://{dgd.namespace}/{dgd.name}?deployment=llama&host={apiserver.url}&interval=1"

    def start_planner(*files: str):
        events = f"kafka://{kafka_bootstrap}/{kafka_topic}"
        return start_flowplanner(
            "run", "--config", str(config), "--input", events, "--output", target, *files
        )

    planner = start_planner("--output", str(tmp_path / "decisions.jsonl"))
    try:
        wait_until(  # the planner's start and first decisions
            lambda: dgd.get()["spec"]["services"]["VllmDecodeWorker"]["replicas"] >= 2,
            "the planner to scale decode to 2 replicas",
            timeout_s=180,
            interval_s=1.0,
        )
    finally:
        stop.set()
        planner.send_signal(signal.SIGTERM)
        _, err = planner.communicate(timeout=30)
    assert planner.returncode == 0, err
    services = dgd.get()["spec"]["services"]
    assert services["VllmDecodeWorker"]["replicas"] == 2, err
    assert services["VllmPrefillWorker"]["replicas"] == 1  # untouched
    patch = dgd.patches()[0]
    assert patch.content_type == "application/merge-patch+json"
    assert patch.body["spec"]["services"] == {"VllmDecodeWorker": {"replicas": 2}}
    # the planner's counts came from the DGD's status
    decisions = [
        json.loads(line) for line in (tmp_path / "decisions.jsonl").read_text().splitlines()
    ]
    assert decisions[0]["num_decode"] == 2 and decisions[0]["current_decode"] == 1

    # Someone scales decode to 3 by hand. A restarted planner replays the events topic from
    # its beginning (the DGD's inventory polls do not make that history late), rebuilds its
    # state from it, and must not apply the history's decisions over the change: it resumes
    # after the decision the DGD's annotation names.
    k8s.CustomObjectsApi(kube).patch_namespaced_custom_object(
        "nvidia.com",
        "v1alpha1",
        dgd.namespace,
        "dynamographdeployments",
        dgd.name,
        {"spec": {"services": {"VllmDecodeWorker": {"replicas": 3}}}},
        _content_type="application/merge-patch+json",
    )
    patches = len(dgd.patches())
    ticks, dead = tmp_path / "ticks.jsonl", tmp_path / "dead.jsonl"
    planner = start_planner("--ticks", str(ticks), "--dead-letters", str(dead))
    history_end = decisions[-1]["time"]
    try:
        wait_until(
            lambda: ticks.exists() and any(t["time"] > history_end for t in read_jsonl(ticks)),
            "the restarted planner past the history",
            timeout_s=120,
        )
    finally:
        planner.send_signal(signal.SIGTERM)
        _, err = planner.communicate(timeout=30)
    assert planner.returncode == 0, err
    replayed = read_jsonl(ticks)
    # the history's decisions are in the tick records, as in a run never stopped...
    recorded = [t["decision"]["decision_id"] for t in replayed if t["decision"]]
    assert recorded == [d["decision_id"] for d in decisions]
    assert len(dgd.patches()) == patches  # ...and nothing is sent again...
    assert any(t["ran_load"] and t["diagnostics"]["estimated_itl_ms"] for t in replayed)  # ...
    assert not dead.exists() or dead.read_text() == ""  # ...though the history was replayed
    assert len(dgd.patches()) == patches
    assert dgd.get()["spec"]["services"]["VllmDecodeWorker"]["replicas"] == 3
    mark = json.loads(dgd.get()["metadata"]["annotations"][LAST_DECISION_ANNOTATION])
    applied = next(d for d in decisions if d["num_decode"] == 2)  # the decision patched in
    assert mark == {k: applied[k] for k in mark}  # id, time and targets
    held = f"#{mark['decision_id']} at {format_time(mark['time'])}"
    assert f"llama's outputs already hold its decisions up to {held}: resuming after it" in err
