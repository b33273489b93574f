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
from pathlib import Path

import pytest

from controller.tools import embedded
from controller.tools.audit import run_audit
from controller.tools.chaos import checker
from controller.tools.chaos.nemesis import GROUP, Run
from controller.tools.conformance import run_conformance
from tests.brokers import BROKER, needs_kafka

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
