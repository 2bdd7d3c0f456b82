"""``--ticks``, ``--dead-letters`` and ``--output`` at paths that are not regular files
(``/dev/null``, ``/dev/stdout`` piped, a FIFO): written line by line with a flush, never
truncated nor fsynced (bytewax's ``FileSink`` did both, and the run died at its first record);
a FIFO that no process reads is refused at start, in one line, instead of hanging the run.
The real CLI as a subprocess, as a user would run it."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from tests.flow.runner import flowplanner, start_flowplanner

REPO = Path(__file__).resolve().parents[2]
CONFIG = str(REPO / "examples/decode.yaml")
RECORDING = REPO / "examples/decode_burst.jsonl"
RUN = ("run", "--config", CONFIG)


@pytest.fixture(scope="module")
def with_a_bad_line(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The example recording with one line that is not JSON (a dead letter) in its middle."""
    lines = RECORDING.read_text().splitlines(keepends=True)
    path = tmp_path_factory.mktemp("input") / "burst_bad.jsonl"
    path.write_text("".join(lines[:100]) + "not json\n" + "".join(lines[100:]))
    return str(path)


def assert_ran_to_the_end(done: subprocess.CompletedProcess) -> None:
    assert done.returncode == 0, done.stderr
    assert "panicked" not in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert "1 dead-lettered, 1 decisions" in done.stderr, done.stderr


@pytest.mark.parametrize("option", ["--ticks", "--dead-letters", "--output"])
def test_dev_null_takes_the_records_and_the_run_goes_on(with_a_bad_line, option):
    done = flowplanner(*RUN, "--input", with_a_bad_line, option, os.devnull)
    assert_ran_to_the_end(done)


def test_ticks_to_a_piped_stdout_are_the_records_a_file_gets(tmp_path, with_a_bad_line):
    as_file = tmp_path / "ticks.jsonl"
    assert_ran_to_the_end(flowplanner(*RUN, "--input", with_a_bad_line, "--ticks", str(as_file)))
    # the subprocess's stdout is a pipe; decisions (the default output) are on it as well
    done = flowplanner(*RUN, "--input", with_a_bad_line, "--ticks", "/dev/stdout")
    assert_ran_to_the_end(done)
    piped = [line for line in done.stdout.splitlines() if line.startswith("{")]
    assert piped == as_file.read_text().splitlines()


def test_a_fifo_without_a_reader_is_refused_in_one_line(tmp_path):
    fifo = tmp_path / "ticks.fifo"
    os.mkfifo(fifo)
    done = flowplanner(*RUN, "--input", str(RECORDING), "--ticks", str(fifo), timeout=60)
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        f"flowplanner run: [Errno 6] no process reads this FIFO: '{fifo}'"
    ]


def test_a_fifo_with_a_reader_gets_the_records_a_file_gets(tmp_path, with_a_bad_line):
    as_file = tmp_path / "ticks.jsonl"
    assert_ran_to_the_end(flowplanner(*RUN, "--input", with_a_bad_line, "--ticks", str(as_file)))
    fifo = tmp_path / "ticks.fifo"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # its reader is there before the run
    planner = start_flowplanner(*RUN, "--input", with_a_bad_line, "--ticks", str(fifo))
    got = bytearray()
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            try:
                chunk = os.read(reader, 1 << 16)
            except BlockingIOError:  # the planner holds the FIFO open: nothing new yet
                chunk = None
            if chunk:
                got += chunk
            elif chunk == b"" and planner.poll() is not None:  # no writer left, and done
                break
            else:
                time.sleep(0.05)
    finally:
        os.close(reader)
        planner.kill()
    _, stderr = planner.communicate()
    assert planner.returncode == 0, stderr
    assert got.decode().splitlines() == as_file.read_text().splitlines()
