"""``ballast assign``: an assignment for a scenario file, and its quality."""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Mapping
from pathlib import Path

from assignors import (
    STRATEGIES,
    TopicPartition,
    assign,
    evaluate,
    member_lag,
)
from controller.cli.parsing import Arguments
from controller.tools.scenario import load_current, load_scenario


def _cmd_assign(args: argparse.Namespace) -> int:
    scenario = load_scenario(args.scenario)
    current = load_current(args.current) if args.current else scenario.current_map()
    lag = scenario.lag_map()
    ppt, subs = scenario.partitions_per_topic, scenario.subscriptions
    m_racks, p_racks = scenario.member_racks, scenario.partition_rack_map()
    caps = scenario.member_capacities
    started = time.perf_counter()
    result = assign(
        args.strategy, ppt, subs, current=current, lag=lag, member_racks=m_racks,
        partition_racks=p_racks, member_capacities=caps,
    )  # fmt: skip
    elapsed = time.perf_counter() - started
    quality = evaluate(
        result, ppt, subs, before=current, lag=lag, member_racks=m_racks,
        partition_racks=p_racks, member_capacities=caps,
    )  # fmt: skip
    # The previous assignment's cross-rack count, to read beside the new one.
    before = (
        evaluate(current, ppt, subs, member_racks=m_racks, partition_racks=p_racks).cross_rack
        if current
        else None
    )
    lags = member_lag(result, lag)
    if args.json:
        out = {
            "strategy": args.strategy,
            "assignment": {m: [[tp.topic, tp.partition] for tp in v] for m, v in result.items()},
            "member_lag": lags,
            "quality": quality._asdict(),
            "cross_rack_before": before,
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
    if m_racks:
        line = f"cross_rack={_fraction(quality.cross_rack, _held(result))}"
        if current and before is not None:
            line += f" (before {_fraction(before, _held(current))})"
        print(line)
    if caps:
        print(f"share_error={quality.share_error:.2f} partitions (largest distance from a share)")
    return 0


def _held(assignment: Mapping[str, list[TopicPartition]]) -> int:
    return sum(len(tps) for tps in assignment.values())


def _fraction(part: int, whole: int) -> str:
    return f"{part}/{whole} ({100 * part / whole if whole else 0.0:.1f}%)"


def _assign(p: argparse.ArgumentParser) -> None:
    p.add_argument("--strategy", choices=STRATEGIES, default="lagsticky", help="strategy")
    p.add_argument(
        "--scenario", type=Path, required=True, help="scenario JSON (see config/examples)"
    )
    p.add_argument(
        "--current", type=Path, help="previous assignment JSON; overrides the scenario's"
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_cmd_assign)


ARGUMENTS: dict[str, Arguments] = {"assign": _assign}
