"""``ballast`` finds the subcommands other packages register (the controller imports
none of them: ``controller → pipeline`` is a forbidden import), and a command imports
only its own module."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from importlib import import_module
from importlib.metadata import entry_points

import pytest

from controller.cli import BUILT_IN, COMMANDS, EVERY, _command_in, build_parser


def test_pipeline_subcommand_comes_from_its_entry_point() -> None:
    assert {e.name: e.value for e in entry_points(group=COMMANDS)} == {
        "pipeline": "pipeline.commands:register"
    }
    args = build_parser().parse_args(["pipeline", "synth", "--out", "trace.jsonl"])
    assert (args.command, args.job, args.groups) == ("pipeline", "synth", 500)
    assert args.func.__module__ == "pipeline.commands"
    # Named, the entry point's command is found as when every command is built.
    args = build_parser("pipeline").parse_args(["pipeline", "backtest", "--trace", "t.jsonl"])
    assert (args.job, args.strategies) == ("backtest", None)  # None: every strategy


def _commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(sub.choices)


def _listing(parser: argparse.ArgumentParser) -> list[tuple[str, str | None]]:
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return [(c.dest, c.help) for c in sub._choices_actions]


def test_each_built_in_command_is_defined_by_the_module_that_runs_it() -> None:
    defined = {
        (module, name)
        for module in {c.module for c in BUILT_IN.values()}
        for name in import_module(module).ARGUMENTS
    }
    assert defined == {(c.module, name) for name, c in BUILT_IN.items()}


def test_a_command_built_alone_is_the_command_built_with_every_other() -> None:
    every = build_parser(EVERY)
    assert _listing(build_parser("")) == _listing(every)  # what `ballast --help` lists
    for name, full in _commands(every).items():
        alone = _commands(build_parser(name))[name]
        assert alone.format_help() == full.format_help(), name
        assert alone.get_default("func") is full.get_default("func"), name


@pytest.mark.parametrize(
    ("argv", "command"),
    [
        ([], ""),
        (["--version"], ""),
        (["-h"], ""),
        (["status", "--watch", "2"], "status"),
        (["--help", "describe"], "describe"),
        (["dev", "up"], "dev"),
    ],
)
def test_the_command_is_the_first_word_not_an_option(argv: list[str], command: str) -> None:
    assert _command_in(argv) == command


#: What an operator command must not load: the daemon's runtime, an HTTP server, the
#: assignors (and numpy under them), the Kafka and MQTT clients.
HEAVY = ("controller.runtime", "aiohttp", "assignors", "numpy", "aiokafka", "aiomqtt")


@pytest.mark.parametrize(
    "argv",
    [
        ["--version"],
        ["--help"],
        ["status", "--url", "http://127.0.0.1:9", "-o", "json"],
        ["describe", "g", "--url", "http://127.0.0.1:9"],
        ["drain", "g", "m", "--url", "http://127.0.0.1:9"],
    ],
    ids=lambda argv: argv[0],
)
def test_operator_commands_load_nothing_of_the_daemon(argv: list[str]) -> None:
    probe = (
        "import json, sys\n"
        "from controller.cli import main\n"
        "try:\n"
        f"    code = main({argv!r})\n"
        "except SystemExit as exc:\n"
        "    code = exc.code\n"
        "print(json.dumps([code, sorted(sys.modules)]), file=sys.stderr)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=False, timeout=60
    )
    code, loaded = json.loads(done.stderr.splitlines()[-1])
    # It ran (help and version: 0; an operator command: the controller unreachable, 3).
    assert code == (0 if argv[0].startswith("-") else 3), done.stderr
    heavy = [m for m in loaded if m.split(".")[0] in HEAVY or m.startswith(HEAVY)]
    assert heavy == [], heavy
