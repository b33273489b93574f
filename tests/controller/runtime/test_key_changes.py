"""What keeps one reader per partition while the signing setup changes, read from the
bytes a topic holds: a record that does not verify never grants, but its epoch and
generation count for the next tenure's numbers (so turning signing on or changing the key
never reuses an (epoch, generation)); and no replayed constraints record wins, ties
included, at any point of a recorded log."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.config import Config
from controller.core.handoff import Outgoing
from controller.core.plan_records import encode_plan
from controller.runtime.constraint_store import ConstraintStore
from controller.wire.assignments import log_entry
from controller.wire.fencing import AssignmentView
from controller.wire.records import ConstraintSet, ConstraintsRecord, Fence
from controller.wire.signing import Signer

OLD, NEW = Signer(Ed25519PrivateKey.generate()), Signer(Ed25519PrivateKey.generate())


@dataclass
class Msg:
    """A record as a Kafka client hands it over."""

    key: bytes | None
    value: bytes | None
    headers: Sequence[tuple[str, bytes]] = ()
    offset: int = 0
    topic: str = "ballast.assignments"
    partition: int = 0


def _plan(epoch: int, generation: int, signer: Signer | None) -> list[Msg]:
    records = encode_plan(
        "g",
        epoch,
        generation,
        [Outgoing("w1", frozenset())],
        lambda _m: frozenset({"t"}),
        issued_at=1.0,
        wall_clock=lambda t: t,
        signer=signer,
    )
    return [Msg(r.key, r.value, r.headers) for r in records]


def _fence(epoch: int, signer: Signer | None) -> Msg:
    value = Fence(group="g", controller_epoch=epoch, replica="r", issued_at=1.0).encode()
    headers = [] if signer is None else signer.sign("assignments", b"g", value)
    return Msg(b"g", value, headers)


def _read(log: list[Msg], signer: Signer) -> tuple[AssignmentView, list[str]]:
    """The log as a takeover with ``signer``'s key reads it (``AssignmentLog``)."""
    view, refused = AssignmentView(), list[str]()
    for offset, msg in enumerate(log):
        msg.offset = offset
        entry = log_entry(msg, refused.append, signer.verifier, view.count)
        if entry is not None:
            view.add(entry)
    return view, refused


def test_unsigned_and_other_key_records_count_for_the_numbers_and_grant_nothing() -> None:
    """Unsigned epochs 1-3 and an old key's epoch 4, then a controller on the new key:
    it takes epoch 5 and generations above 31, and adopts none of those records."""
    log = [_fence(1, None), *_plan(1, 10, None), _fence(3, None), *_plan(3, 20, None)]
    log += [_fence(4, OLD), *_plan(4, 31, OLD)]
    view, refused = _read(log, NEW)
    assert view.max_epoch["g"] == 4
    assert view.max_generation["g"] == 31
    assert view.current == {}  # none of them grants anything
    assert view.floor == {}  # nor fences a record of ours
    assert len(refused) == len(log)
    assert any("unsigned" in why for why in refused)
    assert any(OLD.key_id in why for why in refused)


def test_without_the_rule_a_new_key_would_restart_the_count() -> None:
    """The check above can fail: read without ``count`` (as before), the floor is lost."""
    view = AssignmentView()
    for msg in [_fence(3, None), *_plan(3, 20, None)]:
        entry = log_entry(msg, None, NEW.verifier)
        if entry is not None:
            view.add(entry)
    assert view.max_epoch == {}


def test_a_previous_key_still_grants_while_it_is_configured_and_is_named() -> None:
    both = NEW.verifier.with_keys([OLD.public_key])
    view, refused = AssignmentView(), list[str]()
    for msg in [_fence(4, OLD), *_plan(4, 31, OLD)]:
        entry = log_entry(msg, refused.append, both, view.count)
        if entry is not None:
            view.add(entry)
    assert refused == []
    assert view.current[("g", "w1")].signed_by == OLD.key_id


# ---------------------------------------------------------------- constraints topic


class Store(ConstraintStore):
    """The store's reader fed records by hand (its Kafka client is not started)."""

    def __init__(self, signer: Signer | None) -> None:
        cfg = Config.model_validate({"groups": [{"name": "g"}]})
        self.invalid: list[str] = []
        super().__init__(
            cfg, self.invalid.append, signer, None if signer is None else signer.verifier
        )

    def take(self, msgs: Sequence[Msg]) -> ConstraintsRecord | None:
        for msg in msgs:
            self._take(msg)
        return self._records.get("g")


@dataclass
class Tenure:
    """One controller tenure writing operator state, as ``ConstraintStore.save`` does."""

    store: Store
    epoch: int
    written: list[Msg] = field(default_factory=list)

    def write(self, drained: list[str], paused: bool) -> None:
        record = ConstraintsRecord(
            group="g",
            controller_epoch=self.epoch,
            constraints=ConstraintSet(),
            paused=paused,
            drained=drained,
            issued_at=1.0,
        )
        sequence, key, value, headers = self.store.encoded(record)
        self.written.append(Msg(key, value, headers, topic="ballast.constraints"))
        # What save() keeps once the write is acknowledged.
        self.store._records["g"], self.store._sequences["g"] = record, sequence


def _history(seed: int, signer: Signer | None) -> list[Msg]:
    """Two tenures (epochs 1 and 2) each draining, undraining, pausing and resuming."""
    rng = random.Random(seed)
    log: list[Msg] = []
    for epoch in (1, 2):
        tenure = Tenure(Store(signer), epoch)
        if log:
            tenure.store.take(log)
        for _ in range(rng.randint(1, 6)):
            tenure.write(
                sorted(rng.sample(["w1", "w2", "w3"], rng.randint(0, 2))), rng.random() < 0.5
            )
        log += tenure.written
    return log


@settings(max_examples=150, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    at=st.floats(0, 1, exclude_max=True),
    which=st.floats(0, 1, exclude_max=True),
    signed=st.booleans(),
)
def test_a_replayed_constraints_record_never_wins(
    seed: int, at: float, which: float, signed: bool
) -> None:
    """Replay any earlier record at any point of a recorded log, then restart (read it
    all): the state is the log's last record, and the replay is counted."""
    signer = OLD if signed else None
    log = _history(seed, signer)
    final = Store(signer).take(log)
    where = 1 + int(at * len(log))  # after at least one record
    replayed = log[int(which * where)]
    tampered = [*log[:where], replayed, *log[where:]]
    store = Store(signer)
    assert store.take(tampered) == final
    if replayed is not log[where - 1]:  # a copy of the record just before is its echo
        assert any("not newer" in why for why in store.invalid), store.invalid


def test_the_drain_undrain_replay_of_the_issue() -> None:
    """Drain w2, undrain it (same epoch), replay the drain byte for byte: w2 stays undrained."""
    tenure = Tenure(Store(OLD), 1)
    tenure.write(["w2"], False)
    tenure.write([], False)
    drain, undrain = tenure.written
    store = Store(OLD)
    assert store.take([drain, undrain, drain]) is not None
    assert store.take([]).drained == []  # type: ignore[union-attr]
    assert len(store.invalid) == 1
    assert "epoch 1 sequence 1 is not newer" in store.invalid[0]


def test_older_readers_still_read_a_numbered_record() -> None:
    """The sequence is a header, not a field: a reader of an older release (strict about
    fields) does not skip the record as poison during a rolling upgrade."""
    tenure = Tenure(Store(None), 1)
    tenure.write(["w2"], False)
    (msg,) = tenure.written
    assert msg.value is not None
    assert ConstraintsRecord.model_validate_json(msg.value).drained == ["w2"]
    assert dict(msg.headers)["ballast-sequence"] == b"1"


def test_records_of_an_older_controller_keep_the_later_one_at_a_tie() -> None:
    """Unnumbered records (written before sequences existed) still order as they did."""

    def unnumbered(drained: list[str]) -> Msg:
        record = ConstraintsRecord(
            group="g",
            controller_epoch=1,
            constraints=ConstraintSet(),
            drained=drained,
            issued_at=1.0,
        )
        return Msg(b"g", record.encode(), topic="ballast.constraints")

    store = Store(None)
    assert store.take([unnumbered(["w2"]), unnumbered([])]).drained == []  # type: ignore[union-attr]
    tenure = Tenure(store, 1)
    tenure.write(["w1"], False)  # numbered after them, in the same epoch
    assert tenure.written[-1].value is not None
    assert Store(None).take([unnumbered(["w2"]), *tenure.written, unnumbered([])]).drained == ["w1"]  # type: ignore[union-attr]
