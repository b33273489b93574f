"""The settings of the topics Ballast creates, and the settings of an existing topic that
put what Ballast promises at risk.

Kafka's topic defaults are a stream's: one replica unless the cluster says otherwise,
segments rolled weekly, unclean leader election off. Ballast's assignments, constraints
and lag topics are its state: the fleet's grants live there and nowhere else. So a
topic it creates gets three replicas (every broker of a smaller cluster), a
``min.insync.replicas`` that lets writes go on with one broker down, and, when it is
read as "latest per key", compaction with segments rolled hourly and tombstones kept a
day. A topic that exists is taken as it is, with a warning for each setting below.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import NamedTuple

#: Replicas of a topic Ballast creates when the config names none (fewer brokers: all).
SAFE_REPLICAS = 3
#: Only closed segments are compacted: with Kafka's 7-day default a takeover would read
#: every record of the week. Rolled hourly, it reads at most an hour of superseded ones.
SEGMENT_MS = 3_600_000
#: How long a tombstone outlives the record it deletes. A reader that falls further
#: behind than this (a member paused, a replica reading to the end) can miss a leave's
#: tombstone and keep the record it deletes: Kafka's default, stated.
DELETE_RETENTION_MS = 86_400_000
#: Shorter than this, a reader slowed by a long GC pause or a broker restart misses them.
MIN_DELETE_RETENTION_MS = 3_600_000


#: What a broker states a numeric setting as (ASCII digits: ``isdigit`` also takes "²").
_NUMBER = re.compile(r"-?[0-9]{1,19}")


class Unsafe(NamedTuple):
    """One setting of an existing topic that puts Ballast's state at risk."""

    topic: str
    setting: str
    value: str
    why: str

    def advice(self) -> str:
        return f"{self.setting}={self.value}: {self.why}"


def replication_factor(configured: int | None, brokers: int, setting: str) -> int:
    """The replicas of a topic to create: ``configured``, or ``SAFE_REPLICAS`` (every
    broker of a smaller cluster) when it is None. ``ValueError`` naming ``setting`` when
    the config asks for more replicas than the cluster has brokers."""
    if configured is None:
        return max(1, min(SAFE_REPLICAS, brokers))
    if brokers and configured > brokers:
        raise ValueError(
            f"{setting} is {configured} but the cluster has {brokers} broker"
            f"{'s' if brokers != 1 else ''}: set {setting} to at most {brokers} "
            f"(or leave it unset: {SAFE_REPLICAS}, or every broker of a smaller cluster)"
        )
    return configured


def min_insync_replicas(replicas: int) -> int:
    """Acknowledged writes on two replicas where there are three or more, and writes that
    go on with one broker down wherever there are two or more."""
    return max(1, min(2, replicas - 1))


def created_configs(replicas: int, *, compacted: bool) -> dict[str, str]:
    """The configs a topic with ``replicas`` replicas is created with."""
    configs = {"min.insync.replicas": str(min_insync_replicas(replicas))}
    if compacted:
        configs |= {
            "cleanup.policy": "compact",
            "segment.ms": str(SEGMENT_MS),
            "delete.retention.ms": str(DELETE_RETENTION_MS),
        }
    return configs


def unsafe_settings(
    topic: str,
    configs: Mapping[str, str | None],
    replicas: int,
    brokers: int,
    *,
    compacted: bool,
) -> list[Unsafe]:
    """What in an existing topic's settings (as DescribeConfigs gives them; a setting
    missing is not judged) puts Ballast's state at risk. Compaction itself is not judged
    here: a compacted topic that is not compacted is refused, not warned about."""
    out: list[Unsafe] = []
    wanted = min(SAFE_REPLICAS, brokers)
    if 0 < replicas < wanted:
        out.append(
            Unsafe(
                topic,
                "replication factor",
                str(replicas),
                f"below {wanted}: the loss of one broker loses or stops the topic "
                "(kafka-reassign-partitions adds replicas)",
            )
        )
    insync = _int(configs.get("min.insync.replicas"))
    if insync is not None and replicas >= 3 and insync < 2:
        out.append(
            Unsafe(
                topic,
                "min.insync.replicas",
                str(insync),
                "an acknowledged write may sit on one replica and be lost with it; set 2",
            )
        )
    if configs.get("unclean.leader.election.enable") == "true":
        out.append(
            Unsafe(
                topic,
                "unclean.leader.election.enable",
                "true",
                "an out-of-sync replica may become leader and drop acknowledged "
                "records (grants, revokes); set false",
            )
        )
    if compacted:
        segment = _int(configs.get("segment.ms"))
        if segment is not None and segment > 24 * SEGMENT_MS:
            out.append(
                Unsafe(
                    topic,
                    "segment.ms",
                    str(segment),
                    "the open segment is never compacted: a takeover reads every "
                    f"record since it was rolled; set {SEGMENT_MS}",
                )
            )
        retention = _int(configs.get("delete.retention.ms"))
        if retention is not None and retention < MIN_DELETE_RETENTION_MS:
            out.append(
                Unsafe(
                    topic,
                    "delete.retention.ms",
                    str(retention),
                    "a reader that falls this far behind misses tombstones and keeps "
                    f"the records they delete; set {DELETE_RETENTION_MS}",
                )
            )
    return out


def _int(raw: str | None) -> int | None:
    """A numeric setting as the broker states it (None: absent or not a number)."""
    if raw is None or not _NUMBER.fullmatch(raw):
        return None
    return int(raw)
