"""The scenarios: each starts a fresh client process in a fresh group, brings it to a
held grant, then makes one moment of the protocol happen on purpose and judges the rules
that moment tests.

A record that must be *ignored* is always followed by a valid one on the same partition
(the *barrier*): once the client acknowledges the barrier it has read past the bad
record, so "it did not act on it" is an observation, not a wait that hopes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from controller.tools.conformance.harness import QUIET, STEP_TIMEOUT, Harness, Seen
from controller.tools.conformance.rules import Finding
from controller.wire.assignments import assignments_partition
from controller.wire.records import Presence, assignment_key

#: A crashed client's Will fires after 1.5 keepalives; 60 s is MQTT clients' usual one.
WILL_TIMEOUT = 95.0
#: Seconds between the records produced through a revoke or a tombstone.
TRICKLE = 0.002


class NotReachedError(Exception):
    """A step before the rule failed: the rule could not be tested."""


@dataclass
class Judge:
    scenario: str
    rules: tuple[str, ...]
    findings: list[Finding] = field(default_factory=list)

    def rule(self, name: str, ok: bool, detail: str = "") -> None:
        self.findings.append(Finding(name, self.scenario, "pass" if ok else "fail", detail))

    def not_applicable(self, name: str, why: str) -> None:
        self.findings.append(Finding(name, self.scenario, "n/a", why))

    def unjudged(self, why: str) -> None:
        judged = {f.rule for f in self.findings}
        for name in self.rules:
            if name not in judged:
                self.findings.append(Finding(name, self.scenario, "fail", f"not reached: {why}"))


# ---------------------------------------------------------------------- steps


def _held(h: Harness, partitions: list[int]) -> list[tuple[str, int]]:
    return [(h.topic, p) for p in sorted(partitions)]


async def _first_presence(h: Harness) -> Seen:
    """Start the client; the first presence it announces (or fails to)."""
    await h.start_client()
    if not await h.until(lambda: any(s.presence or s.problem for s in h.seen)):
        raise NotReachedError(f"no presence within {STEP_TIMEOUT:.0f}s; log: {h.log_tail()}")
    return next(s for s in h.seen if s.presence or s.problem)


async def _announced(h: Harness) -> str:
    """Start the client; its instance, once it has announced itself."""
    first = await _first_presence(h)
    if first.presence is None or first.presence.instance is None:
        raise NotReachedError(f"its first presence is unusable: {first.problem or 'no instance'}")
    return first.presence.instance


async def _applied(
    h: Harness, partitions: list[int], generation: int, unless: Callable[[], bool] | None = None
) -> bool:
    """The client acknowledged ``generation`` holding exactly ``partitions`` and has
    processed everything produced to them; the wait ends early once ``unless`` holds (a
    rule already broken: what follows cannot mend it)."""
    want = _held(h, partitions)

    def done() -> bool:
        last = h.last()
        return (
            last is not None
            and last.presence is not None
            and last.presence.generation == generation
            and list(last.presence.partitions) == want
            and h.produced_of(partitions) <= h.processed()
        )

    await h.until(lambda: done() or (unless is not None and unless()))
    return done()


async def _granted(h: Harness, partitions: list[int], *, generation: int, epoch: int) -> str:
    """Announce, then a first grant held and consumed: the common start."""
    instance = await _announced(h)
    await h.produce(3)
    await h.grant(partitions, generation=generation, epoch=epoch, instance=instance)
    if not await _applied(h, partitions, generation):
        raise NotReachedError(f"the first grant was not applied; {_state(h)}")
    return instance


async def _behind_barrier(
    h: Harness,
    instance: str,
    bad: Callable[[], Awaitable[None]],
    *,
    barrier: int,
    epoch: int,
    forbidden_generations: tuple[int, ...],
) -> tuple[bool, str]:
    """Write ``bad``, then the barrier: generation ``barrier`` granting partitions 0 and
    3. Partitions 1 and 2 are granted only by the bad records: the client must never
    read them, and never acknowledge a bad record's generation."""
    await h.produce(2)
    await bad()
    await h.grant([0, 3], generation=barrier, epoch=epoch, instance=instance)

    def read_bad() -> list[tuple[int, int]]:
        return sorted({(p, o) for _, p, o in h.processed() if p in (1, 2)})

    def acked_bad() -> list[int]:
        return [g for g in forbidden_generations if h.acknowledged(g)]

    # A client that took a bad record has broken the rule already; one that then ignores
    # the barrier (a bad generation above it) would otherwise be waited out for a step.
    applied = await _applied(h, [0, 3], barrier, unless=lambda: bool(acked_bad() or read_bad()))
    read, acked = read_bad(), acked_bad()
    if read:
        return False, f"processed records granted only by the ignored record: {read[:5]}"
    if acked:
        return False, f"acknowledged the ignored record's generation {acked}"
    if not applied:
        return False, f"the valid record after it was not applied; {_state(h)}"
    return True, ""


def _state(h: Harness) -> str:
    """What the client last showed, for a failure's message."""
    last = h.last()
    if last is None:
        shown = "none"
    elif last.problem:
        shown = f"problem {last.problem}"
    elif last.presence is None:
        shown = "cleared"
    else:
        held = [p for _, p in last.presence.partitions]
        shown = f"generation {last.presence.generation} holding {held}"
    alive = "running" if h.running else "exited"
    return f"last presence: {shown}; process {alive}; log: {h.log_tail(3)}"


class _Trickle:
    """Records produced to ``partitions`` every ``TRICKLE`` seconds while a revoke or a
    tombstone happens, so something is always in flight at that moment: a client that
    reads a revoked partition a few milliseconds after acknowledging has something to
    read, and is seen doing it."""

    def __init__(self, h: Harness, partitions: list[int]) -> None:
        self._h, self._partitions = h, partitions
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> _Trickle:
        async def run() -> None:
            while True:
                await self._h.produce_each(self._partitions)
                await asyncio.sleep(TRICKLE)

        self._task = asyncio.create_task(run())
        await asyncio.sleep(TRICKLE * 4)  # flowing before the moment comes
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


async def _stopped_at_ack(h: Harness, partitions: list[int], ack: Presence) -> list[str]:
    """What a client did wrong with ``partitions`` after ``ack`` said it no longer holds
    them, judged by the broker and the clock: no record whose production began after
    the acknowledgement was sent (its ``sent_at``; else when the kit saw it) may be
    processed, whatever the margin, nor any after the kit saw it; no commit of them may be
    stored after it was sent (the broker's own record of when, ``commit_log``), nor may
    the committed offsets read as soon as it arrived change (a commit after it is one the
    next owner may miss); and no record at or past them may be processed (read after
    acknowledging, or acknowledged before its commit). It waits ``QUIET`` with records
    still arriving, then judges."""
    acked_at = ack.sent_at if ack.sent_at is not None else time.time()
    seen = {p: h.processed_of(p) for p in partitions}  # first: a file read, no round trip
    at_ack = {p: await h.committed(p) for p in partitions}
    await asyncio.sleep(QUIET)
    problems = []
    for p in partitions:
        done = h.processed_of(p)
        after = sorted(o for o in done if h.produced_at.get((p, o), 0.0) > acked_at)
        if after:
            problems.append(
                f"partition {p}: processed offsets {after[:5]}, produced after it acknowledged"
            )
        later = sorted(done - seen[p])
        if later and not after:
            problems.append(
                f"partition {p}: processed offsets {later[:5]} after its acknowledgement arrived"
            )
        now = await h.committed(p)
        stored = h.commit_log.stored_after(h.topic, p, acked_at) if h.commit_log else []
        if stored:
            first = stored[0]
            problems.append(
                f"partition {p}: committed {first.offset} after acknowledging (stored by the "
                f"broker {first.stored_at - acked_at:.3f} s after the acknowledgement was sent)"
            )
        elif now != at_ack[p]:
            problems.append(f"partition {p}: committed {now} after acknowledging (was {at_ack[p]})")
        late = sorted(o for o in done if o >= (now if now is not None else 0))
        if late:
            problems.append(
                f"partition {p}: processed offsets {late[:5]} past its commit ({now}) after "
                "acknowledging"
            )
    return problems


async def _covered(h: Harness, partitions: list[int]) -> list[str]:
    """Partitions whose group commit does not cover what the client processed."""
    short = []
    for p in partitions:
        done = h.processed_of(p)
        if done:
            committed = await h.committed(p)
            if committed is None or committed < max(done) + 1:
                short.append(f"partition {p}: processed up to {max(done)}, committed {committed}")
    return short


# ---------------------------------------------------------------------- scenarios


async def lifecycle(h: Harness, j: Judge) -> None:
    """announce → grant → revoke → leave."""
    first = await _first_presence(h)
    p = first.presence
    problems = [first.problem] if first.problem else []
    if p is not None:
        if list(p.topics) != [h.topic]:
            problems.append(f"topics {p.topics}, expected [{h.topic!r}]")
        if p.instance is None:
            problems.append("no instance")
        if p.partitions:
            problems.append(f"holds {p.partitions} before any grant")
    j.rule("announce", not problems, "; ".join(str(x) for x in problems))
    if p is None or p.instance is None:
        raise NotReachedError("no usable presence")
    instance = p.instance

    await h.produce(3)
    await h.grant([0, 1], generation=1, epoch=1, instance=instance)
    applied = await _applied(h, [0, 1], 1)
    strays = sorted((q, o) for _, q, o in h.processed() if q in (2, 3))
    j.rule(
        "grant",
        applied and not strays,
        f"read ungranted partitions {strays[:5]}" if strays else "" if applied else _state(h),
    )
    if not applied:
        raise NotReachedError("the grant was not applied")

    async with _Trickle(h, [0, 1]):
        await h.grant([0], generation=2, epoch=1, instance=instance)
        if not await h.until(lambda: h.acknowledged(2)):
            raise NotReachedError(f"the revoke was not acknowledged; {_state(h)}")
        at_ack = h.processed_of(1)
        ack = next(s.presence for s in h.seen if s.presence and s.presence.generation == 2)
        problems = await _stopped_at_ack(h, [1], ack)
    problems += await _covered(h, [1])
    if list(ack.partitions) != _held(h, [0]):
        problems.append(f"acknowledged holding {[q for _, q in ack.partitions]}, expected [0]")
    await h.produce(3, [0, 1])
    await h.until(lambda: h.produced_of([0]) <= h.processed())
    await asyncio.sleep(QUIET)
    after = sorted(h.processed_of(1) - at_ack)
    if after:
        problems.append(f"read revoked partition 1 after acknowledging: offsets {after[:5]}")
    j.rule("revoke", not problems, "; ".join(problems))

    h.signal(signal.SIGTERM)
    since = time.monotonic()
    code = await h.exited(STEP_TIMEOUT)
    problems = []
    if code is None:
        problems.append(f"still running {STEP_TIMEOUT:.0f}s after SIGTERM")
    said = [s for s in h.seen if s.at >= since]
    if not any(s.presence is None or s.presence.state == "leaving" for s in said):
        problems.append("neither 'leaving' nor a cleared presence after SIGTERM")
    problems += await _covered(h, [0])
    j.rule("leave", not problems, "; ".join(problems))


async def instance(h: Harness, j: Judge) -> None:
    await h.produce(3)
    await h.grant([0, 1, 2, 3], generation=1, epoch=1, instance="predecessor-process")
    mine = await _announced(h)
    await asyncio.sleep(QUIET)
    read = sorted((p, o) for _, p, o in h.processed())
    held = [s.presence.partitions for s in h.seen if s.presence and s.presence.partitions]
    await h.grant([2], generation=2, epoch=1, instance=mine)
    applied = await _applied(h, [2], 2)
    problems = []
    if read:
        problems.append(f"consumed its predecessor's grant: {read[:5]}")
    if held:
        problems.append(f"announced holding {held[0]} before a grant named it")
    if not applied:
        problems.append(f"a grant to its own instance was not applied; {_state(h)}")
    j.rule("instance", not problems, "; ".join(problems))


async def stale(h: Harness, j: Judge) -> None:
    mine = await _granted(h, [0], generation=5, epoch=1)

    async def bad() -> None:
        await h.grant([0, 1, 2, 3], generation=4, epoch=1, instance=mine)
        await h.grant([0, 1, 2], generation=5, epoch=1, instance=mine)

    j.rule(
        "stale",
        *await _behind_barrier(h, mine, bad, barrier=6, epoch=1, forbidden_generations=(4,)),
    )


async def own_epoch(h: Harness, j: Judge) -> None:
    mine = await _granted(h, [0], generation=5, epoch=2)

    async def bad() -> None:
        await h.grant([0, 1, 2, 3], generation=9, epoch=1, instance=mine)

    j.rule(
        "own_epoch",
        *await _behind_barrier(h, mine, bad, barrier=6, epoch=2, forbidden_generations=(9,)),
    )


async def fence(h: Harness, j: Judge) -> None:
    mine = await _granted(h, [0], generation=5, epoch=1)

    async def bad() -> None:
        await h.fence(2)
        await h.grant([0, 1, 2, 3], generation=9, epoch=1, instance=mine)

    j.rule(
        "fence",
        *await _behind_barrier(h, mine, bad, barrier=10, epoch=2, forbidden_generations=(9,)),
    )


async def takeover(h: Harness, j: Judge) -> None:
    mine = await _granted(h, [0, 1], generation=5, epoch=1)
    await h.produce(2)
    await h.fence(2)
    await h.grant([2, 3], generation=2, epoch=2, instance=mine)
    applied = await _applied(h, [2, 3], 2)
    j.rule(
        "takeover",
        applied,
        ""
        if applied
        else f"epoch 2 generation 2 (after epoch 1 generation 5) not applied; {_state(h)}",
    )


async def poison(h: Harness, j: Judge) -> None:
    mine = await _granted(h, [0], generation=1, epoch=1)

    def body(**over: object) -> bytes:
        fields: dict[str, object] = {
            "version": 1,
            "group": h.group,
            "member": h.member,
            "generation": 2,
            "controller_epoch": 1,
            "partitions": [[h.topic, p] for p in range(4)],
            "issued_at": time.time(),
            "topics": [h.topic],
            "instance": mine,
        }
        fields.update(over)
        return json.dumps(fields).encode()

    spoiled = [
        b"{not json",
        b"\xff\xfe\x00garbage",
        b"[" * 100_000,  # deeper than any parser's nesting
        b"[1, 2, 3]",
        body(member="someone-else"),  # body and key disagree
        body(group="another-group"),
        body(generation=3, partitions=[[h.topic, 2**31]]),
        body(generation=4, controller_epoch=2**63),
        body(generation="4"),
        body(generation=5, version=2),
        body(generation=6, partitions=[[h.topic, -1]]),
    ]

    async def bad() -> None:
        for value in spoiled:
            await h.write(value, generation=7, epoch=1)
        await h.write(b"{}", key=b"")  # an empty key
        await h.write(b"\x00" * 10, key=h.group.encode())  # a spoiled fence marker

    ok, detail = await _behind_barrier(
        h, mine, bad, barrier=8, epoch=1, forbidden_generations=(2, 3, 4, 5, 6, 7)
    )
    if not h.running:
        ok, detail = False, f"the process exited; log: {h.log_tail(3)}"
    j.rule("poison", ok, detail)


async def own_partition(h: Harness, j: Judge) -> None:
    count = h.setup.assignments_partitions
    if count < 2:
        j.not_applicable("own_partition", "the assignments topic has one partition")
        return
    mine = await _granted(h, [0], generation=1, epoch=1)
    elsewhere = (assignments_partition(assignment_key(h.group, h.member), count) + 1) % count

    async def bad() -> None:
        await h.grant([0, 1, 2, 3], generation=7, epoch=1, instance=mine, to_partition=elsewhere)

    j.rule(
        "own_partition",
        *await _behind_barrier(h, mine, bad, barrier=2, epoch=1, forbidden_generations=(7,)),
    )


async def tombstone(h: Harness, j: Judge) -> None:
    await _granted(h, [0, 1], generation=1, epoch=1)
    since = len(h.seen)
    async with _Trickle(h, [0, 1]):
        await h.tombstone(generation=2, epoch=1)
        emptied = await h.until(
            lambda: any(
                s.presence is not None and not s.presence.partitions for s in h.seen[since:]
            )
        )
        problems = [] if emptied else [f"no presence holding nothing after it; {_state(h)}"]
        empty = [s.presence for s in h.seen[since:] if s.presence and not s.presence.partitions]
        if empty:
            problems += await _stopped_at_ack(h, [0, 1], empty[0])
    before = h.processed()
    problems += await _covered(h, [0, 1])
    await h.produce(3, [0, 1])
    await asyncio.sleep(QUIET)
    after = sorted((p, o) for _, p, o in h.processed() - before)
    if after:
        problems.append(f"read after its tombstone: {after[:5]}")
    j.rule("tombstone", not problems, "; ".join(problems))


async def will(h: Harness, j: Judge) -> None:
    if h.setup.presence != "mqtt":
        j.not_applicable("will", "presence over Kafka heartbeats: silence is the session's end")
        return
    await _granted(h, [0], generation=1, epoch=1)
    since = len(h.seen)
    h.signal(signal.SIGKILL)
    cleared = await h.until(
        lambda: any(s.presence is None and not s.problem for s in h.seen[since:]),
        WILL_TIMEOUT,
        dead_ends=False,
    )
    j.rule(
        "will",
        cleared,
        ""
        if cleared
        else f"presence not cleared {WILL_TIMEOUT:.0f}s after SIGKILL (no MQTT Will?)",
    )


Scenario = Callable[[Harness, Judge], Awaitable[None]]

#: Scenario name -> (its function, the rules it judges), in the order they run.
SCENARIOS: dict[str, tuple[Scenario, tuple[str, ...]]] = {
    "lifecycle": (lifecycle, ("announce", "grant", "revoke", "leave")),
    "instance": (instance, ("instance",)),
    "stale": (stale, ("stale",)),
    "own_epoch": (own_epoch, ("own_epoch",)),
    "fence": (fence, ("fence",)),
    "takeover": (takeover, ("takeover",)),
    "poison": (poison, ("poison",)),
    "own_partition": (own_partition, ("own_partition",)),
    "tombstone": (tombstone, ("tombstone",)),
    "will": (will, ("will",)),
}
