"""The Kubernetes manifests of deploy/kubernetes agree with the code they deploy: the role
grants what the DGD actuator calls, the config loads, and the worker's arguments are ones
`flowplanner run` accepts and wires."""

from __future__ import annotations

from pathlib import Path

import yaml

from connectors.dgd_dataflow import parse_dgd_target
from flows import endpoints
from flows.cli import build_parser
from flows.endpoints import wire
from schemas import load_config

MANIFESTS = Path(__file__).resolve().parents[2] / "deploy/kubernetes/flowplanner.yaml"


def manifests() -> dict[str, dict]:
    return {doc["kind"]: doc for doc in yaml.safe_load_all(MANIFESTS.read_text())}


def worker_args() -> list[str]:
    (container,) = manifests()["Deployment"]["spec"]["template"]["spec"]["containers"]
    return container["args"]


def test_the_role_is_bound_to_the_workers_service_account():
    # what the Role grants is checked against the requests the planner makes:
    # tests/kube/test_rbac.py
    binding = manifests()["RoleBinding"]
    pod = manifests()["Deployment"]["spec"]["template"]["spec"]
    assert binding["roleRef"]["name"] == manifests()["Role"]["metadata"]["name"]
    assert binding["subjects"][0]["name"] == pod["serviceAccountName"]


def test_the_worker_runs_the_shipped_config_with_addresses_it_accepts(tmp_path, monkeypatch):
    config = tmp_path / "planner.yaml"
    config.write_text(manifests()["ConfigMap"]["data"]["planner.yaml"])
    configs = load_config(config)
    args = build_parser().parse_args(worker_args())
    assert args.command == "run" and args.config == "/etc/flowplanner/planner.yaml"
    in_pod = tmp_path / "namespace"  # the service account's namespace file of a pod
    in_pod.write_text("dynamo")
    monkeypatch.setattr(endpoints, "SERVICE_ACCOUNT_NAMESPACE", in_pod)
    # no I/O: sources connect when the flow starts, the DGD output when its sink is built
    wiring = wire(args.input, args.output, configs)
    # the relayed passes (a vLLM engine publishes on its pod's localhost, which the planner's
    # pod cannot reach), Prometheus, the DGD's inventory
    assert wiring.live and len(wiring.inputs) == 3
    assert not any(address.startswith("zmq") for address in args.input)
    assert configs["llama"].allowed_lateness_seconds >= 1  # passes stamped by several hosts
    assert len(wiring.actuators) == 1
    (output,) = args.output
    namespace, name = parse_dgd_target(output.split("?")[0])
    assert (namespace, name) == (None, "llama")  # in the pod's own namespace
    assert "llama" in configs and configs["llama"].capabilities is not None
    (container,) = manifests()["Deployment"]["spec"]["template"]["spec"]["containers"]
    assert container["ports"][0]["containerPort"] == args.metrics_port


def test_the_pod_monitor_scrapes_the_workers_metrics_port():
    monitor = yaml.safe_load((MANIFESTS.parent / "podmonitor.yaml").read_text())
    pod = manifests()["Deployment"]["spec"]["template"]
    assert monitor["metadata"]["namespace"] == manifests()["Deployment"]["metadata"]["namespace"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    (container,) = pod["spec"]["containers"]
    ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    assert ports[endpoint["port"]] == build_parser().parse_args(worker_args()).metrics_port
