"""``ballast run``, ``check-config`` and ``schema``: the daemon, its config, its records."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
from pathlib import Path

from controller import logs
from controller.cli.parsing import Commands
from controller.config import Config, applied_overrides, load_config, misspelt_overrides
from controller.errors import InputError
from controller.runtime.run import run_daemon
from controller.wire.records import json_schemas


def _cmd_run(args: argparse.Namespace) -> int:
    cfg = _runnable(load_config(args.config))
    logs.configure(cfg.logging.level, cfg.logging.format)
    for line in misspelt_overrides(os.environ):
        logs.get("ballast").warning("environment_not_read", problem=line)
    return asyncio.run(run_daemon(cfg, args.record))


def _runnable(cfg: Config) -> Config:
    """The config, if the daemon may run on it (secure by default: see the refusal)."""
    refusal = cfg.signing.unsigned_refusal()
    if refusal is not None:
        raise InputError(refusal)
    return cfg


def _cmd_check_config(args: argparse.Namespace) -> int:
    cfg = _runnable(load_config(args.config))
    misspelt = misspelt_overrides(os.environ)
    if misspelt:
        raise InputError("\n".join(misspelt))
    print(
        f"{args.config}: OK ({len(cfg.groups)} group(s): {', '.join(g.name for g in cfg.groups)})"
    )
    for line in applied_overrides(os.environ):
        print(f"  overridden by the environment: {line}")
    return 0


def _cmd_schema(_: argparse.Namespace) -> int:
    print(json.dumps(json_schemas(), indent=2, sort_keys=True))
    return 0


def add_run(sub: Commands) -> None:
    """``run`` and ``check-config``."""
    p = sub.add_parser("run", help="run the controller daemon")
    p.add_argument(
        "--config", type=Path, default=Path("config/ballast.yaml"), help="YAML config file"
    )
    p.add_argument(
        "--record", type=Path, help="append each group's assignment inputs to this trace (JSONL)"
    )
    p.set_defaults(func=_cmd_run)

    p = sub.add_parser(
        "check-config", help="validate a daemon config file (and BALLAST_* overrides)"
    )
    p.add_argument("config", type=Path, help="YAML config file")
    p.set_defaults(func=_cmd_check_config)


def add_schema(sub: Commands) -> None:
    """``schema``."""
    p = sub.add_parser("schema", help="print the JSON Schemas of the wire records")
    p.set_defaults(func=_cmd_schema)
