"""Count options are bounded and refused in one line that names the option: ``run -w 100000``
started 100 000 worker threads until the process was killed without a message (exit 137), and
``replay --seed -1`` failed deep in numpy with ``expected non-negative integer``. (The parser
only: a run of the refused values is what this guards against.)"""

from __future__ import annotations

import pytest

from flows.cli import MAX_WORKERS, build_parser


def refusal(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(argv)
    assert exited.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    return lines[-1]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["run", "-w", "100000"], "argument -w/--workers: must be <= 128, got 100000"),
        (["run", "--workers", "129"], "argument -w/--workers: must be <= 128, got 129"),
        (["replay", "--seed", "-1"], "argument --seed: must be >= 0, got -1"),
        (["replay", "--decode", "1025"], "argument --decode: must be <= 1024, got 1025"),
        (["replay", "--prefill", "1e9"], "argument --prefill: expected int, got '1e9'"),
    ],
)
def test_count_options_out_of_bounds_are_refused_naming_the_option(argv, message, capsys):
    assert refusal(argv, capsys) == f"flowplanner {argv[0]}: error: {message}"


def test_the_bounds_themselves_are_accepted():
    run = ["run", "--config", "c.yaml", "--input", "in.jsonl"]
    args = build_parser().parse_args([*run, "-w", str(MAX_WORKERS)])
    assert args.workers == MAX_WORKERS == 128
    args = build_parser().parse_args(["replay", "--seed", "0", "--decode", "1024"])
    assert (args.seed, args.decode) == (0, 1024)
