"""The ballast command line: one entry point for the daemon, the demo, the operator
commands and the tools (each subcommand says what it does in ``--help``). One module
per command family; other packages add theirs by entry point (``COMMANDS``)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, entry_points, version

from controller.cli.assign import add_assign
from controller.cli.conformance import add_conformance
from controller.cli.daemon import add_run, add_schema
from controller.cli.fleet import add_demo, add_dev, add_worker
from controller.cli.history import add_audit, add_keys
from controller.cli.operator import add_operator
from controller.cli.parsing import Parser
from controller.errors import BROKEN_PIPE, INTERRUPTED, BallastError

COMMANDS = "ballast.commands"


def build_parser() -> argparse.ArgumentParser:
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
    add_assign(sub)
    add_run(sub)
    add_demo(sub)
    add_dev(sub)
    add_operator(sub)
    add_worker(sub)
    add_audit(sub)
    add_conformance(sub)
    add_keys(sub)
    add_schema(sub)

    for command in entry_points(group=COMMANDS):
        try:
            register = command.load()  # e.g. ``ballast pipeline`` (pipeline/commands.py)
        except ImportError:
            continue  # declared, but its package is not in this installation
        register(sub)
    return parser


def _version() -> str:
    try:
        return version("ballast")
    except PackageNotFoundError:
        return "unknown (not installed)"


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
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
