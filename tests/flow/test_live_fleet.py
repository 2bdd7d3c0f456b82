"""End to end over the production protocols: the simulated fleet publishes FPMs over ZMQ and
events over Kafka in real time; ``flowplanner run`` (ZMQ + Kafka in, Kafka out) scales it."""

from __future__ import annotations

import re
import signal
import threading

from connectors.kafka import read_decisions
from tests.flow.runner import start_flowplanner, write_config
from tests.services.process import wait_until

FLEET_STARTED = re.compile(r"fleet 'sim': FPMs on (\S+) \(prefill\), (\S+) \(decode\);")


def test_planner_scales_the_live_fleet(tmp_path, kafka_bootstrap, kafka_topic):
    events, decisions = f"{kafka_topic}-events", f"{kafka_topic}-decisions"
    config = write_config(
        tmp_path / "c.yaml",
        {
            "sim": {
                "mode": "disagg",
                "optimization_target": "sla",
                "ttft_ms": 500,
                "itl_ms": 50,
                "enable_load_scaling": True,
                "enable_throughput_scaling": False,
                "max_gpu_budget": -1,
                "allowed_lateness_seconds": 1.0,
            }
        },
    )
    fleet = start_flowplanner(
        "fleet",
        "--config",
        str(config),
        "--synthetic",
        "poisson",
        "--rate",
        "40",
        "--duration",
        "300",  # longer than the test waits: the fleet still runs when the decisions come
        "--kafka",
        kafka_bootstrap,
        "--events-topic",
        events,
        "--decisions-topic",
        decisions,
        # the fleet binds free ports it picks and names them (a port the test picked could be
        # taken before the fleet process binds it)
        "--prefill-publish",
        "tcp://127.0.0.1:*",
        "--decode-publish",
        "tcp://127.0.0.1:*",
        "--startup-delay",
        "5",
    )
    fleet_log: list[str] = []
    threading.Thread(target=lambda: fleet_log.extend(fleet.stderr), daemon=True).start()
    planner = None
    try:
        # the fleet says so once its topics exist and it follows the decisions topic
        started = wait_until(
            lambda: [m for line in fleet_log if (m := FLEET_STARTED.match(line))],
            "the fleet to start",
            timeout_s=120.0,
        )
        prefill, decode = started[0].groups()
        planner = start_flowplanner(
            "run",
            "--config",
            str(config),
            "--input",
            f"zmq+{prefill}?deployment=sim&role=prefill",
            "--input",
            f"zmq+{decode}?deployment=sim&role=decode",
            "--input",
            f"kafka://{kafka_bootstrap}/{events}",
            "--output",
            f"kafka://{kafka_bootstrap}/{decisions}",
            "--dead-letters",
            str(tmp_path / "dead.jsonl"),
        )

        # the planner starts, decides and the fleet applies it: minutes on a loaded machine,
        # and the test ends as soon as it sees that happen
        def more_prefill() -> list:
            seen = list(read_decisions(kafka_bootstrap, decisions))
            return seen if any(d.num_prefill and d.num_prefill > 1 for d in seen) else []

        seen = wait_until(more_prefill, "a decision for 2+ prefill", timeout_s=240, interval_s=2.0)
        # 40 req/s of 3000-token prompts overload one prefill engine: the planner adds some
        assert any(d.reason == "scale_up" and d.num_prefill >= 2 for d in seen), seen
        assert [d.decision_id for d in seen] == list(range(1, len(seen) + 1))
        # and the fleet reads the decisions back and applies them
        wait_until(
            lambda: any("applied" in line for line in fleet_log),
            "the fleet to apply a decision",
            timeout_s=240,
            interval_s=0.5,
        )
        assert any("fleet: applied" in line and " #1 " in line for line in fleet_log)
    finally:
        for process in (planner, fleet):  # compose stops the fleet with SIGTERM
            if process is not None:
                process.send_signal(signal.SIGTERM if process is fleet else signal.SIGINT)
        if planner is not None:
            _, err = planner.communicate(timeout=30)
            assert planner.returncode == 0, err
            assert "dead-lettered" in err
        out, _ = fleet.communicate(timeout=30)
    assert fleet.returncode == 0, "".join(fleet_log)
    # the fleet applied what it read: its summary shows more than one prefill replica
    assert re.search(r"max replicas .*prefill [2-9]", out), out
