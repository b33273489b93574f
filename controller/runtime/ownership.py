"""Which groups this replica leads (docs/fencing.md). Taking a group, at start-up or for a
shard won in the election: read the assignments topic, take an epoch no other tenure
has (the election's register with HA, else above the log's highest), write a fence
marker to every partition, read the topic again up to those markers, and rebuild the
group from the records that count. A group task that fails is counted and the group
rebuilt from the log within the same tenure. Releasing stops publication at once."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Iterable

from assignors import LagPolicy
from controller import logs
from controller.config import Config
from controller.core.rebalance import GroupTuning
from controller.core.recovery import Recovered, rebuilt
from controller.runtime import collector_policy, faultpoints
from controller.runtime.assignment_log import AssignmentLog
from controller.runtime.constraint_store import ConstraintStore
from controller.runtime.election import ShardElection, shard_of
from controller.runtime.group_loop import GroupLoop
from controller.runtime.metrics import Metrics
from controller.runtime.offsets_reader import OffsetReader
from controller.runtime.publisher import AssignmentPublisher
from controller.runtime.replica_state import ManagedGroup, ReplicaState
from controller.runtime.trace import TraceRecorder
from controller.tasks import cancel_and_wait
from controller.wire.fencing import AssignmentView
from controller.wire.records import ConstraintsRecord
from controller.wire.signing import Signer

log = logs.get("ballast.controller")

#: How often a standby reads what the leaders wrote since its last read.
FOLLOW_INTERVAL = 1.0
#: The quiet that ends a read that needs no more than ListOffsets' end: a standby's (it
#: needs progress; holding the log's lock no longer), the read before the fences (it
#: needs the highest epoch, which every record of a batch shares, and ListOffsets stops
#: inside the last batch on Tansu, never before it) and the constraints' (written one
#: record at a time). Only the read through the fences decides what counts.
QUIET = 0.05


class Ownership:
    def __init__(
        self,
        cfg: Config,
        metrics: Metrics,
        replica: str,
        state: ReplicaState,
        *,
        assignment_log: AssignmentLog,
        constraints: ConstraintStore,
        publisher: AssignmentPublisher,
        signer: Signer | None,
        recorder: TraceRecorder | None,
        spawn: Callable[[Callable[[], Awaitable[None]], str], None],
        fail: Callable[[str], None],
        ready_changed: Callable[[], None],
        stopping: Callable[[], bool],
    ) -> None:
        self.cfg = cfg
        self.metrics = metrics
        self.replica = replica
        self._state = state
        self._log = assignment_log
        self._constraints = constraints
        self._publisher = publisher
        self._signer = signer
        self._recorder = recorder
        self._spawn = spawn
        self._fail = fail
        self._ready_changed = ready_changed
        self._stopping = stopping
        #: Set when ``ha.enabled``: the shards this replica won.
        self.election: ShardElection | None = None
        #: With the Kafka membership source: expect heartbeats from a recovered member.
        self._expect: Callable[[str, str], None] | None = None
        #: Groups whose task failed and that are being rebuilt (not ready meanwhile).
        self.rebuilding: set[str] = set()
        self.group_tasks: dict[str, asyncio.Task[None]] = {}
        self.shard_publishers: dict[int, AssignmentPublisher] = {}
        self.loop = GroupLoop(
            cfg,
            metrics,
            publisher_for=self.publisher_for,
            signer=signer,
            still_leader=self.still_leader,
            stopping=stopping,
        )

    def expect_heartbeats(self, expect: Callable[[str, str], None]) -> None:
        self._expect = expect

    async def acquire_shards(self, shards: frozenset[int]) -> None:
        n = self.cfg.ha.shards
        prefix = self.cfg.ha.transactional_id_prefix
        if prefix is not None:
            for shard in sorted(shards - self.shard_publishers.keys()):
                publisher = AssignmentPublisher(self.cfg, f"{prefix}-{shard}", self._signer)
                try:
                    await publisher.start()  # init_transactions: fences the old leader
                except Exception as exc:
                    self._fail(
                        f"ha.transactional_id_prefix: cannot start a transactional producer "
                        f"(does the broker support transactions?): {exc!r}"
                    )
                    return
                self.shard_publishers[shard] = publisher
        for shard in sorted(shards):
            names = [g.name for g in self.cfg.groups if shard_of(g.name, n) == shard]
            log.info("shards_acquired", shards=[shard], groups=len(names))
            self.metrics.leadership_changes.labels("acquired").inc(len(names))
            await self.acquire(names, shard)

    async def release_shards(self, shards: frozenset[int]) -> None:
        faultpoints.reached("release.before_cancel")
        n = self.cfg.ha.shards
        names = [name for name in self._state.groups if shard_of(name, n) in shards]
        log.info("shards_released", shards=sorted(shards), groups=len(names))
        self.metrics.leadership_changes.labels("released").inc(len(names))
        await self.release(names)
        for shard in shards:
            publisher = self.shard_publishers.pop(shard, None)
            if publisher is not None:
                with contextlib.suppress(Exception):
                    async with asyncio.timeout(5):
                        await publisher.stop()

    async def follow(self) -> None:
        """While another replica leads some configured group, keep this one's read of the
        assignments and constraints topics current: a takeover then reads the last
        second's records, not all since this replica last read (4.5 to 5.4 s of 7 to 9 s of
        recovery at 1 000 x 100 000, benchmarks/results/operations-history.md). A
        replica that leads every group does not read its own writes back."""
        while True:
            await asyncio.sleep(FOLLOW_INTERVAL)
            if any(g.name not in self._state.groups for g in self.cfg.groups):
                await asyncio.gather(
                    self._log.catch_up(idle=QUIET),
                    self._constraints.catch_up(idle=QUIET),
                )

    def publisher_for(self, group: str) -> AssignmentPublisher:
        if not self.shard_publishers:
            return self._publisher
        return self.shard_publishers[shard_of(group, self.cfg.ha.shards)]

    async def acquire(self, names: list[str], shard: int | None) -> None:
        """Lead these groups (docs/fencing.md): read the log, take an epoch no other
        tenure has, fence every partition of the topic, read up to the fences, rebuild."""
        names = [name for name in names if name not in self._state.groups]
        if not names:
            return
        started = time.monotonic()
        readers = {
            name: OffsetReader(self.cfg, self.cfg.group(name).offsets_group) for name in names
        }
        # Their clients connect (and read the cluster's metadata, on loops of their own)
        # while the log is read and fenced: a takeover waits for one, not both.
        connecting = asyncio.ensure_future(asyncio.gather(*(r.start() for r in readers.values())))
        ready = False
        try:
            view = await self._log.catch_up(idle=QUIET)
            faultpoints.reached("acquire.after_read")
            floor = max((view.max_epoch.get(name, 0) for name in names), default=0)
            if self.election is not None and shard is not None:
                epoch = await self.election.claim_epoch(shard, floor)
            else:
                epoch = floor + 1
            faultpoints.reached("acquire.before_fence")
            if epoch is None or (fences := await self._fence(names, epoch, shard)) is None:
                log.warning("acquire_refused", shard=shard, groups=len(names))
                self._retry_acquire(names, shard)
                return
            fenced = time.monotonic()
            # The constraints are read beside the log: a takeover waits for neither twice.
            view, stored = await asyncio.gather(
                self._log.catch_up(through=fences), self._constraints.catch_up(idle=QUIET)
            )
            read = time.monotonic()
            await connecting
            ready = True
        finally:
            if not ready:
                await _discard(connecting, readers.values())
        for name in names:
            reader = readers[name]
            self._state.readers[name] = reader
            rebuilding = time.monotonic()
            managed = await self._rebuild(name, view, epoch, stored.get(name))
            self._state.groups[name] = managed
            self.group_tasks[name] = asyncio.create_task(
                self._supervise(name), name=f"group-{name}"
            )
            self.metrics.start_group(name)
            self.metrics.leader.labels(name).set(1)
            self.metrics.epoch.labels(name).set(epoch)
            self.metrics.generation.labels(name).set(managed.state.generation)
            log.info(
                "group_acquired",
                group=name,
                members=managed.state.granted_members(),
                generation=managed.state.generation,
                epoch=epoch,
                replica=self.replica,
                # Where a takeover's time went: read and fence, read to the fences, the
                # offsets client (what of its start the reads did not cover), the rebuild
                # (metadata, recovery, engine).
                fence_ms=round((fenced - started) * 1000),
                read_ms=round((read - fenced) * 1000),
                client_ms=round((rebuilding - read) * 1000),
                rebuild_ms=round((time.monotonic() - rebuilding) * 1000),
            )
        self._state.metadata_wake.set()

    def _retry_acquire(self, names: list[str], shard: int | None) -> None:
        """A refusal can be passing (coordinator moving): try again while the election
        still gives us the shard. Deposed for good, the next rebalance releases it."""

        async def retry() -> None:
            await asyncio.sleep(1.0)
            if self.election is not None and shard in self.election.owned:
                await self.acquire(names, shard)

        self._spawn(retry, "acquire-retry")

    async def _fence(
        self, names: list[str], epoch: int, shard: int | None
    ) -> dict[int, int] | None:
        """Fence markers for every group, retried until written: the last one's offset
        on each partition (the read to the fences ends there); None once deposed."""
        last: dict[int, int] = {}
        for name in names:
            backoff = 0.1
            while True:
                if not await self.still_leader(shard):
                    return None
                try:
                    landed = await self.publisher_for(name).publish_fence(name, epoch, self.replica)
                    for partition, offset in landed.items():
                        last[partition] = max(offset, last.get(partition, -1))
                    break
                except Exception as exc:
                    self.metrics.publish_errors.inc()
                    log.warning("fence_failed", group=name, error=repr(exc), retry_in=backoff)
                    if self._stopping():
                        return None
                    await asyncio.sleep(backoff)
                    backoff = min(backoff * 2, 5.0)
        return last

    async def still_leader(self, shard: int | None) -> bool:
        """Without HA there is no one to ask; with HA, the coordinator (``confirm``)."""
        return self.election is None or shard is None or await self.election.confirm(shard)

    async def _rebuild(
        self,
        name: str,
        view: AssignmentView,
        epoch: int,
        overrides: ConstraintsRecord | None,
    ) -> ManagedGroup:
        """The group's state from the records that count, with what presence was heard,
        under the config's constraints and ``overrides`` (the constraints topic's)."""
        records = {
            member: (view.order[(name, member)], logged.record)
            for member, logged in view.group_records(name).items()
        }
        recovered, conflicts = Recovered.from_records(
            records, max(view.max_generation.get(name, 0), 0), epoch, state_clock
        )
        for detail in conflicts:
            self.metrics.recovery_conflicts.labels(name).inc()
            log.warning("recovery_conflict", group=name, detail=detail)
        topics = {t for ts in recovered.topics.values() for t in ts}
        meta = await self._state.readers[name].topic_metadata(topics)
        state = rebuilt(
            name,
            group_tuning(self.cfg),
            recovered,
            meta.counts,
            meta.racks,
            now=time.monotonic(),
            heard=self._state.heard.get(name, {}),
            last_seen=self._state.last_seen.get(name, {}),
            configured=self.cfg.group(name).constraints,
            overrides=overrides,
            signing_key=None if self._signer is None else self._signer.key_id,
        )
        if self._signer is not None:
            # Signed by a previous key, or (signing being turned on) by none: written
            # again with ours, so the previous key can be retired.
            own = self._signer.key_id
            state.re_sign(
                m for m, logged in view.group_records(name).items() if logged.signed_by != own
            )
        if self._expect is not None:
            for member in recovered.granted:
                self._expect(name, member)
        if self._recorder is not None:
            self._recorder.attach(state)
        collector_policy.built()
        managed = ManagedGroup(name, state, epoch)
        managed.wake.set()
        return managed

    async def _supervise(self, name: str) -> None:
        """Run the group's loop; if it fails, count it and rebuild the group from the log
        within the same tenure (same epoch: this replica still leads it)."""
        while True:
            try:
                await self.loop.run(self._state.groups[name])
                return
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.metrics.task_failures.labels("group").inc()
                log.error("task_failed", task=f"group-{name}", error=repr(exc))
                self.rebuilding.add(name)
                self._ready_changed()
                try:
                    await self._rebuild_until_done(name)
                finally:
                    self.rebuilding.discard(name)
                    self._ready_changed()

    async def _rebuild_until_done(self, name: str) -> None:
        """Rebuild a failed group from the log, retrying (counted) until it works."""
        backoff = 1.0
        while True:
            await asyncio.sleep(backoff)
            try:
                # Whatever the failed loop handed the producer lands before we read.
                with contextlib.suppress(Exception):
                    async with asyncio.timeout(10):
                        await self.publisher_for(name).flush()
                epoch = self._state.groups[name].epoch
                view, stored = await asyncio.gather(
                    self._log.catch_up(), self._constraints.catch_up()
                )
                self._state.groups[name] = await self._rebuild(name, view, epoch, stored.get(name))
                log.info("group_rebuilt", group=name, epoch=epoch)
                return
            except Exception as exc:
                self.metrics.task_failures.labels("group").inc()
                log.error("group_rebuild_failed", group=name, error=repr(exc), retry_in=backoff)
                backoff = min(backoff * 2, 30.0)

    async def release(self, names: list[str]) -> None:
        """Stop leading these groups at once: no further publication."""
        for name in names:
            group = self._state.groups.pop(name, None)
            task = self.group_tasks.pop(name, None)
            await cancel_and_wait(task)
            reader = self._state.readers.pop(name, None)
            if reader is not None:
                with contextlib.suppress(Exception):
                    async with asyncio.timeout(5):
                        await reader.stop()
            self.metrics.leader.labels(name).set(0)
            if group is not None:
                log.info("group_released", group=name, epoch=group.epoch, replica=self.replica)


def state_clock(unix: float) -> float:
    """A Unix time from a record on the monotonic clock the group state runs on."""
    return time.monotonic() + (unix - time.time())


def group_tuning(cfg: Config) -> GroupTuning:
    """The decision core's timings and lag policy, from the ``rebalance`` and ``lag``
    sections."""
    r, lag = cfg.rebalance, cfg.lag
    return GroupTuning(
        rebalance_delay=r.delay,
        initial_delay=r.initial_delay,
        max_delay=r.max_delay,
        leave_grace=r.leave_grace,
        handoff_timeout=r.handoff_timeout,
        lag_smoothing=lag.smoothing,
        lag_batch=lag.batch,
        policy=LagPolicy(
            trigger_ratio=r.trigger_ratio,
            target_ratio=r.target_ratio,
            max_moves=r.max_moves,
            min_lag=r.min_lag,
            min_gain=r.min_gain,
        ),
        lag_cooldown=r.lag_cooldown,
        lag_backoff_max=r.lag_backoff_max,
    )


async def _discard(connecting: asyncio.Future[list[None]], readers: Iterable[OffsetReader]) -> None:
    """Offsets clients of an acquisition that did not happen: stopped, whatever state
    their start reached."""
    connecting.cancel()
    with contextlib.suppress(BaseException):
        await connecting
    for reader in readers:
        with contextlib.suppress(Exception):
            await reader.stop()
