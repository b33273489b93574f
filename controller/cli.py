"""The ``ballast`` command line."""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import time
from collections.abc import Sequence
from importlib.metadata import entry_points
from pathlib import Path

from assignors import STRATEGIES, assign
from assignors.quality import evaluate, member_lag
from controller import logs
from controller.client.worker import run_worker
from controller.errors import InputError
from controller.runtime import heap
from controller.runtime.config import Config, load_config
from controller.runtime.daemon import Controller
from controller.runtime.http import bound_port, serve
from controller.tools.audit import run_audit
from controller.tools.demo import run_demo
from controller.tools.scenario import load_current, load_scenario
from controller.wire.records import json_schemas


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


def _cmd_check_config(args: argparse.Namespace) -> int:
    cfg = load_config(args.config)
    print(
        f"{args.config}: OK ({len(cfg.groups)} group(s): {', '.join(g.name for g in cfg.groups)})"
    )
    return 0


def _cmd_schema(_: argparse.Namespace) -> int:
    print(json.dumps(json_schemas(), indent=2, sort_keys=True))
    return 0


def _cmd_run(args: argparse.Namespace) -> int:
    cfg = load_config(args.config)
    logs.configure(cfg.logging.level, cfg.logging.format)
    return asyncio.run(run_daemon(cfg, args.record))


async def run_daemon(cfg: Config, record: Path | None = None) -> int:
    """Run until SIGTERM/SIGINT, then drain in-flight publication and exit 0."""
    log = logs.get("ballast")
    heap.configure()
    controller = Controller(cfg, record=record)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    runner = await serve(controller, cfg.http.host, cfg.http.port)
    log.info("http_listening", host=cfg.http.host, port=bound_port(runner))
    try:
        await controller.start()
        stopping = asyncio.create_task(stop.wait())
        failing = asyncio.create_task(controller.failed.wait())
        await asyncio.wait({stopping, failing}, return_when=asyncio.FIRST_COMPLETED)
        stopping.cancel()
        failing.cancel()
        log.info("shutting_down")
    finally:
        await controller.stop()
        await runner.cleanup()
    return 1 if controller.failed.is_set() else 0


def _cmd_demo(args: argparse.Namespace) -> int:
    if args.members < 3 or args.partitions < 2 or args.duration < 0 or args.pace <= 0:
        raise InputError(
            "demo: --members must be >= 3, --partitions >= 2, --duration >= 0, --pace > 0"
        )
    try:
        asyncio.run(
            run_demo(args.members, args.partitions, args.duration, args.http_port, args.pace)
        )
    except KeyboardInterrupt:
        print("interrupted; everything stopped")
    return 0


def _cmd_worker(args: argparse.Namespace) -> int:
    asyncio.run(
        run_worker(
            bootstrap=args.bootstrap,
            mqtt_port=args.mqtt_port,
            group=args.group,
            member=args.member,
            topics=args.topic,
            out=args.out,
            restart=args.restart,
            presence=args.presence,
            delay=args.delay,
        )
    )
    return 0


def _cmd_audit(args: argparse.Namespace) -> int:
    reports = asyncio.run(run_audit(args.bootstrap, args.topic, args.group, args.window))
    for report in reports:
        print(report.render())
    if not reports:
        print(f"no groups found in {args.topic}")
    return 0 if all(r.ok for r in reports) else 1


#: Entry-point group through which other packages add subcommands: each entry is a
#: function taking the subparsers and adding its own (so this module imports none).
COMMANDS = "ballast.commands"


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

    p = sub.add_parser("run", help="run the controller daemon")
    p.add_argument("--config", type=Path, default=Path("config/ballast.yaml"))
    p.add_argument(
        "--record", type=Path, help="append each group's assignment inputs to this trace (JSONL)"
    )
    p.set_defaults(func=_cmd_run)

    p = sub.add_parser(
        "check-config", help="validate a daemon config file (and BALLAST_* overrides)"
    )
    p.add_argument("config", type=Path)
    p.set_defaults(func=_cmd_check_config)

    p = sub.add_parser("demo", help="embedded brokers, the controller and a simulated fleet")
    p.add_argument("--members", type=int, default=5)
    p.add_argument("--partitions", type=int, default=24)
    p.add_argument(
        "--duration", type=float, default=0.0, help="seconds to keep serving after the scenario"
    )
    p.add_argument("--http-port", type=int, default=0, help="0: any free port")
    p.add_argument("--pace", type=float, default=6.0, help="seconds between scenario steps")
    p.set_defaults(func=_cmd_demo)

    p = sub.add_parser("worker", help="a ManagedConsumer process that logs what it processes")
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--mqtt-port", type=int, default=1883)
    p.add_argument("--presence", choices=("mqtt", "kafka"), default="mqtt")
    p.add_argument("--group", required=True)
    p.add_argument("--member", required=True)
    p.add_argument("--topic", action="append", required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument(
        "--restart", action="store_true", help="on SIGTERM keep partitions (leave_grace)"
    )
    p.add_argument("--delay", type=float, default=0.0, help="seconds of simulated work per batch")
    p.set_defaults(func=_cmd_worker)

    p = sub.add_parser("audit", help="check the invariants against the assignments topic's history")
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--topic", default="ballast.assignments")
    p.add_argument("--group", action="append", help="only these groups (repeatable)")
    p.add_argument(
        "--window",
        type=float,
        default=60.0,
        help="longest a partition may stay ungranted, seconds (rebalance_delay + handoff_timeout)",
    )
    p.set_defaults(func=_cmd_audit)

    p = sub.add_parser("schema", help="print the JSON Schemas of the wire records")
    p.set_defaults(func=_cmd_schema)

    for command in entry_points(group=COMMANDS):
        try:
            register = command.load()  # e.g. ``ballast pipeline`` (pipeline/commands.py)
        except ImportError:
            continue  # declared, but its package is not in this installation
        register(sub)
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
