"""Bad input is data, not a crash: every bad line is dead-lettered with a reason and counted,
every valid line is used, and no decision comes from a bad line."""

from __future__ import annotations

import json

from tests.flow.runner import run_recorded, write_config
from tests.flow.streams import DECODE_CONFIG, decode_ramp

GOOD_FPM = {
    "role": "decode",
    "fpm": {
        "worker_id": "w0",
        "wall_time": 0.5,
        "scheduled_requests": {"num_decode_requests": 64, "sum_decode_kv_tokens": 90000},
    },
}


def bad_lines(t: float) -> list[tuple[str, str]]:
    """(line, expected words in the reason) — each would push the planner hard if admitted."""

    def fpm_event(**changes):
        event = {
            "type": "fpm",
            "deployment": "llama",
            "time": t,
            "payload": json.loads(json.dumps(GOOD_FPM)),
        }
        for path, value in changes.items():
            node = event
            *parents, leaf = path.split(".")
            for part in parents:
                node = node[part]
            node[leaf] = value
        return json.dumps(event)

    def batch_event(row_time: float, kv_tokens: int) -> str:
        row = [row_time, 0, 0.5, 0, 0, 0.0, 0, 64, kv_tokens, 0.0, 0, 0, 0.0, 0, 0, 0.0]
        payload = {"role": "decode", "worker_id": "w0", "rows": [row]}
        return json.dumps(
            {"type": "fpm_batch", "deployment": "llama", "time": t, "payload": payload}
        )

    return [
        ('{"type": "fpm", "deployment": "llama", "time": ', "Invalid JSON"),
        # Unix time in milliseconds: would move the planner's clock millennia ahead
        (json.dumps({"type": "clock", "deployment": "llama", "time": 1.7e12}), "clock.time"),
        (
            fpm_event(**{"payload.fpm.scheduled_requests.sum_decode_kv_tokens": 10**400}),
            "fpm.scheduled_requests.sum_decode_kv_tokens",
        ),
        (batch_event(t, 10**400), "counts <="),
        (batch_event(t + 1e9, 90000), "after the event's time"),  # would never expire
        ("this is not json at all", "Invalid JSON"),
        (fpm_event(**{"payload.fpm.wall_time": "slow"}), "wall_time"),
        (fpm_event(**{"time": str(t)}), "fpm.time: Input should be a valid number"),
        (
            fpm_event(**{"payload.fpm.scheduled_requests.num_decode_requests": 2.5}),
            "num_decode_requests",
        ),
        (
            fpm_event(**{"payload.fpm.scheduled_requests.sum_decode_kv_tokens": -5}),
            "fpm.scheduled_requests.sum_decode_kv_tokens",
        ),
        (fpm_event(**{"payload.fpm.wall_time": "NaN"}), "wall_time"),
        (fpm_event(**{"payload.fpm.wall_time": float("nan")}), "wall_time"),
        (fpm_event(**{"deployment": "nobody"}), "unknown deployment"),
        (fpm_event(**{"payload.role": "prefill"}), "role"),
        (fpm_event(**{"type": "telemetry"}), "type"),
        (fpm_event(**{"time": t - 30.0}), "late"),  # out of order: 30 s in the past
        (
            json.dumps(
                {
                    "type": "inventory",
                    "deployment": "llama",
                    "time": t,
                    "payload": {"ready_num_decode": -1},
                }
            ),
            "ready_num_decode",
        ),
    ]


def test_bad_lines_are_dead_lettered_and_valid_lines_still_decide(tmp_path):
    valid = decode_ramp("llama", engines=2, seconds=60)
    clean = [json.dumps(e) for e in valid]
    mixed, expected_reasons = [], []
    for i, line in enumerate(clean):
        mixed.append(line)
        if i % 40 == 39 and valid[i]["time"] > 35:  # bad lines sprinkled after warm-up
            for bad, words in bad_lines(valid[i]["time"]):
                mixed.append(bad)
                expected_reasons.append(words)
    assert len(expected_reasons) >= 24
    config = write_config(tmp_path / "c.yaml", {"llama": DECODE_CONFIG})
    (tmp_path / "clean.jsonl").write_text("\n".join(clean) + "\n")
    (tmp_path / "mixed.jsonl").write_text("\n".join(mixed) + "\n")

    outputs = {
        name: run_recorded(config, [tmp_path / f"{name}.jsonl"], tmp_path / name)
        for name in ("clean", "mixed")
    }

    dead = outputs["mixed"]["dead"]
    assert outputs["clean"]["dead"] == []
    assert len(dead) == len(expected_reasons)
    for words in set(expected_reasons):
        matching = [d for d in dead if words.lower() in d["reason"].lower()]
        assert len(matching) == expected_reasons.count(words), (words, [d["reason"] for d in dead])
    # dead letters from the file say where they came from
    assert all(d["position"] for d in dead if d["source"] != "window")
    # every valid line was used and nothing was decided from a bad line
    assert outputs["mixed"]["decisions"] == outputs["clean"]["decisions"]
    assert outputs["mixed"]["ticks"] == outputs["clean"]["ticks"]
    # and they were counted
    assert f"{len(dead)} dead-lettered" in outputs["mixed"]["stderr"]
    assert f"{len(mixed)} events in" in outputs["mixed"]["stderr"]
