"""``ballast dev up|down|show``: embedded brokers left running, to try ``ballast run`` by
hand."""

from __future__ import annotations

import argparse
from pathlib import Path

from controller.cli.parsing import Arguments
from controller.errors import InputError
from controller.tools import apache_kafka, dev


def _cmd_dev(args: argparse.Namespace) -> int:
    if args.dev == "up":
        members = tuple(m for m in args.members.split(",") if m)
        started = dev.up(
            args.dir,
            args.kafka_port,
            args.mqtt_port,
            args.http_port,
            members=members,
            mqtt=args.mqtt,
            kafka_broker=args.broker,
        )
        print(started.summary())
    elif args.dev == "down":
        stack = dev.find(args.dir)
        stopped = dev.down(stack) if stack else []
        print(f"stopped {', '.join(stopped)}" if stopped else "no dev brokers were running")
    else:
        stack = dev.find(args.dir)
        if stack is None or not dev.running(stack):
            raise InputError(f"{args.dir}: no dev brokers running (`ballast dev up`)")
        print(stack.summary())
    return 0


def _dev(p: argparse.ArgumentParser) -> None:
    steps = p.add_subparsers(dest="dev", required=True)
    up = steps.add_parser("up", help="start a Kafka broker and MQTT on loopback")
    up.add_argument("--kafka-port", type=int, default=9092, help="Kafka listener port")
    up.add_argument(
        "--broker",
        choices=apache_kafka.BROKER_KINDS,
        default="tansu",
        help="tansu (light, starts in a second) or kafka (Apache Kafka "
        f"{apache_kafka.VERSION} in KRaft mode: Java 17 and, the first time, Maven)",
    )
    up.add_argument("--mqtt-port", type=int, default=1883, help="MQTT listener port")
    up.add_argument(
        "--mqtt",
        choices=("auto", "mosquitto", "amqtt"),
        default="auto",
        help="MQTT broker: mosquitto (per-member passwords and ACL; auto when installed) "
        "or amqtt (no authentication)",
    )
    up.add_argument(
        "--members",
        default=",".join(dev.MEMBERS),
        help="members to make MQTT users for (comma-separated; mosquitto only)",
    )
    up.add_argument("--http-port", type=int, default=8080, help="HTTP port in the written config")
    steps.add_parser("down", help="stop the brokers `dev up` started")
    steps.add_parser("show", help="print the running brokers and what to run next")
    for step in steps.choices.values():
        step.add_argument(
            "--dir", type=Path, default=dev.DEFAULT_DIR, help="state, logs, config and token"
        )
    p.set_defaults(func=_cmd_dev)


ARGUMENTS: dict[str, Arguments] = {"dev": _dev}
