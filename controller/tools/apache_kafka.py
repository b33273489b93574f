"""Apache Kafka brokers (KRaft) on loopback, from Maven Central's jars: the broker our users
run, for the tests, the benchmarks and ``ballast dev up --broker kafka``.

The jars of one version are fetched once (``apache_kafka.pom.xml``) into the cache of
``controller.maven``. A node's storage is formatted the first time it is made in a
folder and started by ``BrokerProcess.start``, so a stopped node, or one made again in
the same folder, restarts on its own log (topics, offsets and commits survive).
Production points Ballast at its own Kafka; nothing here is used there.
"""

from __future__ import annotations

import base64
import contextlib
import os
import resource
import shutil
import subprocess
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from controller import maven
from controller.tools.embedded import BrokerProcess, free_port, tansu

#: The Kafka our users run (the suite's default broker).
VERSION = "4.4.0"
#: The oldest Kafka we test against (``BALLAST_TEST_KAFKA_VERSION=3.9.1``).
OLDEST = "3.9.1"
POM = Path(__file__).with_name("apache_kafka.pom.xml")
#: The broker's own "serving" line: its port opens before it can answer metadata.
READY_LINE = b"Kafka Server started"
#: The SCRAM mechanism of ``users`` (SASL_PLAINTEXT listener).
SCRAM = "SCRAM-SHA-256"
JVM_OPTIONS = (
    "-Xms256m",
    "-Xmx1g",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-Djava.awt.headless=true",
    "-Dorg.slf4j.simpleLogger.showDateTime=true",
    "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
    "-Dorg.slf4j.simpleLogger.log.kafka.server.KafkaRaftServer=info",
)


def jars(version: str = VERSION) -> Path:
    """The folder holding Kafka ``version``'s jars, fetched with Maven on first use."""
    try:
        return maven.fetch(POM, f"kafka-{version}", {"kafka.version": version})
    except maven.JarsError as exc:
        raise maven.JarsError(f"Apache Kafka {version}: {exc}; or use the Tansu broker") from None


def java() -> str:
    home = os.environ.get("JAVA_HOME")
    found = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if not found:
        raise maven.JarsError("Apache Kafka needs Java 17 or newer (java not found)")
    return found


def cluster_id() -> str:
    """A fresh KRaft cluster id (16 random bytes, base64url as Kafka's ``Uuid``)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()


@dataclass(frozen=True)
class NodeSpec:
    """One KRaft node (broker and controller in one process) of a cluster."""

    node_id: int
    port: int
    controller_port: int
    #: The inter-broker listener when clients need SASL or TLS: plaintext, loopback.
    internal_port: int
    rack: str | None = None


@dataclass(frozen=True)
class _Plan:
    """What every node of one cluster shares."""

    voters: Sequence[NodeSpec]
    cluster_id: str
    version: str
    users: Mapping[str, str] | None
    #: A PEM file with the listener's private key (PKCS#8, unencrypted) and certificate.
    tls_pem: Path | None = None


def _properties(node: NodeSpec, plan: _Plan, data: Path) -> dict[str, str]:
    voters, users = plan.voters, plan.users
    replicas = str(min(3, len(voters)))
    props = {
        "process.roles": "broker,controller",
        "node.id": str(node.node_id),
        "controller.quorum.voters": ",".join(
            f"{v.node_id}@127.0.0.1:{v.controller_port}" for v in voters
        ),
        "controller.listener.names": "CONTROLLER",
        "log.dirs": str(data),
        "offsets.topic.replication.factor": replicas,
        "transaction.state.log.replication.factor": replicas,
        "transaction.state.log.min.isr": str(min(2, len(voters))),
        "share.coordinator.state.topic.replication.factor": replicas,
        "default.replication.factor": "1",
        # Departures from Kafka's defaults, for tests: a group starts now, not 3 s later;
        # HA replicas of the fault tests time out after 3 s (Kafka's floor: 6 s); the
        # cleaner looks for work every second.
        "group.initial.rebalance.delay.ms": "0",
        "group.min.session.timeout.ms": "2000",
        "log.cleaner.backoff.ms": "1000",
        # As production clusters are run: Ballast must create what it uses.
        "auto.create.topics.enable": "false",
    }
    listeners = [f"CLIENT://127.0.0.1:{node.port}"]
    protocols = ["CONTROLLER:PLAINTEXT"]
    client = ("SASL_" if users is not None else "") + ("SSL" if plan.tls_pem else "PLAINTEXT")
    protocols.append(f"CLIENT:{client}")
    if client == "PLAINTEXT":
        props["inter.broker.listener.name"] = "CLIENT"
    else:
        # Brokers talk over a plaintext loopback listener (its principal ANONYMOUS, a
        # super user with ACLs on, as is the first user: the admin).
        listeners.append(f"INTERNAL://127.0.0.1:{node.internal_port}")
        protocols.append("INTERNAL:PLAINTEXT")
        props["inter.broker.listener.name"] = "INTERNAL"
    if plan.tls_pem is not None:
        props["listener.name.client.ssl.keystore.type"] = "PEM"
        props["listener.name.client.ssl.keystore.location"] = str(plan.tls_pem)
    if users is not None:
        props["sasl.enabled.mechanisms"] = SCRAM
        props[f"listener.name.client.{SCRAM.lower()}.sasl.jaas.config"] = (
            "org.apache.kafka.common.security.scram.ScramLoginModule required;"
        )
        props["authorizer.class.name"] = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
        props["super.users"] = ";".join(["User:ANONYMOUS", f"User:{next(iter(users))}"])
    props["listeners"] = ",".join([*listeners, f"CONTROLLER://127.0.0.1:{node.controller_port}"])
    props["advertised.listeners"] = ",".join(listeners)
    props["listener.security.protocol.map"] = ",".join(protocols)
    if node.rack is not None:
        props["broker.rack"] = node.rack
    return props


def _node(workdir: Path, node: NodeSpec, plan: _Plan) -> BrokerProcess:
    home = workdir / f"kafka-{node.port}"
    data = home / "data"
    data.mkdir(parents=True, exist_ok=True)
    config = home / "server.properties"
    props = _properties(node, plan, data)
    config.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    classpath = f"{jars(plan.version)}/*"
    if not (data / "meta.properties").exists():  # formatted already: its log is kept
        _format(classpath, config, plan)
    argv = [java(), *JVM_OPTIONS, "-cp", classpath, "kafka.Kafka", str(config)]
    return BrokerProcess(
        f"kafka-{node.node_id}", node.port, argv, home / "broker.log", ready_line=READY_LINE
    )


def _format(classpath: str, config: Path, plan: _Plan) -> None:
    fmt = [java(), "-cp", classpath, "kafka.tools.StorageTool", "format"]
    # "=" form: a cluster id may begin with "-".
    fmt += [f"--cluster-id={plan.cluster_id}", f"--config={config}"]
    for name, password in (plan.users or {}).items():
        fmt += ["--add-scram", f"{SCRAM}=[name={name},password={password}]"]
    done = subprocess.run(fmt, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = (done.stdout + done.stderr)[-2000:]
        raise RuntimeError(f"formatting Kafka storage under {config.parent} failed:\n{tail}")


def _specs(count: int, racks: Sequence[str | None], port: int | None = None) -> list[NodeSpec]:
    return [
        NodeSpec(
            i + 1,
            (port if i == 0 and port else free_port()),
            free_port(),
            free_port(),
            racks[i] if racks else None,
        )
        for i in range(count)
    ]


def kafka(
    workdir: Path,
    *,
    port: int | None = None,
    version: str = VERSION,
    users: Mapping[str, str] | None = None,
    rack: str | None = None,
    tls: tuple[Path, Path] | None = None,
) -> BrokerProcess:
    """One KRaft node on loopback (clients on ``port``, else a free one; its controller on
    a free one), formatted, not yet started. ``users`` (name -> password; the first is the
    admin): clients must authenticate with SCRAM-SHA-256 and Kafka's ACLs apply. ``tls``
    (certificate, PKCS#8 key; PEM): clients must speak TLS."""
    (spec,) = _specs(1, [rack], port)
    pem = None
    if tls is not None:
        pem = workdir / f"kafka-{spec.port}.pem"
        pem.write_text(tls[1].read_text() + tls[0].read_text())
        pem.chmod(0o600)
    plan = _Plan([spec], cluster_id(), version, users, pem)
    return _node(workdir, spec, plan)


@dataclass
class KafkaCluster:
    """Several KRaft nodes forming one quorum: they start together (no node serves until a
    majority of controllers runs)."""

    nodes: list[BrokerProcess]

    @property
    def address(self) -> str:
        return ",".join(n.address for n in self.nodes)

    def start(self, timeout: float = 60.0) -> KafkaCluster:
        try:
            for node in self.nodes:
                node.launch()
            for node in self.nodes:
                node.wait_ready(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()

    def __enter__(self) -> KafkaCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def cluster(
    workdir: Path,
    racks: Sequence[str | None] = ("a", "b", "c"),
    *,
    version: str = VERSION,
    users: Mapping[str, str] | None = None,
) -> KafkaCluster:
    """One node per entry of ``racks`` (its ``broker.rack``), formatted, not yet started."""
    specs = _specs(len(racks), racks)
    plan = _Plan(specs, cluster_id(), version, users)
    return KafkaCluster([_node(workdir, s, plan) for s in specs])


#: The Kafka-protocol brokers Ballast runs on here: Apache Kafka, and Tansu (light,
#: embedded: no transactions, producer ids, racks or ACLs; docs/compatibility.md).
BrokerKind = Literal["kafka", "tansu"]
BROKER_KINDS: tuple[BrokerKind, ...] = ("kafka", "tansu")
#: What the demo and ``dev up`` call each.
NAMES: dict[BrokerKind, str] = {"kafka": f"Apache Kafka {VERSION}", "tansu": "Tansu"}


def broker(
    kind: BrokerKind, workdir: Path, version: str = VERSION, port: int | None = None
) -> BrokerProcess:
    """A broker of ``kind`` on loopback (``port``, else a free one), not yet started."""
    if kind == "kafka":
        return kafka(workdir, port=port, version=version)
    return tansu(workdir, port)


def start_timeout(kind: BrokerKind) -> float:
    """A JVM and a KRaft quorum take longer to serve than Tansu's binary."""
    return 60.0 if kind == "kafka" else 20.0


#: Files and memory maps a Kafka broker holds besides its partitions' (the JVM's own,
#: sockets, the metadata log), with room.
_BROKER_OWN = 2_000


def check_room(partitions: int, limit_file: Path = Path("/proc/sys/vm/max_map_count")) -> None:
    """Make room for a broker with ``partitions``, or refuse the run with the fix. Kafka
    keeps each partition's log file open and maps its two indexes: past the open-file
    limit or ``vm.max_map_count`` (65 530 by default) it stops with "Too many open files"
    or "Map failed", which its clients see as a broker that stopped answering (a single
    broker given 100 000 partitions did, here). The open-file limit is raised where this
    process may (the broker inherits it); where it may not, and for the map count, the
    error says what to run."""
    needed = partitions + _BROKER_OWN
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if needed > soft:
        infinite = hard == resource.RLIM_INFINITY
        try:  # past the hard limit only with the privilege to raise it (root here)
            resource.setrlimit(
                resource.RLIMIT_NOFILE, (needed, hard if infinite else max(hard, needed))
            )
        except (ValueError, OSError):
            raise RuntimeError(
                f"{partitions} partitions on one Kafka broker need about {needed} open files, "
                f"the limit is {soft} (hard {hard}): raise it (`ulimit -n {needed}`, as root "
                "past the hard limit) or use --broker tansu"
            ) from None
    try:
        maps = int(limit_file.read_text())
    except (OSError, ValueError):
        return  # not Linux, or not readable: nothing to say
    if 2 * partitions + _BROKER_OWN > maps:
        raise RuntimeError(
            f"{partitions} partitions on one Kafka broker need about "
            f"{2 * partitions + _BROKER_OWN} memory maps, vm.max_map_count is {maps}: run "
            "`sysctl -w vm.max_map_count=262144` (as Kafka's docs advise) or use --broker tansu"
        )


@contextlib.contextmanager
def running(
    kind: BrokerKind, workdir: Path, version: str = VERSION, partitions: int = 0
) -> Iterator[BrokerProcess]:
    """A started broker of ``kind`` for the duration of the block; ``partitions``: how
    many the caller will create (``check_room``)."""
    if kind == "kafka" and partitions:
        check_room(partitions)
    with broker(kind, workdir, version).start(timeout=start_timeout(kind)) as proc:
        yield proc


def kafka_settings(kind: BrokerKind, address: str) -> dict[str, object]:
    """The ``kafka`` config section for a broker of ``kind``: Tansu refuses producer ids,
    so only there is ``idempotent_producer`` (on by default) turned off."""
    return {"bootstrap_servers": address, "idempotent_producer": kind == "kafka"}


if __name__ == "__main__":  # python -m controller.tools.apache_kafka VERSION...: fill the cache
    import sys

    for wanted in sys.argv[1:] or [VERSION, OLDEST]:
        print(jars(wanted))
