"""Recorded events whose payloads are well typed but no real fleet's — an inventory of 4.6e18
replicas, an engine of 4.6e18 GPUs, a prompt of 4.6e18 tokens, traffic of 1e300 requests or
counted over 0 s or 1e-306 s, a 2 MB deployment name or 1 MB request id, an inventory or
capabilities of a role the deployment's mode has not — are dead letters naming the field and
the ceiling, and the run decides exactly as without them (the first three, and the phantom
role's inventory, changed the decisions of ``examples/decode_burst.jsonl`` when they were
admitted; traffic over 1e-306 s crashed a throughput loop). A UTF-8 byte order mark at the start
of a file does not cost its first line."""

from __future__ import annotations

import codecs
import json

from tests.flow.runner import run_recorded, write_config
from tests.flow.streams import DECODE_CONFIG, decode_ramp


def absurd_lines(t: float) -> list[tuple[dict, str]]:
    """(event, words of its dead letter's reason)."""

    def event(kind: str, payload: dict, deployment: str = "llama") -> dict:
        return {"type": kind, "deployment": deployment, "time": t, "payload": payload}

    big = 2**62
    traffic = {"duration_s": 60, "num_req": 1e300, "isl": 1000, "osl": 100}
    return [
        (
            event("inventory", {"ready_num_decode": big, "expected_num_decode": big}),
            "inventory.payload: Value error, ready_num_decode = 4611686018427387904 is "
            "implausible (above MAX_REPLICAS = 65536)",
        ),
        (
            event("capabilities", {"decode": {"num_gpu": big, "max_kv_tokens": 1}}),
            "decode.num_gpu = 4611686018427387904 is implausible (above MAX_ENGINE_GPUS",
        ),
        (
            event("request", {"isl": big, "osl": 10}),
            "isl = 4611686018427387904 is implausible (above MAX_REQUEST_TOKENS",
        ),
        (event("traffic", traffic), "num_req = 1e+300 over duration_s = 60.0 is implausible"),
        (
            event("traffic", {**traffic, "duration_s": 0, "num_req": 5}),
            "num_req = 5.0 over duration_s = 0.0 is implausible",
        ),
        (
            event("traffic", {**traffic, "num_req": 10, "isl_quantiles": {"p99": 1e300}}),
            "isl_quantiles.p99 = 1e+300 is implausible",
        ),
        (
            event("traffic", {**traffic, "duration_s": 1e-306, "num_req": 0}),
            "duration_s = 1e-306 is implausible (below MIN_TRAFFIC_WINDOW_S",
        ),
        (
            event("request", {"request_id": "x" * 2**20, "isl": 10, "osl": 10}),
            "request_id: String should have at most 512 characters",
        ),
        (
            event("inventory", {"ready_num_prefill": 14, "ready_num_decode": 2}),
            "inventory names role 'prefill', not part of mode 'decode'",
        ),
        (
            event("capabilities", {"prefill": {"num_gpu": 8}}),
            "capabilities names role 'prefill', not part of mode 'decode'",
        ),
        ({"type": "clock", "deployment": "x" * 2_000_000, "time": t}, "at most 253 characters"),
    ]


def test_absurd_payloads_are_dead_letters_and_change_nothing(tmp_path):
    valid = decode_ramp("llama", engines=2, seconds=60)
    clean = [json.dumps(e) for e in valid]
    mixed, expected = [], []
    for i, line in enumerate(clean):
        mixed.append(line)
        if i % 60 == 59 and valid[i]["time"] > 35:  # after warm-up
            for event, words in absurd_lines(valid[i]["time"]):
                mixed.append(json.dumps(event))
                expected.append(words)
    assert len(expected) >= 22
    config = write_config(tmp_path / "c.yaml", {"llama": DECODE_CONFIG})
    (tmp_path / "clean.jsonl").write_text("\n".join(clean) + "\n")
    bom = codecs.BOM_UTF8.decode()
    (tmp_path / "mixed.jsonl").write_text(bom + "\n".join(mixed) + "\n")

    outputs = {
        name: run_recorded(config, [tmp_path / f"{name}.jsonl"], tmp_path / name)
        for name in ("clean", "mixed")
    }

    dead = outputs["mixed"]["dead"]
    assert len(dead) == len(expected)  # the first line, behind the BOM, is used
    for words in set(expected):
        matching = [d for d in dead if words in d["reason"]]
        assert len(matching) == expected.count(words), (words, [d["reason"] for d in dead])
    assert all(len(d["reason"]) < 400 for d in dead)  # nothing huge is echoed
    # each names the deployment it was for (with several on one input: whose bad input it
    # was), but for the one whose name is no configured deployment's
    owners = [d["deployment"] for d in dead if "at most 253 characters" not in d["reason"]]
    assert set(owners) == {"llama"}
    assert all(d["deployment"] is None for d in dead if "at most 253" in d["reason"])
    assert outputs["clean"]["decisions"]  # the ramp scales up
    assert outputs["mixed"]["decisions"] == outputs["clean"]["decisions"]
    assert outputs["mixed"]["ticks"] == outputs["clean"]["ticks"]
    assert f"{len(dead)} dead-lettered" in outputs["mixed"]["stderr"]


def test_no_replicas_of_a_role_the_mode_lacks_is_no_phantom(tmp_path):
    # protects: an inventory that also said 0 prefill replicas (the reference's connector
    # reports 0 for a service the deployment lacks) was refused whole: no decision ever
    valid = decode_ramp("llama", engines=2, seconds=60)
    zeros = [
        e | {"payload": e["payload"] | {"ready_num_prefill": 0, "expected_num_prefill": 0}}
        if e["type"] == "inventory"
        else e
        for e in valid
    ]
    zeros.insert(
        1, {"type": "capabilities", "deployment": "llama", "time": 0.0, "payload": {"prefill": {}}}
    )
    config = write_config(tmp_path / "c.yaml", {"llama": DECODE_CONFIG})
    (tmp_path / "clean.jsonl").write_text("".join(json.dumps(e) + "\n" for e in valid))
    (tmp_path / "zeros.jsonl").write_text("".join(json.dumps(e) + "\n" for e in zeros))
    clean = run_recorded(config, [tmp_path / "clean.jsonl"], tmp_path / "clean")
    with_zeros = run_recorded(config, [tmp_path / "zeros.jsonl"], tmp_path / "zeros")
    assert with_zeros["dead"] == [] and clean["decisions"]

    def targets(run: dict) -> list[tuple]:  # (its inventory's 0 prefill is reported as given)
        return [
            (d["decision_id"], d["time"], d["num_decode"], d["reason"]) for d in run["decisions"]
        ]

    assert targets(with_zeros) == targets(clean)
