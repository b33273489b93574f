"""``ballast dev up`` / ``ballast dev down``: the demo's embedded brokers, left running,
with a controller config and an admin token that work against them. The path from the
demo to running the controller (and a fleet) by hand.

Everything lives in one directory (``.ballast-dev`` by default): the brokers' logs, their
pids and ports (``state.json``), ``ballast.yaml``, ``admin-token``, the controller's
signing key pair (``keys/``: the config signs every grant, members verify with
``keys/signing.pub``) and, with Mosquitto, ``mqtt/<user>.password``. MQTT authenticates
by default: with Mosquitto installed, each
of the named members gets its own generated password and may write only its own
presence (docs/operations.md, "Security model"). amqtt, the fallback, cannot keep a
member's Will off another member's topic, so it runs without authentication and says
so. Nothing here is for production, which points Ballast at its own Kafka and MQTT.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import secrets
import signal
import socket
import time
from pathlib import Path
from typing import Literal

from controller import maven
from controller.errors import InputError
from controller.tools import apache_kafka, embedded
from controller.tools.embedded import CONTROLLER_USER
from controller.wire import signing
from controller.wire.records import is_member_id

DEFAULT_DIR = Path(".ballast-dev")
GROUP = "orders-fleet"
TOPIC = "orders"
MEMBERS = ("w1", "w2", "w3")


@dataclasses.dataclass(frozen=True)
class DevStack:
    dir: Path
    kafka_port: int
    mqtt_port: int
    http_port: int
    pids: dict[str, int]
    #: ``mosquitto`` (authenticated) or ``amqtt`` (anonymous).
    mqtt_broker: str = "amqtt"
    #: Members with MQTT credentials (none without authentication).
    members: tuple[str, ...] = ()

    @property
    def config(self) -> Path:
        return self.dir / "ballast.yaml"

    @property
    def token_file(self) -> Path:
        return self.dir / "admin-token"

    def password_file(self, user: str) -> Path:
        return self.dir / "mqtt" / f"{user}.password"

    @property
    def signing_key(self) -> Path:
        """The controller's private key; members verify with ``public_key``."""
        return self.dir / "keys" / "signing.key"

    @property
    def public_key(self) -> Path:
        return self.dir / "keys" / "signing.pub"

    @property
    def kafka_name(self) -> str:
        kind: apache_kafka.BrokerKind = "kafka" if "kafka" in self.pids else "tansu"
        return f"{apache_kafka.NAMES[kind]}, pid {self.pids.get(kind)}"

    def summary(self) -> str:
        d = self.dir
        k = f"127.0.0.1:{self.kafka_port}"
        broker = self.mqtt_broker
        member = self.members[0] if self.members else MEMBERS[0]
        if self.members:
            mqtt = f"{broker}, pid {self.pids[broker]}; members {', '.join(self.members)}"
            login = f" --mqtt-user {member} --mqtt-password-file {self.password_file(member)}"
        else:
            mqtt = f"{broker}, pid {self.pids[broker]}; no authentication: install mosquitto"
            login = ""
        return "\n".join(
            [
                f"kafka   {k}  ({self.kafka_name}, logs in {d})",
                f"mqtt    127.0.0.1:{self.mqtt_port}  ({mqtt})",
                f"topic   {TOPIC} (12 partitions), consumed by group {GROUP}",
                f"config  {self.config}",
                "",
                "next:",
                f"  ballast run --config {self.config}",
                f"  ballast worker --bootstrap {k} --mqtt-port {self.mqtt_port}{login} "
                f"--public-key {self.public_key} "
                f"--group {GROUP} --topic {TOPIC} --member {member} --out {d}/{member}.log",
                f"  export BALLAST_URL=http://127.0.0.1:{self.http_port} "
                f"BALLAST_TOKEN_FILE={self.token_file}",
                "  ballast status",
                "stop the brokers:",
                "  ballast dev down",
            ]
        )


def _state_file(directory: Path) -> Path:
    return directory / "state.json"


def _port_free(port: int) -> bool:
    """Free for a server: nothing listens there. Connections of a stopped stack left in
    TIME-WAIT do not count (the brokers listen with ``SO_REUSEADDR`` too); without it
    ``dev up`` right after ``dev down`` was refused for a minute."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def up(
    directory: Path,
    kafka_port: int,
    mqtt_port: int,
    http_port: int,
    *,
    members: tuple[str, ...] = MEMBERS,
    mqtt: Literal["auto", "mosquitto", "amqtt"] = "auto",
    kafka_broker: apache_kafka.BrokerKind = "tansu",
) -> DevStack:
    """Start both brokers (detached), create the demo topic, write config, token and (with
    Mosquitto) every MQTT user's generated password. ``kafka_broker="kafka"``: Apache Kafka
    (jars fetched with Maven once; its log under ``directory`` survives ``dev down``)."""
    if mqtt == "auto":
        mqtt = "mosquitto" if embedded.mosquitto_path() else "amqtt"
    elif mqtt == "mosquitto" and embedded.mosquitto_path() is None:
        raise InputError("--mqtt mosquitto: mosquitto is not installed (apt-get install mosquitto)")
    for member in members:
        if not is_member_id(member):
            raise InputError(f"--members: {member!r} is not a member id ([A-Za-z0-9._-:@])")
    existing = find(directory)
    if existing is not None and running(existing):
        raise InputError(f"{directory}: brokers already running (`ballast dev down` stops them)")
    for name, port in (("--kafka-port", kafka_port), ("--mqtt-port", mqtt_port)):
        if not _port_free(port):
            raise InputError(f"{name} {port}: the port is in use; pick another")
    directory.mkdir(parents=True, exist_ok=True)
    users = {}
    if mqtt == "mosquitto":
        (directory / "mqtt").mkdir(exist_ok=True)
        users = {name: secrets.token_urlsafe(18) for name in (CONTROLLER_USER, *members)}
        for name, password in users.items():
            _private(directory / "mqtt" / f"{name}.password", password)
    try:
        kafka = apache_kafka.broker(kafka_broker, directory, port=kafka_port)
    except maven.JarsError as exc:
        raise InputError(f"--broker kafka: {exc}") from None
    kafka.start(apache_kafka.start_timeout(kafka_broker), outlive_parent=True)
    try:
        if mqtt == "mosquitto":
            broker = embedded.mosquitto(directory, mqtt_port, users)
        else:
            broker = embedded.amqtt(directory, mqtt_port)
        broker.start(outlive_parent=True)
    except BaseException:
        kafka.stop()
        raise
    assert kafka.proc is not None
    assert broker.proc is not None
    stack = DevStack(
        directory,
        kafka.port,
        broker.port,
        http_port,
        {kafka_broker: kafka.proc.pid, mqtt: broker.proc.pid},
        mqtt,
        tuple(members) if users else (),
    )
    try:
        asyncio.run(embedded.create_topics(kafka.address, {TOPIC: 12}))
    except BaseException:
        down(stack)
        raise
    fields = {k: v for k, v in dataclasses.asdict(stack).items() if k != "dir"}
    _state_file(directory).write_text(json.dumps(fields) + "\n")
    _private(stack.token_file, secrets.token_urlsafe(24))
    if not stack.signing_key.exists():  # kept across dev down and up: grants stay valid
        signing.generate(stack.signing_key.parent)
    login = ""
    if users:
        login = (
            f", username: {CONTROLLER_USER},\n"
            f"       password_file: {stack.password_file(CONTROLLER_USER).resolve()}"
        )
    stack.config.write_text(
        "# Written by `ballast dev up` for its embedded brokers; config/ballast.yaml documents\n"
        "# every key.\n"
        f"kafka: {json.dumps(apache_kafka.kafka_settings(kafka_broker, kafka.address))}\n"
        f"mqtt: {{host: 127.0.0.1, port: {broker.port}{login}}}\n"
        f"groups: [{{name: {GROUP}}}]\n"
        f"http: {{host: 127.0.0.1, port: {http_port},\n"
        f"       admin_token_file: {stack.token_file.resolve()}}}\n"
        f"signing: {{private_key_file: {stack.signing_key.resolve()}}}\n"
        "startup: {timeout: 30s}\n"
    )
    return stack


def _private(path: Path, secret: str) -> None:
    """Created owner-only, so a secret is never readable by others, not even briefly."""
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(secret + "\n")


def find(directory: Path) -> DevStack | None:
    """The brokers ``up`` recorded in ``directory``; None when it recorded none."""
    path = _state_file(directory)
    if not path.exists():
        return None
    try:
        raw = json.loads(path.read_text())
        return DevStack(
            directory,
            int(raw["kafka_port"]),
            int(raw["mqtt_port"]),
            int(raw["http_port"]),
            {str(k): int(v) for k, v in raw["pids"].items()},
            str(raw.get("mqtt_broker", "amqtt")),
            tuple(str(m) for m in raw.get("members", ())),
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise InputError(f"{path}: unreadable ({exc}); remove it and stop the brokers") from None


def _ours(pid: int) -> bool:
    """The pid still runs one of our brokers (and was not reused by something else)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return any(name in cmdline for name in (b"tansu", b"kafka.Kafka", b"amqtt", b"mosquitto"))


def running(stack: DevStack) -> bool:
    return any(_ours(pid) for pid in stack.pids.values())


def down(stack: DevStack, timeout: float = 10.0) -> list[str]:
    """SIGTERM each broker still running, SIGKILL after ``timeout``; the state file goes."""
    stopped = []
    for name, pid in sorted(stack.pids.items()):
        if not _ours(pid):
            continue
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if _alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        stopped.append(f"{name} (pid {pid})")
    _state_file(stack.dir).unlink(missing_ok=True)
    return stopped


def _alive(pid: int) -> bool:
    """Running and not a zombie (ours are reaped by init once we are gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"
