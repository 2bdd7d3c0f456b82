"""The ``flowplanner`` command line. Each subcommand lives in ``flows/commands/<name>.py``."""

from __future__ import annotations

import argparse
import importlib
import math
import os
import signal
import sys
from collections.abc import Callable
from types import FrameType
from typing import TypeVar

# Small-matrix BLAS calls (statsmodels fits in the load predictors) run ~10x slower with
# OpenBLAS worker threads on a busy machine; set before any command module imports numpy.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

COMMANDS = {
    "ack": "flows.commands.ack",
    "bench": "flows.commands.bench",
    "decisions": "flows.commands.decisions",
    "demo": "flows.commands.demo",
    "fleet": "flows.commands.fleet",
    "forecast-bench": "flows.commands.forecast_bench",
    "relay": "flows.commands.relay",
    "replay": "flows.commands.replay",
    "run": "flows.commands.run",
    "schema": "flows.commands.schema",
}
"""Each subcommand's name and the module that defines ``add_to(subparsers)``, which adds that
subcommand's parser and sets its ``func``."""


_Number = TypeVar("_Number", int, float)


def _number(
    kind: type[_Number], text: str, low: float, strict: bool, high: float | None = None
) -> _Number:
    try:
        value = kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {kind.__name__}, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be finite, got {text!r}")
    if (value <= low) if strict else (value < low):
        raise argparse.ArgumentTypeError(f"must be {'>' if strict else '>='} {low:g}, got {text}")
    if high is not None and value > high:
        raise argparse.ArgumentTypeError(f"must be <= {high:g}, got {text}")
    return value


def positive_int(text: str) -> int:
    """Argument type: an integer >= 1 (argparse names the option in its error).

    >>> positive_int("3")
    3
    >>> positive_int("0")
    Traceback (most recent call last):
    argparse.ArgumentTypeError: must be > 0, got 0
    """
    return _number(int, text, 0, strict=True)


def non_negative_int(text: str) -> int:
    """Argument type: an integer >= 0."""
    return _number(int, text, 0, strict=False)


def positive_float(text: str) -> float:
    """Argument type: a finite number > 0."""
    return _number(float, text, 0, strict=True)


def non_negative_float(text: str) -> float:
    """Argument type: a finite number >= 0."""
    return _number(float, text, 0, strict=False)


def bounded(
    kind: type[_Number], low: float, high: float, *, strict_low: bool = False
) -> Callable[[str], _Number]:
    """Argument type: a finite ``kind`` from ``low`` (excluded with ``strict_low``) to ``high``.

    >>> bounded(float, 0.001, 1000)("1e-300")
    Traceback (most recent call last):
    argparse.ArgumentTypeError: must be >= 0.001, got 1e-300
    >>> bounded(int, 1, 1000)("1001")
    Traceback (most recent call last):
    argparse.ArgumentTypeError: must be <= 1000, got 1001
    """

    def parse(text: str) -> _Number:
        return _number(kind, text, low, strict_low, high)

    return parse


MAX_WORKERS = 128
"""The most bytewax worker threads ``-w/--workers`` starts in one process: more than the
cores of any host a planner runs on. Each costs memory (256 took 0.9 GB on a tiny input) and
100 000 had the process killed for want of memory with no message."""


def worker_count(text: str) -> int:
    """Argument type: a number of worker threads, 1 to :data:`MAX_WORKERS`.

    >>> worker_count("100000")
    Traceback (most recent call last):
    argparse.ArgumentTypeError: must be <= 128, got 100000
    """
    return _number(int, text, 0, strict=True, high=MAX_WORKERS)


def port_number(text: str) -> int:
    """Argument type: a TCP port, 0 (any free port) to 65535.

    >>> port_number("65536")
    Traceback (most recent call last):
    argparse.ArgumentTypeError: must be <= 65535, got 65536
    """
    return _number(int, text, 0, strict=False, high=65535)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The argument parser of ``command`` alone, or of every subcommand (``None``, or a name
    that is not one: ``--help`` and the invalid-choice error list them all). Only the modules
    of the subcommands it holds are imported: a command starts without loading the others'
    (up to a second and a half of imports on a busy 2-core host).

    >>> build_parser("schema").parse_args(["schema", "ScalingDecision"]).type
    'ScalingDecision'
    """
    parser = argparse.ArgumentParser(
        prog="flowplanner",
        description="SLA-aware autoscaling planner for LLM inference fleets (bytewax dataflow).",
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    names = [command] if command in COMMANDS else list(COMMANDS)
    for name in names:
        importlib.import_module(COMMANDS[name]).add_to(subparsers)
    return parser


SIGPIPE_STATUS = 141
"""Exit status when the reader of stdout went away (``| head``), as for a command SIGPIPE kills."""

LONG_LIVED_COMMANDS = frozenset({"relay", "run"})
"""Commands that run until stopped. SIGTERM or SIGINT while one starts — Python loading the
planner's modules (a second or two on a busy host), reading its config, reaching its brokers,
reading its outputs back — ends it with exit status 0 and a line, as it ends a running one
(``flows.commands.run.run_until_stopped`` takes the signals over for the run); their default
killed it (exit status 143: a pod stopped while starting reported a failure)."""


class StoppedWhileStarting(BaseException):
    """SIGTERM or SIGINT came before the dataflow started (its name is the message); a
    ``BaseException``, as ``KeyboardInterrupt``, so no ``except Exception`` swallows it.

    >>> try:
    ...     _stop_while_starting(signal.SIGTERM, None)
    ... except Exception:
    ...     print("swallowed")
    ... except StoppedWhileStarting as stopped:
    ...     print(f"stopped by {stopped} while starting")
    stopped by SIGTERM while starting
    """


def _stop_while_starting(signum: int, frame: FrameType | None) -> None:
    raise StoppedWhileStarting(signal.Signals(signum).name)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``flowplanner`` console script; returns the exit status. A
    long-lived command takes SIGTERM and SIGINT before it imports its modules."""
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in LONG_LIVED_COMMANDS:
        return _command(argv)
    signals = (signal.SIGTERM, signal.SIGINT)
    previous = {sig: signal.signal(sig, _stop_while_starting) for sig in signals}
    try:
        return _command(argv)
    except StoppedWhileStarting as stopped:
        print(f"flowplanner {argv[0]}: stopped by {stopped} while starting", file=sys.stderr)
        return 0
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _command(argv: list[str]) -> int:
    args = build_parser(argv[0] if argv else None).parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except BrokenPipeError:
        # Whoever read the output stopped (``| head``); nothing more can be shown. Point stdout
        # at /dev/null so the interpreter's final flush does not complain a second time.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return SIGPIPE_STATUS
    except OSError as exc:  # a file or socket the machine refuses: say which, in one line
        print(f"flowplanner {args.command}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
