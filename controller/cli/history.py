"""``ballast audit`` and ``keys``: the assignments topic's history checked, and the key
pair its records are signed with."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

from controller import logs
from controller.adapters.connection import client_options
from controller.cli.member_options import member_name, verifier_from
from controller.cli.parsing import Arguments
from controller.config import AssignmentsTopic, load_config
from controller.errors import InputError
from controller.tools.audit import run_audit
from controller.wire.signing import KeyFileError, generate


def _cmd_audit(args: argparse.Namespace) -> int:
    logs.configure("error")
    verifier = verifier_from(args.public_key)
    bootstrap, topic, security = args.bootstrap, args.topic, {}
    if args.config is not None:
        cfg = load_config(args.config)
        bootstrap = bootstrap or cfg.kafka.bootstrap_servers
        topic = topic or cfg.assignments.name
        security = client_options(cfg)
        del security["bootstrap_servers"]
    if bootstrap is None:
        raise InputError("audit: give --bootstrap, or --config (its kafka section)")
    topic = topic or AssignmentsTopic().name
    rejected: list[str] = []
    reports = asyncio.run(
        run_audit(
            bootstrap,
            topic,
            args.group,
            args.window,
            verifier=verifier,
            rejected=rejected,
            security=security,
        )
    )
    if rejected:
        print(f"{len(rejected)} records rejected (not read, not audited):")
        for why in rejected[:50]:
            print(f"  rejected: {logs.clipped(why)}")
    for report in reports:
        print(report.render())
    if not reports:
        print(f"no groups found in {topic}")
    return 0 if all(r.ok for r in reports) else 1


def _cmd_keys(args: argparse.Namespace) -> int:
    try:
        private, public = generate(args.out, args.member or "signing")
    except KeyFileError as exc:
        raise InputError(str(exc)) from None
    if args.member is not None:
        print(f"private key {private} (mode 0600): PresenceOptions.member_key of {args.member}")
        print(f"public key  {public}: into the controller's membership.member_keys_dir")
        return 0
    print(f"private key {private} (mode 0600): signing.private_key_file of every controller")
    print(f"public key  {public}: verify_key of every consumer, --public-key of audit")
    print('rotating a key: docs/operations.md, "Rotating the signing key"')
    return 0


def _audit(p: argparse.ArgumentParser) -> None:
    p.add_argument("--bootstrap", help="Kafka bootstrap servers (default: --config's)")
    p.add_argument(
        "--config",
        type=Path,
        help="a Ballast config: its kafka section (TLS, SASL) and assignments topic",
    )
    p.add_argument("--topic", help="the assignments topic (default: ballast.assignments)")
    p.add_argument("--group", action="append", help="only these groups (repeatable)")
    p.add_argument(
        "--window",
        type=float,
        default=60.0,
        help="longest a partition may stay ungranted, seconds (rebalance_delay + handoff_timeout)",
    )
    p.add_argument(
        "--public-key",
        type=Path,
        action="append",
        help="the controller's public key: audit signed records only (repeatable: old and new "
        "key while one replaces the other)",
    )
    p.set_defaults(func=_cmd_audit)


def _keys(p: argparse.ArgumentParser) -> None:
    keys = p.add_subparsers(dest="step", required=True, metavar="STEP")
    gen = keys.add_parser(
        "generate", help="write signing.key (0600) and signing.pub, or NAME.key and NAME.pub"
    )
    gen.add_argument("--out", type=Path, required=True, help="directory to write them to")
    gen.add_argument(
        "--member",
        type=member_name,
        help="a member's own key pair, named by its member id: NAME.key for the member "
        "(PresenceOptions.member_key, --member-key), NAME.pub for membership.member_keys_dir",
    )
    p.set_defaults(func=_cmd_keys)


ARGUMENTS: dict[str, Arguments] = {"audit": _audit, "keys": _keys}
