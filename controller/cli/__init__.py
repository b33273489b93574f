"""The ballast command line: one entry point for the daemon, the demo, the operator
commands and the tools (each subcommand says what it does in ``--help``).

A command's module is imported only when that command runs (as pip loads its commands):
``ballast status`` costs the operator commands' imports, not the daemon's, the assignors'
or the demo's. ``BUILT_IN`` lists each command with its line of ``ballast --help``; its
module's ``ARGUMENTS`` adds the rest. Other packages add commands by entry point
(``COMMANDS``)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from importlib import import_module
from importlib.metadata import PackageNotFoundError, entry_points, version
from typing import NamedTuple

from controller.cli.parsing import Parser
from controller.errors import BROKEN_PIPE, INTERRUPTED, BallastError

COMMANDS = "ballast.commands"


class Command(NamedTuple):
    module: str  # its ARGUMENTS[name] adds the arguments and the handler
    help: str


_OPERATOR = "controller.cli.operator"
BUILT_IN: dict[str, Command] = {
    "assign": Command(
        "controller.cli.assign", "compute an assignment for a scenario file and report its quality"
    ),
    "run": Command("controller.cli.daemon", "run the controller daemon"),
    "check-config": Command(
        "controller.cli.daemon", "validate a daemon config file (and BALLAST_* overrides)"
    ),
    "demo": Command(
        "controller.cli.demo", "embedded brokers, the controller and a simulated fleet"
    ),
    "dev": Command(
        "controller.cli.dev", "embedded brokers left running, to try `ballast run` by hand"
    ),
    "status": Command(_OPERATOR, "groups this controller leads: members, lag, handoffs"),
    "describe": Command(
        _OPERATOR, "a group (or every group led), member by member (like kafka-consumer-groups)"
    ),
    "pause": Command(_OPERATOR, "stop publishing for a group (events wait until resume)"),
    "resume": Command(_OPERATOR, "publish again for a paused group"),
    "rebalance": Command(_OPERATOR, "rebalance a group now, with a fresh look at lag"),
    "drain": Command(_OPERATOR, "move every partition off a member and keep it empty"),
    "undrain": Command(_OPERATOR, "let a drained member take partitions again"),
    "constraints": Command(
        _OPERATOR,
        "show or change a group's pins, caps and rack overrides (kept across restarts)",
    ),
    "worker": Command("controller.cli.worker", "a consumer process that logs what it processes"),
    "audit": Command(
        "controller.cli.history", "check the invariants against the assignments topic's history"
    ),
    "conformance": Command(
        "controller.cli.conformance",
        "check a client process against the member protocol, rule by rule",
    ),
    "keys": Command(
        "controller.cli.history", "the controller's signing key pair, or a member's key"
    ),
    "schema": Command("controller.cli.daemon", "print the JSON Schemas of the wire records"),
}

#: ``build_parser(EVERY)``: every command with its arguments (docs, tests).
EVERY = None


def build_parser(only: str | None = EVERY) -> argparse.ArgumentParser:
    """``ballast``'s parser: every command listed, the arguments of ``only`` alone (of
    every command when ``EVERY``; of none for ``""``, enough for ``--help``)."""
    parser = Parser(
        prog="ballast",
        description="Ballast: lag-aware sticky partition assignment for Kafka consumer "
        "fleets that use manual assign().",
        epilog="Exit codes: 0 done, 1 a check or the daemon failed, 2 bad input or usage, "
        "3 a broker or the controller unreachable, 4 refused by the controller, 130 Ctrl-C, "
        "141 the output pipe closed.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, command in BUILT_IN.items():
        p = sub.add_parser(name, help=command.help)
        if only is EVERY or only == name:
            import_module(command.module).ARGUMENTS[name](p)
    if only not in BUILT_IN:
        for entry in entry_points(group=COMMANDS):
            try:
                register = entry.load()  # e.g. ``ballast pipeline`` (pipeline/commands.py)
            except ImportError:
                continue  # declared, but its package is not in this installation
            register(sub)
    return parser


def _command_in(argv: Sequence[str]) -> str:
    """The command ``argv`` names: its first word that is not an option (``ballast``'s
    own options take no value), or ``""``."""
    return next((word for word in argv if not word.startswith("-")), "")


def _version() -> str:
    try:
        return version("ballast")
    except PackageNotFoundError:
        return "unknown (not installed)"


def main(argv: Sequence[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else list(argv)
    args = build_parser(_command_in(words)).parse_args(words)
    try:
        code: int = args.func(args)
        sys.stdout.flush()
    except BallastError as exc:
        print(f"ballast: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("ballast: interrupted", file=sys.stderr)
        return INTERRUPTED
    except BrokenPipeError:
        # The reader went away (``ballast schema | head``): no traceback, and no second
        # error when Python flushes stdout at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return BROKEN_PIPE
    return code
