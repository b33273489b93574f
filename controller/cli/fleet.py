"""``ballast demo``, ``dev`` and ``worker``: brokers, a controller and consumers to try
Ballast with."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

from controller.cli.parsing import (
    Commands,
    capacity_arg,
    mqtt_login,
    rack_arg_value,
    verifier_from,
)
from controller.errors import InputError
from controller.tools import apache_kafka, demo, dev, worker


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


def _cmd_worker(args: argparse.Namespace) -> int:
    worker.run(
        args.client,
        worker.WorkerOptions(
            bootstrap=args.bootstrap,
            mqtt_port=args.mqtt_port,
            group=args.group,
            member=args.member,
            topics=args.topic,
            out=args.out,
            restart=args.restart,
            hand_off=args.hand_off,
            presence=args.presence,
            delay=args.delay,
            rack=args.rack,
            capacity=args.capacity,
            verify_key=verifier_from(args.public_key),
            mqtt_auth=mqtt_login(args.mqtt_user, args.mqtt_password_file),
            assignments_topic=args.assignments_topic,
            heartbeat_topic=args.heartbeat_topic,
            member_key=args.member_key,
        ),
    )
    return 0


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


def add_demo(sub: Commands) -> None:
    """``demo``."""
    p = sub.add_parser("demo", help="embedded brokers, the controller and a simulated fleet")
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
    _client_arg(p)
    p.set_defaults(func=_cmd_demo)


def _client_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--client",
        choices=worker.CLIENTS,
        default="aiokafka",
        help="the client binding: aiokafka (ManagedConsumer), confluent (BallastConsumer) or "
        "kafka-python (BallastKafkaConsumer); the last two need their extra",
    )


def add_dev(sub: Commands) -> None:
    p = sub.add_parser("dev", help="embedded brokers left running, to try `ballast run` by hand")
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


def add_worker(sub: Commands) -> None:
    """``worker``."""
    p = sub.add_parser("worker", help="a consumer process that logs what it processes")
    _client_arg(p)
    p.add_argument("--bootstrap", required=True, help="Kafka bootstrap servers")
    p.add_argument("--mqtt-port", type=int, default=1883, help="MQTT port on 127.0.0.1")
    p.add_argument(
        "--presence", choices=("mqtt", "kafka"), default="mqtt", help="how it announces itself"
    )
    p.add_argument("--group", required=True, help="consumer group name")
    p.add_argument("--member", required=True, help="member id, unique in the group")
    p.add_argument("--topic", action="append", required=True, help="topic (repeatable)")
    p.add_argument("--out", type=Path, required=True, help="file it appends processed records to")
    leaving = p.add_mutually_exclusive_group()
    leaving.add_argument(
        "--restart", action="store_true", help="on SIGTERM keep partitions (leave_grace)"
    )
    leaving.add_argument(
        "--hand-off",
        action="store_true",
        help="on SIGTERM read on until the controller has moved every partition, then leave",
    )
    p.add_argument("--delay", type=float, default=0.0, help="seconds of simulated work per batch")
    p.add_argument(
        "--rack", type=rack_arg_value, help="its client.rack (availability zone), if any"
    )
    p.add_argument(
        "--capacity",
        type=capacity_arg,
        help="its capacity weight (default 1): 2 takes a share twice as large",
    )
    p.add_argument(
        "--public-key",
        type=Path,
        action="append",
        help="the controller's public key: act on signed records only (repeatable: old and "
        "new key while one replaces the other)",
    )
    p.add_argument("--mqtt-user", help="MQTT user name (its member id, with per-member ACLs)")
    p.add_argument("--mqtt-password-file", type=Path, help="file holding the MQTT password")
    p.add_argument(
        "--assignments-topic", default="ballast.assignments", help="the assignments topic"
    )
    p.add_argument("--heartbeat-topic", default="ballast.heartbeats", help="with --presence kafka")
    p.add_argument(
        "--member-key",
        type=Path,
        help="with --presence kafka: the member's own private key, signing its heartbeats "
        "(ballast keys generate --out DIR --member NAME)",
    )
    p.set_defaults(func=_cmd_worker)
