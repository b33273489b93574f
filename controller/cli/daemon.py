"""``ballast run``, ``check-config`` and ``schema``: the daemon, its config, its records."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
from pathlib import Path

from controller import logs
from controller.cli.parsing import Arguments
from controller.config import Config, applied_overrides, load_config, misspelt_overrides
from controller.errors import InputError


def _cmd_run(args: argparse.Namespace) -> int:
    cfg = _runnable(load_config(args.config))
    logs.configure(cfg.logging.level, cfg.logging.format)
    for line in misspelt_overrides(os.environ):
        logs.get("ballast").warning("environment_not_read", problem=line)
    from controller.runtime.run import run_daemon  # noqa: PLC0415 - only `run` needs it

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
    from controller.wire.records import json_schemas  # noqa: PLC0415 - only `schema` needs it

    print(json.dumps(json_schemas(), indent=2, sort_keys=True))
    return 0


def _run(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--config", type=Path, default=Path("config/ballast.yaml"), help="YAML config file"
    )
    p.add_argument(
        "--record", type=Path, help="append each group's assignment inputs to this trace (JSONL)"
    )
    p.set_defaults(func=_cmd_run)


def _check_config(p: argparse.ArgumentParser) -> None:
    p.add_argument("config", type=Path, help="YAML config file")
    p.set_defaults(func=_cmd_check_config)


def _schema(p: argparse.ArgumentParser) -> None:
    p.set_defaults(func=_cmd_schema)


ARGUMENTS: dict[str, Arguments] = {
    "run": _run,
    "check-config": _check_config,
    "schema": _schema,
}
