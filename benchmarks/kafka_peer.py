"""Apache Kafka's own assignors, run on our scenarios in the same benchmark run.

``kafka_peer_java/`` is a Maven project: Kafka's ``UniformAssignor`` (server side,
KIP-848, ``kafka-group-coordinator``) and the client ``StickyAssignor`` and
``CooperativeStickyAssignor`` (``kafka-clients``), all at ``apache_kafka.VERSION`` from
Maven Central, with a driver (``Bench.java``) that reads scenarios as JSON lines and prints
one JSON line per implementation and operation (fresh, leave, join; median and p90 ms
after JIT warm-up). Built on first use (``mvn package``, a few seconds once the jars are
cached); ``scripts/install-tools`` builds it for CI.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from controller.tools.apache_kafka import VERSION

PROJECT = Path(__file__).resolve().with_name("kafka_peer_java")
TARGET = PROJECT / "target"


def available() -> str | None:
    """Why the peer cannot run here, or ``None`` when it can."""
    if shutil.which("java") is None:
        return "no java on PATH"
    if not _built() and shutil.which("mvn") is None:
        return "no mvn on PATH to build benchmarks/kafka_peer_java"
    return None


def _built() -> bool:
    bench = TARGET / "classes" / "Bench.class"
    sources = [PROJECT / "pom.xml", PROJECT / "src/main/java/Bench.java"]
    return (
        bench.exists()
        and (TARGET / "lib" / f"kafka-clients-{VERSION}.jar").exists()
        and all(src.stat().st_mtime <= bench.stat().st_mtime for src in sources)
    )


def build() -> Path:
    """Compile the driver against Kafka's jars (once); the classpath directory."""
    if not _built():
        argv = ["mvn", "-q", "-B", "-Dstyle.color=never", "-f", str(PROJECT / "pom.xml"), "package"]
        argv += ["dependency:copy-dependencies", f"-DoutputDirectory={TARGET / 'lib'}"]
        argv += [f"-Dkafka.version={VERSION}"]
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
    return TARGET


def run(
    name: str,
    ppt: Mapping[str, int],
    subs: Mapping[str, Sequence[str]],
    victims: Sequence[str],
    impls: Sequence[str],
) -> list[dict[str, Any]]:
    """Kafka's figures for one scenario: one dict per implementation and operation."""
    why = available()
    if why:
        raise RuntimeError(why)
    target = build()
    classpath = f"{target / 'classes'}:{target / 'lib'}/*"
    scenario = {
        "name": name,
        "partitions_per_topic": dict(ppt),
        "subscriptions": {m: list(t) for m, t in subs.items()},
        "victims": list(victims),
    }
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl") as f:
        f.write(json.dumps(scenario) + "\n")
        f.flush()
        res = subprocess.run(
            ["java", "-Xms2g", "-Xmx12g", "-cp", classpath, "Bench", f.name, ",".join(impls)],
            capture_output=True,
            text=True,
            check=True,
        )
    return [json.loads(line) for line in res.stdout.splitlines() if line.startswith("{")]


if __name__ == "__main__":  # python benchmarks/kafka_peer.py: build it (scripts/install-tools)
    print(build(), file=sys.stderr)
