"""Apache Kafka's own assignors, run on our scenarios in the same benchmark run.

``../shared/peers/kafka-java`` holds Kafka's ``UniformAssignor`` (server side, KIP-848),
client ``StickyAssignor`` and ``CooperativeStickyAssignor`` compiled from Kafka's source,
with a driver that reads scenarios as JSON lines and prints one JSON line per
implementation and operation (fresh, leave, join; median and p90 ms after JIT warm-up).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

PEER_DIR = Path(
    os.environ.get(
        "BALLAST_KAFKA_PEER", Path(__file__).resolve().parents[2] / "shared/peers/kafka-java"
    )
)
_JARS = (
    "slf4j-api.jar",
    "slf4j-nop.jar",
    "jackson-databind.jar",
    "jackson-core.jar",
    "jackson-annotations.jar",
)


def available() -> str | None:
    """Why the peer cannot run here, or ``None`` when it can."""
    if not (PEER_DIR / "kafka-assignors-bench.jar").exists():
        return f"no {PEER_DIR}/kafka-assignors-bench.jar (set BALLAST_KAFKA_PEER)"
    if shutil.which("java") is None:
        return "no java on PATH"
    missing = [j for j in _JARS if not Path("/usr/share/java", j).exists()]
    if missing:
        return (
            f"missing {', '.join(missing)}: apt-get install libslf4j-java libjackson2-databind-java"
        )
    return None


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
    classpath = ":".join(
        [str(PEER_DIR / "kafka-assignors-bench.jar"), *(f"/usr/share/java/{j}" for j in _JARS)]
    )
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
