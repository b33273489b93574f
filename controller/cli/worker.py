"""``ballast worker``: a consumer process that logs what it processes (the simulated
fleet's members, and a client to try by hand)."""

from __future__ import annotations

import argparse
from pathlib import Path

from controller.cli.member_options import capacity_arg, mqtt_login, rack_arg_value, verifier_from
from controller.cli.parsing import Arguments
from controller.tools import worker


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


def client_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--client",
        choices=worker.CLIENTS,
        default="aiokafka",
        help="the client binding: aiokafka (ManagedConsumer), confluent (BallastConsumer) or "
        "kafka-python (BallastKafkaConsumer); the last two need their extra",
    )


def _worker(p: argparse.ArgumentParser) -> None:
    client_option(p)
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


ARGUMENTS: dict[str, Arguments] = {"worker": _worker}
