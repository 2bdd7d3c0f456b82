"""The Kubernetes manifests of deploy/kubernetes agree with the code they deploy: the role
grants what the DGD actuator calls, the config loads, and the worker's arguments are ones
`flowplanner run` accepts and wires."""

from __future__ import annotations

import inspect
from pathlib import Path

import yaml

from connectors import dgd
from connectors.dgd_dataflow import parse_dgd_target
from flows.cli import build_parser
from flows.endpoints import wire
from schemas import load_config

MANIFESTS = Path(__file__).resolve().parents[2] / "deploy/kubernetes/flowplanner.yaml"


def manifests() -> dict[str, dict]:
    return {doc["kind"]: doc for doc in yaml.safe_load_all(MANIFESTS.read_text())}


def worker_args() -> list[str]:
    (container,) = manifests()["Deployment"]["spec"]["template"]["spec"]["containers"]
    return container["args"]


def test_the_role_grants_what_the_actuator_calls():
    # the actuator's API calls are get and patch of the DGD (its status comes with the get)
    code = inspect.getsource(dgd)
    calls = {"get": "get_namespaced_custom_object(", "patch": "patch_namespaced_custom_object("}
    assert all(call in code for call in calls.values())
    granted = {
        (group, resource, verb)
        for rule in manifests()["Role"]["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    for verb in calls:
        assert ("nvidia.com", "dynamographdeployments", verb) in granted
    assert ("nvidia.com", "dynamographdeployments/status", "get") in granted
    binding = manifests()["RoleBinding"]
    pod = manifests()["Deployment"]["spec"]["template"]["spec"]
    assert binding["roleRef"]["name"] == manifests()["Role"]["metadata"]["name"]
    assert binding["subjects"][0]["name"] == pod["serviceAccountName"]


def test_the_worker_runs_the_shipped_config_with_addresses_it_accepts(tmp_path):
    config = tmp_path / "planner.yaml"
    config.write_text(manifests()["ConfigMap"]["data"]["planner.yaml"])
    configs = load_config(config)
    args = build_parser().parse_args(worker_args())
    assert args.command == "run" and args.config == "/etc/flowplanner/planner.yaml"
    wiring = wire(args.input, [], configs)  # no I/O: sources connect when the flow starts
    assert wiring.live and len(wiring.inputs) == 2  # the ZMQ source and the Prometheus one
    (output,) = args.output
    namespace, name = parse_dgd_target(output.split("?")[0])
    assert (namespace, name) == (None, "llama")  # in the pod's own namespace
    assert "llama" in configs and configs["llama"].capabilities is not None
    (container,) = manifests()["Deployment"]["spec"]["template"]["spec"]["containers"]
    assert container["ports"][0]["containerPort"] == args.metrics_port
