"""A led group's task: wake on an observation or a deadline, tick the state, publish what
it plans (retried until the broker accepts: nothing is granted before it is durably
written), and keep the group's metrics."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable

from controller import logs
from controller.config import Config
from controller.core.handoff import Plan
from controller.core.plan_records import Encoded, encode_plan
from controller.core.rebalance import Rebalance
from controller.runtime import faultpoints
from controller.runtime.election import shard_of
from controller.runtime.metrics import Metrics
from controller.runtime.publisher import AssignmentPublisher
from controller.runtime.replica_state import ManagedGroup
from controller.wire.signing import Signer

log = logs.get("ballast.controller")


class GroupLoop:
    def __init__(
        self,
        cfg: Config,
        metrics: Metrics,
        *,
        publisher_for: Callable[[str], AssignmentPublisher],
        still_leader: Callable[[int | None], Awaitable[bool]],
        stopping: Callable[[], bool],
        signer: Signer | None = None,
    ) -> None:
        self.cfg = cfg
        self.metrics = metrics
        self._signer = signer
        self._publisher_for = publisher_for
        self._still_leader = still_leader
        self._stopping = stopping

    async def run(self, g: ManagedGroup) -> None:
        while True:
            wake = g.state.next_wakeup()
            timeout = None if wake is None else max(0.0, wake - time.monotonic())
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await g.wake.wait()
            g.wake.clear()
            # Acks that arrive together are granted together: one publication per
            # ``grant_batch`` during a wave of acks, not one per ack. A step that
            # published nothing while lag readings are still queued is followed at once
            # by the next (a poll of every partition is absorbed ``lag_batch`` a step;
            # pausing between those steps made the last readings wait 20 ms a batch).
            pause = self.cfg.rebalance.grant_batch
            while True:
                await asyncio.sleep(pause)
                if await self.step(g):
                    pause = self.cfg.rebalance.grant_batch
                elif g.state.lag_queued() and not g.state.paused:
                    pause = 0
                else:
                    break

    async def step(self, g: ManagedGroup) -> bool:
        """One tick; True when it published (another step may now be possible)."""
        started = time.monotonic()
        rebalance, plan = g.state.tick(started)
        m = self.metrics
        if rebalance is not None:
            m.assign_seconds.labels(g.name).observe(rebalance.assign_seconds)
        if plan is not None:
            # Commit first: a member can ack a record the moment it is durable, possibly
            # before this task resumes. Safe because a group's publications are sequential
            # and retried until they land, so no later plan is published before this one.
            self._observe_handoffs(g, plan)
            committing = time.perf_counter()
            g.state.commit(plan)
            encoding = time.perf_counter()
            reconcile = g.state.plan_seconds + encoding - committing
            m.reconcile_seconds.labels(g.name).observe(reconcile)
            records = encode_plan(
                g.name,
                g.epoch,
                plan.generation,
                plan.records,
                g.state.topics_of,
                issued_at=time.time(),
                wall_clock=wall_clock,
                signer=self._signer,
            )
            m.encode_seconds.labels(g.name).observe(time.perf_counter() - encoding)
            encoded = time.perf_counter()
            g.publishing = True
            try:
                await self._publish(g, plan.generation, records)
            finally:
                g.publishing = False
            log.debug(
                "published",
                group=g.name,
                generation=plan.generation,
                records=len(records),
                revoked=len(plan.releases),
                reconcile_ms=round(reconcile * 1000, 3),
                encode_ms=round((encoded - encoding) * 1000, 3),
                publish_ms=round((time.perf_counter() - encoded) * 1000, 3),
            )
            m.generation.labels(g.name).set(plan.generation)
        for line in g.state.pop_corrections():
            m.stray_claims.labels(g.name).inc()
            log.warning("stray_claims_corrected", group=g.name, detail=line)
        for rel in g.state.pop_timeouts():
            m.handoff_timeouts.labels(g.name).inc()
            log.warning(
                "handoff_timeout", group=g.name, member=rel.member, generation=rel.generation
            )
        if rebalance is not None:
            self._record_rebalance(g, rebalance, plan, started)
        published = 0 if plan is None else len(plan.records)
        g.waves.stepped(published, g.state.member_count(), g.state.settled())
        return plan is not None

    async def _publish(self, g: ManagedGroup, generation: int, records: list[Encoded]) -> None:
        backoff = 0.1
        started = time.monotonic()
        while True:
            if not await self._still_leader(shard_of(g.name, self.cfg.ha.shards)):
                # Deposed (e.g. paused past the session timeout): write nothing; the
                # revocation that follows stops this group's loop.
                self.metrics.fenced_publications.labels(g.name).inc()
                log.warning("publication_fenced", group=g.name, generation=generation)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 5.0)
                continue
            faultpoints.reached("publish.after_confirm")
            try:
                await self._publisher_for(g.name).publish(records)
                self.metrics.publish_seconds.labels(g.name).observe(time.monotonic() - started)
                return
            except Exception as exc:
                self.metrics.publish_errors.inc()
                log.warning(
                    "publish_failed",
                    group=g.name,
                    generation=generation,
                    error=repr(exc),
                    retry_in=backoff,
                )
                if self._stopping():
                    raise
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 5.0)

    def _observe_handoffs(self, g: ManagedGroup, plan: Plan) -> None:
        now = time.monotonic()
        for tp in plan.releases:
            g.revoked_at.setdefault(tp, now)
        if not g.revoked_at:
            return
        handoff = self.metrics.handoff.labels(g.name)  # once: a mass change hands off 50 000
        for rec in plan.records:
            # A handed-off partition is one the record adds: read the edit when the plan
            # made one, not the member's whole grant.
            edit = plan.edits.get(rec.member)
            for tp in (rec.partitions or ()) if edit is None else edit.added:
                start = g.revoked_at.pop(tp, None)
                if start is not None:
                    handoff.observe(now - start)

    def _record_rebalance(
        self, g: ManagedGroup, r: Rebalance, plan: Plan | None, started: float
    ) -> None:
        done = time.monotonic()
        m = self.metrics
        for reason in r.reasons:
            m.rebalances.labels(g.name, reason).inc()
        for reason, count in r.by_reason().items():
            m.moved.labels(g.name, reason).inc(count)
        due = max(r.due_at, r.first_event_at)
        m.rebalance_latency.labels(g.name).observe(done - r.first_event_at)
        m.event_to_publish.labels(g.name).observe(done - due)
        generation = plan.generation if plan else g.state.generation
        g.recent.append((time.time(), generation, r))
        trigger = r.lag_trigger
        log.info(
            "rebalance",
            group=g.name,
            generation=generation,
            reason=",".join(r.reasons),
            about={reason: list(names) for reason, names in r.about.items()},
            reassigned=r.reassigned(),
            moved=r.moved,
            moved_for_lag=r.moved_for_lag,
            moved_for_rack=r.moved_for_rack,
            cross_rack=g.state.cross_rack(),
            changed_members=r.changed_members,
            records=len(plan.records) if plan else 0,
            assign_ms=round(r.assign_seconds * 1000, 3),
            duration_ms=round((done - started) * 1000, 3),
            latency_ms=round((done - r.first_event_at) * 1000, 3),
            # From due to this step's start: the wait for the loop (other steps, other
            # work of the event loop), apart from the step itself.
            waited_ms=round(max(0.0, started - due) * 1000, 3),
            skew=round(g.state.lag_skew(), 3),
            **(
                {}
                if trigger is None
                else {
                    "lag_trigger_member": trigger.member,
                    "lag_trigger_lag": trigger.lag,
                    "lag_trigger_bound": round(trigger.bound, 1),
                }
            ),
        )


def wall_clock(mono: float) -> float:
    """A time on the state's monotonic clock as Unix time (for ``absent_since``)."""
    return time.time() + (mono - time.monotonic())
