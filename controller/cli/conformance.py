"""``ballast conformance``: the member protocol's conformance kit, for client authors."""

from __future__ import annotations

import argparse
import json

from controller.cli.parsing import Arguments
from controller.errors import InputError
from controller.tools import conformance


def _cmd_conformance(args: argparse.Namespace) -> int:
    command = list(args.command)
    if command[:1] == ["--"]:
        command = command[1:]
    if not command:
        raise InputError("conformance: give the client's command after --")
    try:
        findings = conformance.run(
            command,
            bootstrap=args.bootstrap,
            mqtt_port=args.mqtt_port,
            presence=args.presence,
            rules=args.rule or (),
            assignments_topic=args.assignments_topic,
            heartbeat_topic=args.heartbeat_topic,
        )
    except ValueError as exc:
        raise InputError(str(exc)) from exc
    if args.json:
        print(json.dumps({f.rule: {"outcome": f.outcome, "detail": f.detail} for f in findings}))
    else:
        print(conformance.render(findings))
    return 1 if any(f.outcome == "fail" for f in findings) else 0


def _conformance(p: argparse.ArgumentParser) -> None:
    p.description = (
        "Runs COMMAND once per scenario, playing the controller, and reports "
        "pass/fail per rule of docs/protocol.md. In COMMAND, {bootstrap} {mqtt_port} {group} "
        "{member} {topic} {assignments_topic} {heartbeat_topic} {out} are replaced (and set "
        "as BALLAST_CONFORMANCE_* variables). The client appends '<topic> <partition> "
        "<offset>' to {out} for each record it processes, before committing it to group "
        "{group}. Rules: " + ", ".join(conformance.RULE_NAMES) + "."
    )
    p.add_argument(
        "--bootstrap", help="Kafka to use (default: an embedded Tansu broker, stopped after)"
    )
    p.add_argument(
        "--mqtt-port", type=int, help="MQTT broker on 127.0.0.1 (default: an embedded amqtt)"
    )
    p.add_argument(
        "--presence",
        choices=("mqtt", "kafka"),
        default="mqtt",
        help="where the client announces itself: MQTT, or the heartbeat topic",
    )
    p.add_argument(
        "--rule",
        action="append",
        choices=conformance.RULE_NAMES,
        help="check only this rule (repeatable; default: all)",
    )
    p.add_argument(
        "--assignments-topic", help="assignments topic to use (default: a new one per run)"
    )
    p.add_argument("--heartbeat-topic", default="ballast.heartbeats", help="with --presence kafka")
    p.add_argument("--json", action="store_true", help="one JSON object: rule -> outcome")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- the client's command")
    p.set_defaults(func=_cmd_conformance)


ARGUMENTS: dict[str, Arguments] = {"conformance": _conformance}
