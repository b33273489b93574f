"""The rules a Ballast member must keep, as the conformance kit checks them: each a
sentence of docs/protocol.md ("The member's rules") and the scenario that tests it. The
catalogue and the verdicts are plain values; ``scenarios`` produces them, ``report``
prints them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Outcome = Literal["pass", "fail", "n/a"]


@dataclass(frozen=True, slots=True)
class Rule:
    name: str
    #: The rule in one sentence, as the protocol states it.
    text: str


RULES: tuple[Rule, ...] = (
    Rule("announce", "announces itself: a presence for its own key, valid, holding nothing"),
    Rule(
        "grant",
        "consumes exactly the partitions of a grant issued to its process, then "
        "acknowledges the grant's generation with exactly those partitions",
    ),
    Rule(
        "revoke",
        "on a record that drops partitions: commits what it processed of them "
        "and stops reading them before it acknowledges",
    ),
    Rule(
        "instance",
        "does not consume a grant issued to another process under its member "
        "id (a predecessor's), until a grant names its own instance",
    ),
    Rule(
        "stale",
        "ignores a record of its current epoch whose generation does not beat the one it applied",
    ),
    Rule(
        "own_epoch",
        "ignores a record below the epoch of its key's current record, whatever its generation",
    ),
    Rule(
        "fence",
        "ignores a record below the highest fence marker epoch of its partition, "
        "even before its own key has seen that epoch",
    ),
    Rule(
        "takeover",
        "applies a new epoch's record even when its generation is lower: "
        "(epoch, generation) decides, never generation alone or arrival order",
    ),
    Rule(
        "poison",
        "skips malformed records on its key (bad JSON, oversized, body and key "
        "disagreeing, out-of-range numbers) and keeps running",
    ),
    Rule(
        "own_partition",
        "acts only on records in the partition its key hashes to (Kafka's murmur2 partitioner)",
    ),
    Rule("tombstone", "a tombstone for its key: it holds nothing, and says so"),
    Rule(
        "leave",
        "on SIGTERM: commits what it processed, announces 'leaving' or clears "
        "its presence, and exits",
    ),
    Rule("will", "a crash clears its presence (the MQTT Will; MQTT presence only)"),
)

RULE_NAMES = tuple(r.name for r in RULES)


@dataclass(frozen=True, slots=True)
class Finding:
    rule: str
    scenario: str
    outcome: Outcome
    detail: str = ""


def render(findings: list[Finding]) -> str:
    """A table a person reads: one line a rule, the failures' reasons under it."""
    text = {r.name: r.text for r in RULES}
    width = max(len(n) for n in RULE_NAMES)
    lines = []
    for f in findings:
        mark = {"pass": "PASS", "fail": "FAIL", "n/a": "n/a "}[f.outcome]
        lines.append(f"{mark}  {f.rule:<{width}}  {text.get(f.rule, '')}")
        if f.detail and f.outcome != "pass":
            lines.append(f"      {' ' * width}  -> {f.detail}")
    failed = sum(f.outcome == "fail" for f in findings)
    passed = sum(f.outcome == "pass" for f in findings)
    lines.append(f"{passed} passed, {failed} failed")
    return "\n".join(lines)
