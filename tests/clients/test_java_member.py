"""A second language passes the member protocol: the Java member of ``clients/java``
(Kafka's own client, manual ``assign()``, Kafka presence), built from docs/protocol.md,
shares a group with Python members under the fault suite's faults. The checker and
``ballast audit`` judge both languages' files alike: nothing lost, no partition read by
two members at once, no duplicate a fault does not explain."""

from __future__ import annotations

import asyncio
import json
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer

from controller.runtime.daemon import Controller
from controller.tools import embedded
from controller.tools.audit import run_audit
from controller.tools.chaos import checker
from controller.tools.chaos.nemesis import GROUP, Run
from controller.tools.conformance import run_conformance
from controller.wire.records import Assignment, assignment_key
from controller.wire.signing import generate, key_id, load_public
from tests.brokers import BROKER, make_config, needs_kafka
from tests.certs import member_keys

# Not on Tansu: Kafka's Java client 4.4 gets no answer to its ListOffsets there
# ("Failed to get offsets by times in 60000ms"), so it cannot even seek.
pytestmark = [pytest.mark.integration, pytest.mark.compat, needs_kafka]

PROJECT = Path(__file__).parents[2] / "clients" / "java"


@pytest.fixture(scope="module")
def java_classpath() -> str:
    """``clients/java`` built with Maven (``scripts/install-tools`` builds it for CI)."""
    target = PROJECT / "target"
    if not (target / "classes" / "dev" / "ballast" / "member" / "Worker.class").exists():
        mvn = shutil.which("mvn")
        assert mvn is not None, "Maven is needed to build clients/java (scripts/install-tools)"
        subprocess.run(
            [mvn, "-q", "-B", "-f", str(PROJECT / "pom.xml"), "package",
             "dependency:copy-dependencies", f"-DoutputDirectory={target / 'lib'}"],
            check=True,
        )  # fmt: skip
    return f"{target / 'classes'}:{target / 'lib'}/*"


async def test_java_members_share_a_group_with_python_members_under_faults(
    tmp_path: Path, java_classpath: str
) -> None:
    async with Run(
        tmp_path, replicas=1, broker=BROKER, presence="kafka", java_classpath=java_classpath
    ) as run:
        run.start_replica("r0")
        await embedded.wait_until_ready(run.ports["r0"], 60, run.procs["r0"])
        run.start_worker("w0")
        run.start_worker("wj0", java=True)
        run.start_worker("wj1", java=True, hand_off=True)
        await run.until(lambda: run.leader() == "r0", 60, "r0 leads")
        await run.start_producing()
        await run.until(lambda: _holding(tmp_path, "wj0", "wj1", "w0"), 90, "all three hold")
        run.signal("wj0", signal.SIGKILL, "kill_worker")  # a crash: its grace, then handoff
        await asyncio.sleep(2)
        run.start_worker("wj2", java=True)  # a join: revoke before grant, across languages
        await asyncio.sleep(4)
        # A leave through a handoff: wj1 reads on until each of its partitions is revoked
        # (and committed) and granted elsewhere, then exits (waited for; the checker
        # below finds nothing lost or read twice around it).
        run.signal("wj1", signal.SIGTERM, "stop_worker")
        await asyncio.sleep(2)
        run.start_worker("wj0", java=True)  # the crashed member restarted under its id
        await asyncio.sleep(run.timing.leave_grace + 4)
        await run.stop_producing()
        produced = [str(i) for i in range(run.produced)]
        assert await run.drain(produced, 90), "records never processed"
        logs = {p.stem: checker.WorkerLog.read(p.stem, p) for p in tmp_path.glob("w*.out")}
        verdict = checker.check(produced, logs, run.deaths, end=float("inf"))
        print(json.dumps(verdict.summary()))
        assert verdict.ok, verdict.summary()
        for java in ("wj0", "wj2"):  # both processed records of their own
            assert logs[java].processed, f"{java} processed nothing"
        assert run.kafka is not None
        (report,) = await run_audit(run.kafka.address, "ballast.assignments", [GROUP], 60.0)
        assert report.ok, report.render()


def _holding(workdir: Path, *names: str) -> bool:
    """Each named worker has been granted something (its events file says so)."""
    for name in names:
        events = workdir / f"{name}.out.events"
        if not events.exists() or b'"granted"' not in events.read_bytes():
            return False
    return True


async def test_the_java_member_keeps_every_rule_of_the_conformance_kit(
    kafka: embedded.BrokerProcess, tmp_path: Path, java_classpath: str
) -> None:
    command = [
        "java", "-cp", java_classpath, "dev.ballast.member.Worker",
        "--bootstrap", "{bootstrap}", "--group", "{group}", "--member", "{member}",
        "--topic", "{topic}", "--assignments-topic", "{assignments_topic}",
        "--heartbeat-topic", "{heartbeat_topic}", "--out", "{out}",
    ]  # fmt: skip
    findings = await run_conformance(
        command, bootstrap=kafka.address, mqtt_port=None, presence="kafka", workdir=tmp_path
    )
    outcomes = {f.rule: (f.outcome, f.detail) for f in findings}
    assert outcomes.pop("will") == ("n/a", "presence over Kafka heartbeats: silence is the "
                                    "session's end")  # fmt: skip
    assert all(o == "pass" for o, _ in outcomes.values()), outcomes


async def test_the_java_member_signs_its_heartbeats_and_verifies_its_grants(
    *,
    kafka: embedded.BrokerProcess,
    mqtt: embedded.BrokerProcess,
    names: tuple[str, str],
    topic: str,
    tmp_path: Path,
    java_classpath: str,
) -> None:
    """With signing and ``membership.member_keys_dir``: the Java member's signed
    heartbeats are admitted and its acknowledgements count, it applies only grants the
    controller's key signed (an unsigned forgery revoking everything is skipped), and a
    Java member without a key of its own is not admitted."""
    group = names[0]
    heartbeats = f"{group}.heartbeats"
    private, public = generate(tmp_path / "controller", "signing")
    keys = tmp_path / "members"
    admitted = member_keys(keys, tmp_path / "admitted", ("wj1",))
    cfg = make_config(
        kafka,
        mqtt,
        group,
        membership={
            "source": "kafka",
            "heartbeat_topic": heartbeats,
            "member_keys_dir": str(admitted),
        },
        signing={"private_key_file": str(private)},
    )
    ctl = Controller(cfg)
    await ctl.start()
    procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(name: str, *extra: str) -> None:
        argv = ["java", "-cp", java_classpath, "dev.ballast.member.Worker"]
        argv += ["--bootstrap", kafka.address, "--group", group, "--member", name, "--topic", topic]
        argv += ["--assignments-topic", cfg.assignments.name, "--heartbeat-topic", heartbeats]
        argv += ["--out", str(tmp_path / f"{name}.out"), "--heartbeat-interval-ms", "300"]
        argv += ["--public-key", str(public), *extra]
        log = (tmp_path / f"{name}.log").open("ab")
        procs[name] = subprocess.Popen(argv, stderr=log, stdout=subprocess.DEVNULL)

    async def until(check: Callable[[], bool], what: str, timeout: float = 60) -> None:
        deadline = asyncio.get_running_loop().time() + timeout
        while not check():
            assert asyncio.get_running_loop().time() < deadline, what
            await asyncio.sleep(0.2)

    def view() -> dict[str, Any]:
        return ctl.group_view(group)["members"]  # type: ignore[return-value]

    try:
        start("wj1", "--member-key", str(keys / "wj1.key"))
        start("wj2")  # no key of its own: its heartbeats are refused
        await until(lambda: len(view().get("wj1", {}).get("granted", [])) == 12, "wj1 holds all")
        state = ctl.state.groups[group].state
        await until(
            lambda: view()["wj1"]["applied_generation"] == state.reconciler.written.get("wj1"),
            "wj1's signed acknowledgement counts",
        )
        assert view()["wj1"]["verify_keys"] == [key_id(load_public(public))]
        assert "wj2" not in view()
        events = tmp_path / "wj1.out.events"
        await until(lambda: b'"granted"' in events.read_bytes(), "wj1 applied its signed grant")
        forged = Assignment(
            group=group,
            member="wj1",
            generation=1_000,
            controller_epoch=1_000,
            partitions=[],
            issued_at=time.time(),
        ).encode()
        producer = AIOKafkaProducer(bootstrap_servers=kafka.address)
        await producer.start()
        try:
            await producer.send_and_wait(
                cfg.assignments.name, forged, key=assignment_key(group, "wj1")
            )
        finally:
            await producer.stop()
        log = tmp_path / "wj1.log"
        await until(lambda: b"unsigned record" in log.read_bytes(), "wj1 skipped the forgery")
        await asyncio.sleep(1)
        assert b'"revoked"' not in events.read_bytes()
        assert len(view()["wj1"]["granted"]) == 12
        assert "wj2" not in view()
    finally:
        for proc in procs.values():
            proc.terminate()
        for proc in procs.values():
            proc.wait(30)
        await ctl.stop()
