"""The ``ballast`` command line."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from assignors import STRATEGIES, assign
from assignors.quality import evaluate, member_lag

from .scenario import InputError, load_current, load_scenario


def _cmd_assign(args: argparse.Namespace) -> int:
    scenario = load_scenario(args.scenario)
    current = load_current(args.current) if args.current else scenario.current_map()
    lag = scenario.lag_map()
    started = time.perf_counter()
    result = assign(
        args.strategy,
        scenario.partitions_per_topic,
        scenario.subscriptions,
        current=current,
        lag=lag,
    )
    elapsed = time.perf_counter() - started
    quality = evaluate(
        result, scenario.partitions_per_topic, scenario.subscriptions, before=current, lag=lag
    )
    lags = member_lag(result, lag)
    if args.json:
        out = {
            "strategy": args.strategy,
            "assignment": {m: [[tp.topic, tp.partition] for tp in v] for m, v in result.items()},
            "member_lag": lags,
            "quality": quality._asdict(),
            "seconds": elapsed,
        }
        print(json.dumps(out, indent=2))
        return 0
    width = max((len(m) for m in result), default=6)
    print(
        f"strategy {args.strategy}  ({scenario.description})"
        if scenario.description
        else f"strategy {args.strategy}"
    )
    for member, parts in result.items():
        shown = ", ".join(f"{tp.topic}-{tp.partition}" for tp in parts) or "-"
        print(f"  {member:<{width}}  {len(parts):>4} partitions  lag {lags[member]:>10}  {shown}")
    print(
        f"valid={quality.valid} balanced={quality.balanced} count_spread={quality.count_spread} "
        f"moved={quality.moved} max_member_lag={quality.max_member_lag} "
        f"lag_skew={quality.lag_skew:.3f} time={elapsed * 1000:.2f}ms"
    )
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ballast", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser(
        "assign", help="compute an assignment for a scenario file and report its quality"
    )
    p.add_argument("--strategy", choices=STRATEGIES, default="lagsticky")
    p.add_argument(
        "--scenario", type=Path, required=True, help="scenario JSON (see config/examples)"
    )
    p.add_argument(
        "--current", type=Path, help="previous assignment JSON; overrides the scenario's"
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_cmd_assign)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code: int = args.func(args)
    except InputError as exc:
        print(f"ballast: error: {exc}", file=sys.stderr)
        return 2
    return code


if __name__ == "__main__":
    sys.exit(main())
