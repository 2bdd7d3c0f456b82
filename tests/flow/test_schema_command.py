"""``flowplanner schema`` prints the JSON Schema of every wire type."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys

from tests.flow.runner import flowplanner

SPEC_FPM_FIELDS = {
    "version",
    "worker_id",
    "dp_rank",
    "counter_id",
    "wall_time",
    "scheduled_requests",
    "queued_requests",
}


def test_every_wire_type_has_a_schema():
    done = flowplanner("schema")
    assert done.returncode == 0, done.stderr
    schemas = json.loads(done.stdout)
    assert set(schemas) == {
        "ForwardPassMetrics",
        "Event",
        "TrafficObservation",
        "ScalingDecision",
        "DecisionAck",
        "TickRecord",
        "DeadLetter",
        "PlannerFile",
    }
    fpm = schemas["ForwardPassMetrics"]
    assert set(fpm["properties"]) == SPEC_FPM_FIELDS
    queued = fpm["$defs"]["QueuedRequestMetrics"]["properties"]
    assert "sum_prefill_kv_tokens" not in queued  # the reference's queued metrics have none
    event = schemas["Event"]
    kinds = {
        event["$defs"][ref["$ref"].split("/")[-1]]["properties"]["type"]["const"]
        for ref in event["oneOf"]
    }
    assert kinds == {
        "fpm",
        "fpm_batch",
        "inventory",
        "capabilities",
        "traffic",
        "request",
        "ack",
        "limits",
        "clock",
    }
    reasons = schemas["ScalingDecision"]["$defs"]["TickDiagnostics"]["properties"]
    assert "scale_down_refused_consolidation" in json.dumps(reasons["load_decision_reason"])


def test_what_the_planner_writes_is_open_to_new_fields_and_what_it_reads_is_closed():
    schemas = json.loads(flowplanner("schema").stdout)

    def closed(schema: dict) -> bool:
        return schema.get("additionalProperties") is False

    # a consumer validating decisions, ticks or dead letters keeps working when fields are added
    # (a tick's traffic observation is also an input, and as strict as one)
    for written in ("ScalingDecision", "TickRecord", "DeadLetter"):
        assert not closed(schemas[written])
        parts = schemas[written].get("$defs", {})
        assert not [n for n, d in parts.items() if closed(d) and n != "TrafficObservation"]
    # an unknown field in what the planner reads is a mistake, refused by name
    for read in ("DecisionAck", "TrafficObservation", "PlannerFile"):
        assert closed(schemas[read]), read


def test_one_type_prints_its_schema_itself():
    done = flowplanner("schema", "ScalingDecision")
    schema = json.loads(done.stdout)
    assert schema["title"] == "ScalingDecision"  # ready for a validator, not wrapped by name
    assert schema == json.loads(flowplanner("schema").stdout)["ScalingDecision"]
    assert "agg" in schema["properties"]["num_decode"]["description"]


def test_a_reader_that_stops_early_is_no_error_of_ours():
    piped = subprocess.run(
        f"{shlex.quote(sys.executable)} -m flows.cli schema | head -1",  # > a pipe's buffer
        shell=True,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert piped.stdout.strip()
    assert piped.stderr == ""  # no BrokenPipeError traceback


def test_the_limits_schema_refuses_what_the_planner_refuses():
    """An empty change and a null budget or min_endpoint are refused by the planner; the
    schema (a producer's validator) allowed both."""
    done = flowplanner("schema")
    limits = json.loads(done.stdout)["Event"]["$defs"]["Limits"]
    assert limits["minProperties"] == 1
    for name in ("min_endpoint", "max_gpu_budget", "min_gpu_budget"):
        assert limits["properties"][name]["type"] == "integer", name
    # a role's floor may be null: it falls back to min_endpoint
    floor = limits["properties"]["decode_min_endpoint"]["anyOf"]
    assert {"type": "null"} in floor
