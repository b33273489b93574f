"""``ballast conformance -- <command>``: drive any client process through the member
protocol's hard moments and say, rule by rule, whether it keeps them.

``rules`` states the rules, ``harness`` plays the controller and watches the client,
``scenarios`` makes each moment happen. Brokers are the caller's (``--bootstrap``) or
embedded ones started here (Tansu and amqtt, as the demo), stopped at the end.
"""

from __future__ import annotations

import asyncio
import secrets
import tempfile
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path

import aiomqtt
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError

from controller.adapters.topics import partition_count
from controller.errors import UnreachableError
from controller.tools import embedded
from controller.tools.conformance.harness import Harness, PresenceVia, Setup
from controller.tools.conformance.rules import RULE_NAMES, Finding, render
from controller.tools.conformance.scenarios import SCENARIOS, Judge, NotReachedError

__all__ = ["RULE_NAMES", "Finding", "render", "run", "run_conformance"]

#: One scenario may not take longer than this (s): a client that hangs is a failure,
#: never a kit that hangs.
SCENARIO_TIMEOUT = 240.0
#: Partitions of an assignments topic the kit creates (more than one: a record in the
#: wrong one must be tested).
ASSIGNMENTS_PARTITIONS = 3


def scenarios_for(rules: Sequence[str]) -> list[str]:
    """The scenarios that judge ``rules`` (all when none are named), in running order."""
    unknown = sorted(set(rules) - set(RULE_NAMES))
    if unknown:
        raise ValueError(f"unknown rule(s) {unknown}; valid: {', '.join(RULE_NAMES)}")
    return [s for s, (_, judged) in SCENARIOS.items() if not rules or set(judged) & set(rules)]


async def run_conformance(
    command: Sequence[str],
    *,
    bootstrap: str,
    mqtt_port: int | None,
    presence: PresenceVia = "mqtt",
    rules: Sequence[str] = (),
    assignments_topic: str | None = None,
    heartbeat_topic: str = "ballast.heartbeats",
    workdir: Path,
) -> list[Finding]:
    """Every selected scenario against ``command`` on running brokers; the findings of
    the rules asked for (all by default)."""
    if not command:
        raise ValueError("conformance: no client command given (after --)")
    if presence == "mqtt" and mqtt_port is None:
        raise ValueError("conformance: MQTT presence needs an MQTT port")
    run_id = secrets.token_hex(3)
    topic = assignments_topic or f"ballast.conformance.{run_id}"
    names = scenarios_for(rules)
    topics = {f"conf-{run_id}-{s}-data": 4 for s in names}
    topics.setdefault(topic, ASSIGNMENTS_PARTITIONS)
    if presence == "kafka":
        topics.setdefault(heartbeat_topic, 1)
    await embedded.create_topics(bootstrap, topics)
    setup = Setup(
        bootstrap=bootstrap,
        mqtt_port=mqtt_port,
        presence=presence,
        assignments_topic=topic,
        heartbeat_topic=heartbeat_topic,
        assignments_partitions=await _partitions(bootstrap, topic),
        heartbeat_partitions=await _partitions(bootstrap, heartbeat_topic)
        if presence == "kafka"
        else 0,
        workdir=workdir,
    )
    findings: list[Finding] = []
    for name in names:
        scenario, judged = SCENARIOS[name]
        judge = Judge(name, judged)
        h = Harness(setup, command, f"conf-{run_id}-{name}")
        try:
            await h.open()
        except (OSError, TimeoutError, KafkaError, aiomqtt.MqttError) as exc:
            await h.close()
            raise UnreachableError(f"conformance: the brokers did not answer: {exc!r}") from exc
        try:
            async with asyncio.timeout(SCENARIO_TIMEOUT):
                await scenario(h, judge)
        except NotReachedError as exc:
            judge.unjudged(str(exc))
        except TimeoutError:
            judge.unjudged(f"the scenario took more than {SCENARIO_TIMEOUT:.0f}s")
        finally:
            await h.close()
        findings += [f for f in judge.findings if not rules or f.rule in rules]
    return findings


async def _partitions(bootstrap: str, topic: str) -> int:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        return await partition_count(admin, topic)
    finally:
        await admin.close()


def run(
    command: Sequence[str],
    *,
    bootstrap: str | None,
    mqtt_port: int | None,
    presence: PresenceVia,
    rules: Sequence[str],
    assignments_topic: str | None,
    heartbeat_topic: str,
) -> list[Finding]:
    """The CLI's entry: embedded brokers unless ``bootstrap`` is given (and an embedded
    MQTT broker unless ``mqtt_port`` is), stopped before returning."""
    with ExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="ballast-conf-")))
        if bootstrap is None:
            bootstrap = stack.enter_context(embedded.tansu(workdir).start()).address
        if presence == "mqtt" and mqtt_port is None:
            mqtt_port = stack.enter_context(embedded.amqtt(workdir).start()).port
        return asyncio.run(
            run_conformance(
                command,
                bootstrap=bootstrap,
                mqtt_port=mqtt_port,
                presence=presence,
                rules=rules,
                assignments_topic=assignments_topic,
                heartbeat_topic=heartbeat_topic,
                workdir=workdir,
            )
        )
