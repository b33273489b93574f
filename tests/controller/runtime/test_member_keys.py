"""Member keys on the Kafka heartbeat path, without brokers: the heartbeat reader counts
a heartbeat only when the key of the member it names signed it, with a sequence newer
than the last (ties included) and not stale; members without a key are not admitted,
whatever arrives; a key added later counts once the directory is read again."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from controller.config import Config
from controller.errors import InputError
from controller.runtime import membership
from controller.runtime.membership import KafkaHeartbeats, Sink
from controller.runtime.metrics import Metrics
from controller.wire.member_keys import HeartbeatSigner
from controller.wire.records import Presence, assignment_key
from controller.wire.signing import RawHeader, generate
from tests.certs import member_keys


@pytest.fixture
def keys(tmp_path: Path) -> Path:
    """w1's and w2's key pairs in ``keys/``; the controller's directory holds the .pub
    files only (``pubs/``)."""
    pubs = member_keys(tmp_path / "keys", tmp_path / "pubs", ("w1", "w2"))
    (pubs / "README").write_text("not a key: ignored\n")
    return tmp_path


class Reader:
    def __init__(self, directory: Path) -> None:
        self.cfg = Config.model_validate(
            {
                "groups": [{"name": "g"}],
                "membership": {"source": "kafka", "member_keys_dir": str(directory / "pubs")},
            }
        )
        self.metrics = Metrics()
        self.seen: list[Presence] = []
        self.beats = KafkaHeartbeats(
            self.cfg, Sink(self._seen, lambda *_: None, frozenset({"g"})), self.metrics
        )

    def _seen(self, presence: Presence) -> bool:
        self.seen.append(presence)
        return True

    def send(self, member: str, value: bytes | None, headers: Sequence[RawHeader]) -> None:
        key = assignment_key("g", member)
        self.beats._handle(key, value, "hb[0]@1", headers)

    @property
    def refused(self) -> float:
        value = self.metrics.registry.get_sample_value(
            "ballast_invalid_records_total", {"source": "heartbeat"}
        )
        return value or 0.0


def _body(member: str, generation: int = 0, state: str = "active") -> bytes:
    return Presence(
        group="g",
        member=member,
        topics=["t"],
        generation=generation,
        state=state,  # type: ignore[arg-type]
    ).encode()


def _signer(root: Path, member: str) -> HeartbeatSigner:
    return HeartbeatSigner.from_file(root / "keys" / f"{member}.key")


def _signed(
    root: Path, member: str, value: bytes | None, *, as_member: str | None = None
) -> list[RawHeader]:
    key = assignment_key("g", member)
    return list(_signer(root, as_member or member).headers(key, value))


def test_a_member_s_own_signed_heartbeats_count_and_a_leave_ends_it(keys: Path) -> None:
    r = Reader(keys)
    signer = _signer(keys, "w1")
    key = assignment_key("g", "w1")
    for generation in (0, 1):
        body = _body("w1", generation)
        r.send("w1", body, list(signer.headers(key, body)))
    r.send("w1", None, list(signer.headers(key, None)))
    assert [(p.member, p.generation, p.state) for p in r.seen] == [
        ("w1", 0, "active"),
        ("w1", 1, "active"),
        ("w1", -1, "leaving"),  # a tombstone: leaving, no generation acknowledged
    ]
    assert r.refused == 0


def test_nobody_speaks_for_another_member(keys: Path) -> None:
    """w2 (whose own key is admitted) writes an acknowledgement and a leave for w1: signed
    with w2's key, unsigned, or with w1's headers copied onto another body."""
    r = Reader(keys)
    body = _body("w1", 7)
    r.send("w1", body, _signed(keys, "w1", body, as_member="w2"))
    r.send("w1", body, [])
    r.send("w1", None, _signed(keys, "w1", None, as_member="w2"))
    genuine = _signed(keys, "w1", _body("w1", 1))
    r.send("w1", body, genuine)  # w1's signature, another generation's body
    assert r.seen == []
    assert r.refused == 4


def test_ghosts_are_not_admitted_and_leave_no_state(keys: Path) -> None:
    r = Reader(keys)
    for i in range(10_500):
        member = f"ghost-{i}"
        r.send(member, _body(member), [])
    assert r.seen == []
    assert r.refused == 10_500
    assert r.beats._last == {}
    assert r.beats._sequences == {}


def test_a_replayed_heartbeat_never_counts(keys: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Byte for byte after its successor (a tie), older ones, and a leave written before
    them: refused. A controller that restarted has no last sequence to compare with: a
    replay older than three session timeouts (by the member's clock) is refused as
    stale."""
    r = Reader(keys)
    signer = _signer(keys, "w1")
    key = assignment_key("g", "w1")
    leave_headers = list(signer.headers(key, None))  # an earlier life's clean leave
    first = _body("w1", 1)
    first_headers = list(signer.headers(key, first))
    second = _body("w1", 2)
    second_headers = list(signer.headers(key, second))
    r.send("w1", first, first_headers)
    r.send("w1", second, second_headers)
    r.send("w1", second, second_headers)
    r.send("w1", first, first_headers)
    r.send("w1", None, leave_headers)
    assert [p.generation for p in r.seen] == [1, 2]
    assert r.refused == 3

    restarted = Reader(keys)
    real = time.time_ns
    monkeypatch.setattr(time, "time_ns", lambda: real() + 31 * 10**9)
    restarted.send("w1", None, leave_headers)
    assert restarted.seen == []
    assert restarted.refused == 1


def test_keys_added_and_removed_on_a_running_controller_count(
    keys: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An operator adds w3's key and removes w2's while the controller runs: once the
    directory is looked at again, w3 is admitted and w2 no longer is."""
    r = Reader(keys)
    _, public = generate(keys / "keys", "w3")
    body = _body("w3")
    r.send("w3", body, _signed(keys, "w3", body))
    assert r.seen == []  # not admitted: its key is not in the directory yet
    (keys / "pubs" / "w3.pub").write_bytes(public.read_bytes())
    (keys / "pubs" / "w2.pub").unlink()
    monkeypatch.setattr(membership, "KEYS_REREAD", 0.0)
    r.send("w3", body, _signed(keys, "w3", body))
    w2 = _body("w2")
    r.send("w2", w2, _signed(keys, "w2", w2))
    assert [p.member for p in r.seen] == ["w3"]
    assert r.refused == 2


def test_member_keys_settings_are_validated(keys: Path) -> None:
    bad = keys / "bad"
    bad.mkdir()
    (bad / "w9.pub").write_text("not a key\n")
    for membership_settings, says in (
        ({"source": "mqtt", "member_keys_dir": str(keys / "pubs")}, "needs source: kafka"),
        ({"source": "kafka", "member_keys_dir": str(keys / "missing")}, "cannot list member keys"),
        ({"source": "kafka", "member_keys_dir": str(bad)}, "w9.pub"),
    ):
        with pytest.raises(ValueError, match=says):
            Config.model_validate({"groups": [{"name": "g"}], "membership": membership_settings})


def test_a_member_key_that_cannot_be_read_is_named(tmp_path: Path) -> None:
    from controller.client.identity import PresenceOptions  # noqa: PLC0415

    options = PresenceOptions(via="kafka", member_key=tmp_path / "nope.key")
    with pytest.raises(InputError, match=r"PresenceOptions\.member_key"):
        options.heartbeat_signer()
