"""Run the real ``flowplanner`` CLI (the bytewax runtime) as a subprocess, as a user would."""

from __future__ import annotations

import contextlib
import functools
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

from tests.services.process import wait_until


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


def start_flowplanner(*args: str, stderr: Path | None = None) -> subprocess.Popen[str]:
    """The CLI as a long-lived process (a live worker, the fleet); stdout piped, stderr piped or
    written to the file ``stderr`` (to be read while the process runs)."""
    with open(stderr, "w") if stderr is not None else contextlib.nullcontext() as err:
        return subprocess.Popen(
            [sys.executable, "-m", "flows.cli", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE if err is None else err,
            text=True,
        )


METRICS_LINE = re.compile(r"^flowplanner run: metrics on http://[^/]+:(\d+)/metrics$", re.MULTILINE)


def metrics_port(process: subprocess.Popen[str], stderr: Path) -> int:
    """The port a ``flowplanner run --metrics-port 0`` serves on, from the line it writes to its
    ``stderr`` file once it listens (a port picked by the test and bound later by the process
    could be taken by someone else in between)."""

    def announced() -> re.Match[str] | None:
        if process.poll() is not None:
            raise AssertionError(
                f"flowplanner exited with {process.returncode}: {stderr.read_text()}"
            )
        return METRICS_LINE.search(stderr.read_text())

    return int(wait_until(announced, "the metrics port", timeout_s=120).group(1))


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def run_recorded(config: Path, inputs: list[Path], out: Path) -> dict:
    """``flowplanner run`` over recorded ``inputs`` with file outputs, on a single worker (in
    ``out``) and as a 2-worker cluster (in ``out/2-workers``): its decisions, ticks, dead
    letters (lists of records) and its stderr, of the single worker.

    Both runs must write the same records. Each deployment lives on one worker, so its
    decisions and tick records are compared in the order it wrote them; only the interleaving
    of different deployments (different workers) may differ. Dead letters are compared as a
    set: they are made where an input is refused — on the source's worker when it cannot be
    admitted, on its deployment's worker when it is late or beyond the engine's limits."""
    one = _run_once(config, inputs, out, workers=1)
    two = _run_once(config, inputs, out / "2-workers", workers=2)
    for name in ("decisions", "ticks"):
        assert by_deployment(two[name]) == by_deployment(one[name]), (
            f"{name} of 2 workers differ from a single worker's"
        )
    assert sorted(map(canonical, two["dead"])) == sorted(map(canonical, one["dead"])), (
        "dead letters of 2 workers differ from a single worker's"
    )
    return one


@functools.cache
def run_recorded_text(config: Path, recording: str) -> dict:
    """:func:`run_recorded` of one recording given as its JSONL text, run once per test
    process: many tests compare what they split or poison with the same whole recording."""
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "whole.jsonl"
        path.write_text(recording)
        return run_recorded(config, [path], Path(scratch) / "out")


def canonical(record: dict) -> str:
    """A record as JSON with sorted keys: an order-free comparison key."""
    return json.dumps(record, sort_keys=True)


def by_deployment(records: list[dict]) -> dict[str | None, list[dict]]:
    """``records`` grouped by deployment, each deployment's in the order they were written."""
    grouped: dict[str | None, list[dict]] = {}
    for record in records:
        grouped.setdefault(record.get("deployment"), []).append(record)
    return grouped


def _run_once(config: Path, inputs: list[Path], out: Path, workers: int) -> dict:
    args = ["run", "--config", str(config)]
    for path in inputs:
        args += ["--input", str(path)]
    out.mkdir(parents=True, exist_ok=True)
    files = {name: out / f"{name}.jsonl" for name in ("decisions", "ticks", "dead")}
    done = flowplanner(
        *args,
        *("--output", str(files["decisions"]), "--ticks", str(files["ticks"])),
        *("--dead-letters", str(files["dead"]), "-w", str(workers)),
    )
    assert done.returncode == 0, f"-w {workers}: {done.stderr}"
    return {name: read_jsonl(path) for name, path in files.items()} | {"stderr": done.stderr}
