"""A led group's task: wake on an observation or a deadline, tick the state, publish what
it plans (retried until the broker accepts: nothing is granted before it is durably
written), and keep the group's metrics."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable

from controller import logs
from controller.core.group import Rebalance
from controller.core.handoff import Plan
from controller.runtime import faultpoints
from controller.runtime.config import Config
from controller.runtime.election import shard_of
from controller.runtime.kafka_io import AssignmentPublisher
from controller.runtime.metrics import Metrics
from controller.runtime.replica_state import ManagedGroup, skew, subscribed

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
    ) -> None:
        self.cfg = cfg
        self.metrics = metrics
        self._publisher_for = publisher_for
        self._still_leader = still_leader
        self._stopping = stopping

    async def run(self, g: ManagedGroup) -> None:
        while True:
            wake = g.state.next_wakeup()
            timeout = None if wake is None else max(0.0, wake - time.monotonic())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(g.wake.wait(), timeout)
            g.wake.clear()
            # Acks that arrive together are granted together: one publication per
            # ``grant_batch`` during a wave of acks, not one per ack.
            while True:
                await asyncio.sleep(self.cfg.rebalance.grant_batch)
                if not await self.step(g):
                    break

    async def step(self, g: ManagedGroup) -> bool:
        """One tick; True when it published (another step may now be possible)."""
        started = time.monotonic()
        rebalance, plan = g.state.tick(started)
        if plan is not None:
            # Commit first: a member can ack a record the moment it is durable, possibly
            # before this task resumes. Safe because a group's publications are sequential
            # and retried until they land, so no later plan is published before this one.
            self._observe_handoffs(g, plan)
            g.state.reconciler.commit(plan)
            g.publishing = True
            try:
                await self._publish(g, plan)
            finally:
                g.publishing = False
            self.metrics.generation.labels(g.name).set(plan.generation)
        for rel in g.state.reconciler.timed_out:
            self.metrics.handoff_timeouts.labels(g.name).inc()
            log.warning(
                "handoff_timeout", group=g.name, member=rel.member, generation=rel.generation
            )
        g.state.reconciler.timed_out.clear()
        if rebalance is not None:
            self._record_rebalance(g, rebalance, plan, started)
        self._update_gauges(g)
        return plan is not None

    async def _publish(self, g: ManagedGroup, plan: Plan) -> None:
        backoff = 0.1
        while True:
            if not await self._still_leader(shard_of(g.name, self.cfg.ha.shards)):
                # Deposed (e.g. paused past the session timeout): write nothing; the
                # revocation that follows stops this group's loop.
                self.metrics.fenced_publications.labels(g.name).inc()
                log.warning("publication_fenced", group=g.name, generation=plan.generation)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 5.0)
                continue
            faultpoints.reached("publish.after_confirm")
            try:
                await self._publisher_for(g.name).publish(
                    g.name,
                    g.epoch,
                    plan.generation,
                    plan.records,
                    g.state.engine.members,
                    wall_clock=wall_clock,
                )
                self.metrics.connected.labels("kafka").set(1)
                return
            except Exception as exc:
                self.metrics.publish_errors.inc()
                self.metrics.connected.labels("kafka").set(0)
                log.warning(
                    "publish_failed",
                    group=g.name,
                    generation=plan.generation,
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
        for rec in plan.records:
            for tp in rec.partitions or ():
                start = g.revoked_at.pop(tp, None)
                if start is not None:
                    self.metrics.handoff.labels(g.name).observe(now - start)

    def _record_rebalance(
        self, g: ManagedGroup, r: Rebalance, plan: Plan | None, started: float
    ) -> None:
        done = time.monotonic()
        m = self.metrics
        for reason in r.reasons:
            m.rebalances.labels(g.name, reason).inc()
        balance_moves = r.moved - r.moved_for_lag
        if balance_moves:
            m.moved.labels(g.name, "balance").inc(balance_moves)
        if r.moved_for_lag:
            m.moved.labels(g.name, "lag").inc(r.moved_for_lag)
        m.rebalance_latency.labels(g.name).observe(done - r.first_event_at)
        m.compute_seconds.labels(g.name).observe(done - started)
        member_lag = g.state.engine.member_lag()
        log.info(
            "rebalance",
            group=g.name,
            generation=plan.generation if plan else g.state.reconciler.generation,
            reason=",".join(r.reasons),
            moved=r.moved,
            moved_for_lag=r.moved_for_lag,
            changed_members=r.changed_members,
            records=len(plan.records) if plan else 0,
            duration_ms=round((done - started) * 1000, 3),
            latency_ms=round((done - r.first_event_at) * 1000, 3),
            skew=round(skew(member_lag), 3),
        )

    def _update_gauges(self, g: ManagedGroup) -> None:
        m = self.metrics
        state = g.state
        engine = state.engine
        assignment_sizes = {name: len(v) for name, v in state.reconciler.granted.items()}
        total_parts = sum(engine.partitions_per_topic.get(t, 0) for t in subscribed(engine.members))
        granted = sum(assignment_sizes.values())
        m.members.labels(g.name).set(len(state.presence))
        m.partitions.labels(g.name, "assigned").set(granted)
        m.partitions.labels(g.name, "revoking").set(state.reconciler.revoking())
        m.partitions.labels(g.name, "unassigned").set(
            max(0, total_parts - granted - state.reconciler.revoking())
        )
        counts = list(assignment_sizes.values())
        m.imbalance.labels(g.name).set(max(counts) - min(counts) if counts else 0)
        member_lag = engine.member_lag()
        m.lag_total.labels(g.name).set(sum(member_lag.values()))
        m.lag_max_member.labels(g.name).set(max(member_lag.values(), default=0))
        m.lag_skew.labels(g.name).set(skew(member_lag))
        if self.cfg.metrics.per_member:
            for name in sorted(member_lag)[: self.cfg.metrics.per_member_cap]:
                m.member_lag.labels(g.name, name).set(member_lag[name])
                m.member_partitions.labels(g.name, name).set(assignment_sizes.get(name, 0))


def wall_clock(mono: float) -> float:
    """A time on the state's monotonic clock as Unix time (for ``absent_since``)."""
    return time.time() + (mono - time.monotonic())
