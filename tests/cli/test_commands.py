"""The command table of ``flows.cli``: every name is the subcommand its module adds, a command
loads only its own module, and the top level still lists every command."""

from __future__ import annotations

import subprocess
import sys

from flows.cli import COMMANDS, build_parser
from tests.flow.runner import flowplanner


def subcommands(parser) -> list[str]:
    return list(next(a for a in parser._actions if a.dest == "command").choices)


def test_each_name_is_the_subcommand_its_module_adds():
    for name in COMMANDS:
        assert subcommands(build_parser(name)) == [name]
    assert subcommands(build_parser()) == list(COMMANDS)
    assert subcommands(build_parser("no-such-command")) == list(COMMANDS)


def test_a_command_loads_only_its_own_module():
    probe = (
        "import sys; from flows.cli import build_parser; build_parser('schema'); "
        "print(sorted(m for m in sys.modules if m.startswith('flows.commands.')))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["['flows.commands.schema']"]


def test_help_and_an_unknown_command_name_every_command():
    listed = flowplanner("--help").stdout
    assert all(name in listed for name in COMMANDS)
    done = flowplanner("no-such-command")
    assert done.returncode == 2
    assert "invalid choice: 'no-such-command'" in done.stderr
    assert all(repr(name) in done.stderr for name in COMMANDS)
    done = flowplanner("schema", "--no-such-option")
    assert (done.returncode, done.stderr.splitlines()[-1]) == (
        2,
        "flowplanner: error: unrecognized arguments: --no-such-option",
    )
