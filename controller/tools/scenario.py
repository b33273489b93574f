"""Scenario files for ``ballast assign``: a group, optionally its previous assignment and lag.

{
  "description": "free text",
  "partitions_per_topic": {"orders": 12},
  "subscriptions": {"c0": ["orders"], "c1": ["orders"]},
  "current": {"c0": [["orders", 0], ["orders", 1]]},
  "lag": {"orders": {"0": 1200, "5": 40}},
  "member_racks": {"c0": "az-a", "c1": "az-b"},
  "partition_racks": {"orders": {"0": ["az-a", "az-b"], "1": ["az-b", "az-c"]}},
  "member_capacities": {"c0": 2}
}

``member_racks`` is each member's ``client.rack``; ``partition_racks`` the racks of each
partition's replicas (KIP-881); ``member_capacities`` each member's capacity weight
(default 1).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from assignors import TopicPartition
from controller.errors import InputError
from controller.wire.records import Capacity, Rack

NonNegative = Annotated[int, Field(ge=0, strict=True)]
#: JSON object keys are strings; a partition number used as a key is parsed from one.
PartitionKey = Annotated[int, Field(ge=0)]
TopicName = Annotated[str, Field(min_length=1, max_length=249)]
PartitionRef = tuple[TopicName, NonNegative]


class Scenario(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    description: str = ""
    partitions_per_topic: dict[TopicName, NonNegative]
    subscriptions: dict[Annotated[str, Field(min_length=1)], list[TopicName]]
    current: dict[str, list[PartitionRef]] | None = None
    lag: dict[TopicName, dict[PartitionKey, NonNegative]] | None = None
    member_racks: dict[str, Rack | None] | None = None
    partition_racks: dict[TopicName, dict[PartitionKey, list[Rack]]] | None = None
    member_capacities: dict[str, Capacity | None] | None = None

    @model_validator(mode="after")
    def _name_members(self) -> Scenario:
        for field in ("member_racks", "member_capacities"):
            for member in getattr(self, field) or {}:
                if member not in self.subscriptions:
                    raise ValueError(f"{field} names {member!r}, which has no subscription")
        return self

    def partition_rack_map(self) -> dict[TopicPartition, list[str]] | None:
        if self.partition_racks is None:
            return None
        return {
            TopicPartition(t, p): racks
            for t, parts in self.partition_racks.items()
            for p, racks in parts.items()
        }

    def lag_map(self) -> dict[TopicPartition, int]:
        return {
            TopicPartition(t, p): v
            for t, parts in (self.lag or {}).items()
            for p, v in parts.items()
        }

    def current_map(self) -> dict[str, list[TopicPartition]] | None:
        if self.current is None:
            return None
        return {m: [TopicPartition(t, p) for t, p in v] for m, v in self.current.items()}


def describe(err: ValidationError, source: str, limit: int = 10) -> str:
    """One line per problem, ``file: a.b.c: message``; at most ``limit`` of them."""
    errors = err.errors()
    lines = []
    for e in errors[:limit]:
        where = ".".join(str(p) for p in e["loc"]) or "(top level)"
        lines.append(f"{source}: {where}: {e['msg']}")
    if len(errors) > limit:
        lines.append(f"{source}: ... and {len(errors) - limit} more problems")
    return "\n".join(lines)


def read_json(path: Path) -> object:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(
            f"{path}: line {exc.lineno} column {exc.colno}: invalid JSON: {exc.msg}"
        ) from exc


def load_scenario(path: Path) -> Scenario:
    raw = read_json(path)
    try:
        return Scenario.model_validate(raw)
    except ValidationError as exc:
        raise InputError(describe(exc, str(path))) from exc


class _Current(BaseModel):
    model_config = ConfigDict(extra="forbid")
    assignment: dict[str, list[PartitionRef]]


def load_current(path: Path) -> dict[str, list[TopicPartition]]:
    """A previous assignment: ``{"member": [["topic", 0], ...]}`` or ``ballast assign --json``
    output (whose ``assignment`` key holds that mapping)."""
    raw = read_json(path)
    if isinstance(raw, dict) and "assignment" in raw:
        raw = {"assignment": raw["assignment"]}
    else:
        raw = {"assignment": raw}
    try:
        parsed = _Current.model_validate(raw)
    except ValidationError as exc:
        raise InputError(describe(exc, str(path))) from exc
    return {m: [TopicPartition(t, p) for t, p in v] for m, v in parsed.assignment.items()}
