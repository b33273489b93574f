"""``ballast pipeline lag|backtest|synth`` (parsed by ``pipeline.commands``)."""

from __future__ import annotations

import argparse

from assignors import STRATEGIES
from controller import logs
from controller.config import load_config
from controller.errors import InputError
from controller.wire.records import DecodeError

from . import lagjob
from .traces import synthesize, write_jsonl


def run(args: argparse.Namespace) -> int:
    if args.job == "lag":
        cfg = load_config(args.config)
        logs.configure(cfg.logging.level, cfg.logging.format)
        return lagjob.run(cfg, args.checkpoint)
    if args.job == "synth":
        if args.groups < 1 or args.max_members < 2 or args.steps < 0:
            raise InputError("synth: --groups >= 1, --max-members >= 2, --steps >= 0")
        n = write_jsonl(
            synthesize(args.groups, seed=args.seed, max_members=args.max_members, steps=args.steps),
            args.out,
        )
        print(f"wrote {n} events for {args.groups} groups to {args.out}")
        return 0
    return _backtest(args)


def _backtest(args: argparse.Namespace) -> int:
    from .backtest import backtest  # noqa: PLC0415 (matplotlib only for this job)
    from .session import session  # noqa: PLC0415

    given = list(STRATEGIES) if args.strategies is None else args.strategies.split(",")
    strategies = [s.strip() for s in given if s.strip()]
    unknown = sorted(set(strategies) - set(STRATEGIES))
    if unknown or not strategies:
        raise InputError(
            f"backtest: --strategies: unknown {', '.join(unknown) or '(none given)'}; "
            f"valid: {', '.join(STRATEGIES)}"
        )
    if not args.trace.is_file():
        raise InputError(f"backtest: --trace {args.trace}: no such file")
    if args.tasks < 1:
        raise InputError("backtest: --tasks must be at least 1")
    spark = session(args.master, args.tasks)
    try:
        report = backtest(spark, args.trace, strategies, args.out, args.tasks)
    except DecodeError as exc:
        raise InputError(str(exc)) from exc
    finally:
        spark.stop()
    print((args.out / "summary.md").read_text())
    return 1 if report.errors else 0
