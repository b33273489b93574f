"""The fault suite on real processes (``controller.tools.chaos``): the named race of the HA
issue, and a short seeded run of random faults. Long runs: benchmarks/chaos_bench.py."""

from __future__ import annotations

import asyncio
import json
import signal
import time
from pathlib import Path

import pytest

from controller.tools import embedded
from controller.tools.audit import run_audit
from controller.tools.chaos import checker
from controller.tools.chaos.nemesis import GROUP, Run
from tests.brokers import BROKER, needs_kafka

pytestmark = pytest.mark.integration


async def _r0_leads_w0_w1(run: Run) -> None:
    """Replica r0 leads workers w0 and w1; records are being produced."""
    run.start_replica("r0")
    await embedded.wait_until_ready(run.ports["r0"], 60, run.procs["r0"])
    for w in ("w0", "w1"):
        run.start_worker(w)
    await run.until(lambda: run.leader() == "r0", 60, "r0 leads")
    await run.start_producing()


async def _finish(run: Run) -> None:
    """Stop producing; every record processed, no overlap, no unexplained duplicate, and
    ``ballast audit`` clean."""
    await run.stop_producing()
    produced = [str(i) for i in range(run.produced)]
    assert await run.drain(produced, 60), "records never processed"
    logs = {p.stem: checker.WorkerLog.read(p.stem, p) for p in run.workdir.glob("w*.out")}
    verdict = checker.check(produced, logs, run.deaths, end=float("inf"))
    print(json.dumps(verdict.summary()))
    assert verdict.ok, verdict.summary()
    assert run.kafka is not None
    reports = await run_audit(run.kafka.address, "ballast.assignments", [GROUP], 60.0)
    assert reports[0].ok, reports[0].render()


async def test_replica_frozen_after_reading_cannot_grant_what_its_successor_moved(
    tmp_path: Path,
) -> None:
    """Issue 13's race, made reachable on purpose: the follower F freezes right after
    reading the assignments topic during a takeover (fault point ``acquire.after_read``);
    the other replica leads meanwhile and moves a partition for a join; F wakes up. Before
    the fix F took the same epoch and re-granted the moved partition (double ownership,
    audit: ``generation 28 after 29 in epoch 2``)."""
    async with Run(tmp_path, broker=BROKER) as run:
        await _r0_leads_w0_w1(run)
        run.start_replica("r1", freeze_at="acquire.after_read")
        await embedded.wait_until_ready(run.ports["r1"], 60, run.procs["r1"])
        await asyncio.sleep(3)
        run.signal("r0", signal.SIGKILL, "kill_leader")
        await run.until(lambda: run.reached_point("r1"), 60, "r1 frozen inside acquisition")
        run.note("froze_at_point", target="r1")
        run.start_replica("r0")
        await run.until(lambda: run.leader() == "r0", 60, "r0 leads again while r1 is frozen")
        run.start_worker("w2")  # a join: r0 revokes from w0/w1 and grants to w2
        await asyncio.sleep(4)
        run.procs["r1"].send_signal(signal.SIGCONT)
        run.note("thaw", target="r1")
        await asyncio.sleep(8)  # r1 does whatever it would do
        await _finish(run)
    log = (tmp_path / "r1.log").read_text()
    assert "acquire_refused" in log  # the coordinator refused the frozen replica's epoch


async def test_a_restarted_worker_consumes_nothing_granted_to_its_predecessor(
    tmp_path: Path,
) -> None:
    """The race the seeded run found (CI, seed 7): w0 is killed; a new w0 process starts
    just as its grace runs out. It reads its predecessor's grant before the controller
    has heard of it, while the controller gives those partitions away. The controller is
    frozen across that moment here, so the window stays open: before the fix the new
    process consumed its predecessor's grant (overlap with its successors)."""
    async with Run(tmp_path, replicas=1, broker=BROKER) as run:
        await _r0_leads_w0_w1(run)
        await asyncio.sleep(5)
        run.signal("w0", signal.SIGKILL, "kill_worker")
        # Its Will arrives ~1.5 s later; its grace ends leave_grace after that.
        await asyncio.sleep(run.timing.leave_grace - 1)
        run.signal("r0", signal.SIGSTOP, "pause_leader")
        log = tmp_path / "w0.log"
        before = log.stat().st_size
        restarted = time.time()
        run.start_worker("w0")
        # A worker's start (imports, Kafka connections, reading the assignments topic
        # from the start): a 60 s bound overran once beside another test worker.
        await run.until(
            lambda: b"assignment_applied" in log.read_bytes()[before:], 150, "new w0 caught up"
        )
        await asyncio.sleep(3)  # past the grace, the controller still frozen
        granted = [
            e
            for e in checker.WorkerLog.read("w0", tmp_path / "w0.out").holds
            if e[0] > restarted and e[1] == "granted"
        ]
        run.procs["r0"].send_signal(signal.SIGCONT)
        run.note("thaw", target="r0")
        assert not granted, f"the new w0 consumed its predecessor's grant: {granted}"
        await run.until(
            lambda: any(
                t > restarted and kind == "granted"
                for t, kind, _ in checker.WorkerLog.read("w0", tmp_path / "w0.out").holds
            ),
            60,
            "the new w0 granted partitions by the controller",
        )
        await asyncio.sleep(3)
        await _finish(run)


@needs_kafka
@pytest.mark.parametrize("transactions", [True, False], ids=["transactions", "epochs-only"])
async def test_a_leader_frozen_before_its_write_is_fenced_by_the_broker(
    tmp_path: Path, transactions: bool
) -> None:
    """r0 freezes between confirming its leadership and writing its first grants (fault
    point ``publish.after_confirm``); r1 takes over and serves the workers; r0 wakes up
    and writes. With ``ha.transactional_id_prefix`` r1's producer fenced r0's at the
    broker: its write is refused (``ProducerFenced``) and nothing of it reaches the log.
    Epoch fencing alone lets the write land, behind r1's fence where nobody applies it
    (the audit lists it): the difference this test shows."""
    async with Run(tmp_path, transactions=transactions) as run:
        run.start_replica("r0", freeze_at="publish.after_confirm", hold=0)
        await embedded.wait_until_ready(run.ports["r0"], 60, run.procs["r0"])
        for w in ("w0", "w1"):
            run.start_worker(w)
        await run.until(lambda: run.reached_point("r0"), 60, "r0 frozen before its write")
        run.start_replica("r1")
        await embedded.wait_until_ready(run.ports["r1"], 60, run.procs["r1"])
        await run.until(lambda: run.leader() == "r1", 60, "r1 leads")
        await run.start_producing()
        await asyncio.sleep(3)
        run.procs["r0"].send_signal(signal.SIGCONT)
        run.note("thaw", target="r0")
        log = tmp_path / "r0.log"
        await run.until(lambda: b"group_released" in log.read_bytes(), 60, "r0 stepped down")
        await asyncio.sleep(3)
        await _finish(run)
        assert run.kafka is not None
        (report,) = await run_audit(run.kafka.address, "ballast.assignments", [GROUP], 60.0)
    if transactions:
        assert b"ProducerFenced" in log.read_bytes()
        assert report.fenced == [], report.render()
    else:
        assert report.fenced, report.render()
        assert all("below the fence" in f for f in report.fenced), report.render()


async def test_seeded_faults_short(tmp_path: Path) -> None:
    async with Run(tmp_path, broker=BROKER) as run:
        result = await run.run(seed=7, faults=12)
    print(json.dumps(result))
    assert result["drained"], result
    assert result["ok"], result
