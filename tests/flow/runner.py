"""Run the real ``flowplanner`` CLI (the bytewax runtime) as a subprocess, as a user would."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml


def write_config(path: Path, deployments: dict[str, dict]) -> Path:
    path.write_text(yaml.safe_dump({"deployments": deployments}))
    return path


def flowplanner(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "flows.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def start_flowplanner(*args: str) -> subprocess.Popen[str]:
    """The CLI as a long-lived process (a live worker, the fleet); stdout and stderr piped."""
    return subprocess.Popen(
        [sys.executable, "-m", "flows.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
