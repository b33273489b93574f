"""An operator's constraint change is checked against the group before it is stored:
names that do not exist are refused one by one, and what a cap would leave unread is
counted as the assignor would place it."""

from __future__ import annotations

from collections.abc import Mapping

from controller.core.constraint_check import UNKNOWN_MEMBER_HINT, left_unread, unknown_names
from controller.wire.records import ConstraintPatch, ConstraintSet, Pin

PPT = {"orders": 12}
MEMBERS = {"w1", "w2"}


def _check(
    patch: Mapping[str, object], overrides: ConstraintSet | None = None, **kw: bool
) -> list[str]:
    return unknown_names(
        ConstraintPatch.model_validate(patch),
        PPT,
        MEMBERS.__contains__,
        overrides or ConstraintSet(),
        **kw,
    )


def test_what_exists_passes() -> None:
    assert _check({"pins": [{"topic": "orders", "partition": 11, "member": "w1"}]}) == []
    assert _check({"max_partitions": {"w2": 0}, "racks": {"w1": "a"}}) == []


def test_each_name_that_does_not_exist_is_one_problem() -> None:
    problems = _check(
        {
            "pins": [
                {"topic": "orders", "partition": 99, "member": "w1"},
                {"topic": "nosuchtopic", "partition": 0, "member": "w1"},
                {"topic": "orders", "partition": 2, "member": "ghost"},
            ],
            "unpin": [["orders", 7]],
            "max_partitions": {"ghost": 3, "w1": None},
            "racks": {"ghost": "a", "w2": None},
        }
    )
    assert problems == [
        "pin orders:99=w1: orders has 12 partition(s), 0 to 11",
        "pin nosuchtopic:0=w1: the group reads no topic 'nosuchtopic'",
        f"pin orders:2=ghost: no member 'ghost' in the group {UNKNOWN_MEMBER_HINT}",
        "unpin orders:7: no pin of the admin API to remove",
        f"max_partitions ghost=3: no member 'ghost' in the group {UNKNOWN_MEMBER_HINT}",
        "max_partitions w1: no cap of the admin API to remove",
        f"racks ghost=a: no member 'ghost' in the group {UNKNOWN_MEMBER_HINT}",
        "racks w2: no rack of the admin API to remove",
    ]


def test_members_may_be_named_before_they_join_when_allowed() -> None:
    patch = {
        "pins": [{"topic": "orders", "partition": 2, "member": "ghost"}],
        "max_partitions": {"ghost": 3},
    }
    assert _check(patch, allow_unknown_members=True) == []
    # Topics and partitions are never pre-provisioned: they exist or the pin is a typo.
    bad = {"pins": [{"topic": "orders", "partition": 12, "member": "ghost"}]}
    assert _check(bad, allow_unknown_members=True) == [
        "pin orders:12=ghost: orders has 12 partition(s), 0 to 11"
    ]


def test_removing_what_is_there_passes() -> None:
    overrides = ConstraintSet(
        pins=[Pin(topic="orders", partition=7, member="w1")],
        max_partitions={"w1": 2},
        racks={"w2": "b"},
    )
    patch = {"unpin": [["orders", 7]], "max_partitions": {"w1": None}, "racks": {"w2": None}}
    assert _check(patch, overrides) == []


def test_caps_that_strand_partitions_are_counted() -> None:
    subs = {"w1": frozenset({"orders"}), "w2": frozenset({"orders"})}
    assert left_unread(PPT, subs, ConstraintSet(max_partitions={"w1": 3})) == 0
    assert left_unread(PPT, subs, ConstraintSet(max_partitions={"w1": 3, "w2": 0})) == 9
    # A member reading another topic does not help: it cannot take orders partitions.
    other = {**subs, "w3": frozenset({"payments"})}
    ppt = {**PPT, "payments": 2}
    assert left_unread(ppt, other, ConstraintSet(max_partitions={"w1": 1, "w2": 1})) == 10
    assert left_unread(PPT, {}, ConstraintSet(max_partitions={"w1": 0})) == 0
