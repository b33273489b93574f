"""``ballast demo``: embedded brokers, the controller and a simulated fleet, run through
a scripted scenario."""

from __future__ import annotations

import argparse
import asyncio

from controller.cli.parsing import Arguments
from controller.cli.worker import client_option
from controller.errors import InputError
from controller.tools import apache_kafka, demo


def _cmd_demo(args: argparse.Namespace) -> int:
    if args.members < 3 or args.partitions < 2 or args.duration < 0 or args.pace <= 0:
        raise InputError(
            "demo: --members must be >= 3, --partitions >= 2, --duration >= 0, --pace > 0"
        )
    strategies = demo.STRATEGIES if args.compare else (args.strategy,)
    outcomes = [
        asyncio.run(
            demo.run_demo(
                args.members,
                args.partitions,
                args.duration,
                args.http_port,
                args.pace,
                strategy=strategy,
                broker=args.broker,
                client=args.client,
            )
        )
        for strategy in strategies
    ]
    if args.compare:
        print(demo.compare(outcomes))
    return 0


def _demo(p: argparse.ArgumentParser) -> None:
    p.add_argument("--members", type=int, default=5, help="consumers at the start (>= 3)")
    p.add_argument("--partitions", type=int, default=24, help="partitions of the demo topic")
    p.add_argument(
        "--duration", type=float, default=0.0, help="seconds to keep serving after the scenario"
    )
    p.add_argument("--http-port", type=int, default=0, help="metrics port; 0: any free port")
    p.add_argument("--pace", type=float, default=6.0, help="seconds between scenario steps")
    p.add_argument(
        "--broker",
        choices=apache_kafka.BROKER_KINDS,
        default="tansu",
        help=f"Kafka broker: tansu (light) or kafka (Apache Kafka {apache_kafka.VERSION})",
    )
    p.add_argument(
        "--strategy",
        choices=demo.STRATEGIES,
        default="lagsticky",
        help="sticky: the same scenario with the controller given no lag",
    )
    p.add_argument(
        "--compare", action="store_true", help="run both strategies, then print them side by side"
    )
    client_option(p)
    p.set_defaults(func=_cmd_demo)


ARGUMENTS: dict[str, Arguments] = {"demo": _demo}
