"""Security against a real Mosquitto with passwords, ACLs and TLS: members can only write
their own presence topic; the controller runs on TLS with a password from a file; the
admin API needs its bearer token and logs what it does; no secret reaches logs, metrics
or HTTP answers."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import aiomqtt
import pytest

from controller.adapters.presence import MqttAuth
from controller.client import ManagedConsumer, PresenceOptions
from controller.tools import embedded
from tests.brokers import kafka_yaml, start_daemon
from tests.certs import server_cert

pytestmark = pytest.mark.integration

MOSQUITTO = shutil.which("mosquitto") or "/usr/sbin/mosquitto"
PASSWORDS = {"controller": "ctl-Secret-0x5eed", "m1": "m1-Secret-0xbeef", "m2": "m2-Secret-0xcafe"}
ADMIN_TOKEN = "admin-Token-0123456789abcdef"
ACL = """\
# the controller reads every presence topic
user controller
topic read ballast/#

# a member may write only its own presence topic (its user name is its member id);
# its Will (which clears that topic when it dies) must match too
pattern write ballast/+/members/%u
"""


@dataclass
class Mosquitto:
    port: int
    tls_port: int
    ca: Path


@pytest.fixture(scope="module")
def mosquitto(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mosquitto]:
    if not Path(MOSQUITTO).exists():
        pytest.fail("mosquitto is not installed (scripts/install-tools installs it)")
    d = tmp_path_factory.mktemp("mosquitto")
    tls = server_cert(d)
    passwd = d / "passwd"
    passwd.touch()
    for user, password in PASSWORDS.items():
        subprocess.run(["mosquitto_passwd", "-b", str(passwd), user, password], check=True)
    (d / "acl").write_text(ACL)
    port, tls_port = embedded.free_port(), embedded.free_port()
    # ``user``: as root, mosquitto would switch to its own user, who cannot read tmp_path
    user = "root" if os.geteuid() == 0 else os.environ.get("USER", "nobody")
    (d / "mosquitto.conf").write_text(f"""
user {user}
per_listener_settings false
allow_anonymous false
password_file {passwd}
acl_file {d / "acl"}
persistence false
listener {port} 127.0.0.1
listener {tls_port} 127.0.0.1
cafile {tls.ca}
certfile {tls.cert}
keyfile {tls.key}
""")
    os.chmod(passwd, 0o600)
    broker = embedded.BrokerProcess(
        "mosquitto", port, [MOSQUITTO, "-c", str(d / "mosquitto.conf")], d / "mosquitto.log"
    )
    with broker.start():
        embedded.wait_for_port(tls_port, 10, broker.proc)
        yield Mosquitto(port, tls_port, tls.ca)


def _client(
    m: Mosquitto, user: str, password: str, will_member: str | None = None
) -> aiomqtt.Client:
    will = None
    if will_member:
        will = aiomqtt.Will(f"ballast/g/members/{will_member}", b"", qos=1, retain=True)
    return aiomqtt.Client(
        "127.0.0.1",
        m.port,
        identifier=f"t-{user}-{will_member}",
        username=user,
        password=password,
        will=will,
    )


async def test_acl_members_write_only_their_own_presence(mosquitto: Mosquitto) -> None:
    seen: list[str] = []
    async with _client(mosquitto, "controller", PASSWORDS["controller"]) as ctl:
        await ctl.subscribe("ballast/#", qos=1)

        async def listen() -> None:
            async for message in ctl.messages:
                seen.append(message.topic.value)

        listener = asyncio.create_task(listen())
        async with _client(mosquitto, "m1", PASSWORDS["m1"], will_member="m1") as m1:
            await m1.publish("ballast/g/members/m1", b"{}", qos=1)
            await m1.publish("ballast/g/members/m2", b"{}", qos=1)  # someone else's: dropped
        # A Will aimed at another member's topic is dropped when it fires.
        rogue = _client(mosquitto, "m1", PASSWORDS["m1"], will_member="m2")
        await rogue.__aenter__()
        sock = rogue._client.socket()
        assert isinstance(sock, socket.socket)
        sock.shutdown(socket.SHUT_RDWR)  # die without DISCONNECT
        await asyncio.sleep(1.0)
        with contextlib.suppress(aiomqtt.MqttError):
            await rogue.__aexit__(None, None, None)
        listener.cancel()
    assert seen.count("ballast/g/members/m1") == 1
    assert "ballast/g/members/m2" not in seen
    with pytest.raises(aiomqtt.MqttError):
        async with _client(mosquitto, "m1", "wrong"):
            pass


def _http(port: int, path: str, method: str = "GET", token: str | None = None) -> tuple[int, bytes]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method)
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=5) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


async def test_controller_on_tls_with_secrets_and_the_admin_api(
    kafka: embedded.BrokerProcess,
    mosquitto: Mosquitto,
    names: tuple[str, str],
    topic: str,
    tmp_path: Path,
) -> None:
    group = names[0]
    port = embedded.free_port()
    (tmp_path / "mqtt-password").write_text(PASSWORDS["controller"] + "\n")
    config = tmp_path / "ballast.yaml"
    config.write_text(f"""
kafka: {kafka_yaml(kafka)}
mqtt: {{port: {mosquitto.tls_port}, client_id: ctl-{group}, keepalive: 2, username: controller,
        password_file: {tmp_path / "mqtt-password"}, tls: true, ca_file: {mosquitto.ca}}}
rebalance: {{delay: 200ms, leave_grace: 1s, handoff_timeout: 10s}}
lag: {{source: none}}
groups: [{{name: {group}}}]
signing: {{required: false}}
http: {{host: 127.0.0.1, port: {port}}}
logging: {{format: json, level: debug}}
""")
    log = tmp_path / "daemon.log"
    proc = start_daemon(config, log, {"BALLAST_HTTP__ADMIN_TOKEN": ADMIN_TOKEN})
    members: dict[str, ManagedConsumer] = {}
    answers: list[bytes] = []
    try:
        await embedded.wait_until_ready(port, proc=proc)
        tls = aiomqtt.TLSParameters(ca_certs=str(mosquitto.ca))
        for m in ("m1", "m2"):
            members[m] = ManagedConsumer(
                group,
                m,
                [topic],
                bootstrap_servers=kafka.address,
                presence=PresenceOptions(
                    mqtt_port=mosquitto.tls_port,
                    mqtt_keepalive=1,
                    mqtt_auth=MqttAuth(m, PASSWORDS[m], tls),
                ),
            )
            await members[m].start()

        async def sizes() -> list[int]:
            for c in members.values():
                await c.getmany(timeout_ms=50)
            return sorted(len(c.assignment) for c in members.values())

        async def until(expected: list[int]) -> None:
            for _ in range(300):
                if await sizes() == expected:
                    return
                await asyncio.sleep(0.05)
            raise AssertionError(f"assignment sizes {await sizes()} != {expected}")

        await until([6, 6])

        async def call(path: str, token: str | None = ADMIN_TOKEN) -> tuple[int, bytes]:
            status, body = await asyncio.to_thread(_http, port, path, "POST", token)
            answers.append(body)
            return status, body

        assert (await call(f"/v1/groups/{group}/pause", token=None))[0] == 401
        assert (await call(f"/v1/groups/{group}/pause", token="wrong-token-wrong"))[0] == 401
        assert (await call("/v1/groups/nope/pause"))[0] == 404
        assert (await call(f"/v1/groups/{group}/members/m2/drain"))[0] == 200
        await until([0, 12])
        assert len(members["m1"].assignment) == 12
        assert (await call(f"/v1/groups/{group}/pause"))[0] == 200
        assert (await call(f"/v1/groups/{group}/members/m2/undrain"))[0] == 200
        await asyncio.sleep(1.5)  # paused: nothing moves
        assert await sizes() == [0, 12]
        assert (await call(f"/v1/groups/{group}/resume"))[0] == 200
        await until([6, 6])
        status, _ = await call(f"/v1/groups/{group}/rebalance")
        assert status == 200
        for path in ("/metrics", f"/v1/groups/{group}", "/v1/groups", "/v1/leadership"):
            answers.append((await asyncio.to_thread(_http, port, path))[1])
    finally:
        for c in members.values():
            await c.close()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 0
    text = log.read_text()
    events = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
    actions = [(e["action"], e.get("member")) for e in events if e["event"] == "admin_action"]
    assert actions == [
        ("drain", "m2"),
        ("pause", None),
        ("undrain", "m2"),
        ("resume", None),
        ("rebalance", None),
    ]
    assert sum(e["event"] == "admin_denied" for e in events) == 2
    everything = text + "".join(a.decode(errors="replace") for a in answers)
    for secret in (*PASSWORDS.values(), ADMIN_TOKEN):
        assert secret not in everything
