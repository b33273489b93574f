"""The daemon against input from parties it cannot trust, without brokers: state stays
bounded whatever names arrive, floods are counted but not logged line by line, secrets
from the environment are taken as they are and never echoed, and any Authorization
header is a 401, never a 500."""

from __future__ import annotations

import asyncio
import http.client
import json
import tracemalloc
from pathlib import Path

import pytest

from controller import logs
from controller.config import Config, env_overrides, load_config
from controller.errors import InputError
from controller.runtime.daemon import Controller
from controller.runtime.http import serve
from controller.runtime.membership import MqttPresence, Sink
from controller.wire.records import Presence

FLOOD = 100_000


def _cfg(**over: object) -> Config:
    return Config.model_validate({"groups": [{"name": "g"}], "http": {"port": 0}, **over})


def _presence(member: str, state: str = "active") -> bytes:
    return Presence(group="g", member=member, topics=["orders"], state=state).encode()  # type: ignore[arg-type]


async def test_a_flood_of_junk_presence_leaves_the_daemon_state_bounded() -> None:
    """10^5 messages on presence topics of new names each: cleared topics, garbage,
    strangers leaving, and valid announcements past the group's member cap. What the
    daemon keeps stays within the cap, and memory stays within 10 % of what the same
    daemon held once the cap was reached (measured with tracemalloc, so a test run's
    other allocations do not count)."""
    cap = 500
    ctl = Controller(_cfg(membership={"max_members": cap}))
    sink = Sink(ctl._seen, ctl._gone, frozenset({"g"}))
    presence = MqttPresence(ctl.cfg, sink, ctl.metrics)
    kinds = [b"", b"[" * 1100, _presence("someone-else"), None]

    def send(i: int) -> None:
        member = f"m{i}-" + "x" * (i % 200)
        kind = kinds[i % 4]
        announced = _presence(member, "leaving" if i % 8 == 3 else "active")
        payload = announced if kind is None else kind
        presence._handle(f"ballast/g/members/{member}", payload)

    tracemalloc.start()
    try:
        for i in range(20 * cap):
            send(i)
        assert len(ctl.state.heard["g"]) == cap
        baseline = tracemalloc.get_traced_memory()[0]
        for i in range(5 * cap, FLOOD):
            send(i)
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
        await ctl.stop()
    assert len(ctl.state.heard.get("g", {})) <= cap
    assert sum(len(v) for v in ctl.state.last_seen.values()) <= cap
    assert len(presence._live) <= cap
    assert ctl.metrics.invalid.labels("presence")._value.get() > FLOOD / 2
    assert after <= baseline * 1.10, (baseline, after)


def test_the_invalid_input_log_is_throttled_and_says_how_much_it_held_back() -> None:
    now = [0.0]
    throttle = logs.Throttle(burst=3, window=10.0, clock=lambda: now[0])
    let_through = [throttle.allow("presence") for _ in range(10)]
    assert let_through == [0, 0, 0, None, None, None, None, None, None, None]
    assert throttle.allow("lag") == 0  # per source
    now[0] = 10.0
    assert throttle.allow("presence") == 7  # the next line says what was held back


@pytest.mark.parametrize(
    ("name", "raw"),
    [
        ("BALLAST_HTTP__ADMIN_TOKEN", "#Zx9-not-a-comment-0123456789"),
        ("BALLAST_HTTP__ADMIN_TOKEN", "abcdefghijklmnop #tail"),
        ("BALLAST_MQTT__PASSWORD", "null"),
        ("BALLAST_KAFKA__SASL_PASSWORD", "[1, 2]"),
    ],
)
def test_secrets_from_the_environment_are_taken_as_they_are(name: str, raw: str) -> None:
    overrides = env_overrides({name: raw})
    section, key = name.removeprefix("BALLAST_").lower().split("__")
    assert overrides[section][key] == raw
    # and not secrets still parse as YAML
    assert env_overrides({"BALLAST_REBALANCE__MAX_MOVES": "7"})["rebalance"]["max_moves"] == 7


def test_a_yaml_error_does_not_echo_the_line_with_the_password(tmp_path: Path) -> None:
    path = tmp_path / "ballast.yaml"
    path.write_text("groups: [{name: g}]\nmqtt: {password: 'Sup3r-Secret-PW, port: [}\n")
    with pytest.raises(InputError) as err:
        load_config(path, {})
    assert "Sup3r" not in str(err.value)
    assert "line" in str(err.value)


@pytest.mark.parametrize("header", [b"Bearer \xff\xfe", b"\xff", b"Bearer ", b"Basic abc"])
async def test_a_malformed_token_is_a_401_and_counted_as_denied(header: bytes) -> None:
    ctl = Controller(_cfg(http={"port": 0, "admin_token": "admin-Token-0123456789abcdef"}))
    runner = await serve(ctl, "127.0.0.1", 0)
    try:
        port = runner.port

        def post() -> tuple[int, str]:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            conn.putrequest("POST", "/v1/groups/g/pause")
            conn.putheader("Authorization", header)
            conn.putheader("Content-Length", "0")
            conn.endheaders()
            answer = conn.getresponse()
            return answer.status, answer.read().decode()

        status, body = await asyncio.to_thread(post)
    finally:
        await runner.cleanup()
        await ctl.stop()
    assert status == 401, body
    assert "token" in json.loads(body)["error"]
    assert ctl.metrics.admin_requests.labels("pause", "denied")._value.get() == 1
