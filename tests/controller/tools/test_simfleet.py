"""The simulated fleet's split over processes (``fleet_ops``' agents)."""

from __future__ import annotations

from controller.tools.simfleet import Fleet
from controller.wire.records import assignment_key, fence_key


def test_a_fleet_part_skips_only_the_records_of_members_it_never_hosts() -> None:
    part = Fleet("127.0.0.1:1", 1, "g", hosts=lambda name: int(name[1:]) % 2 == 0)
    assert part._not_ours(assignment_key("g", "m1"))
    assert not part._not_ours(assignment_key("g", "m2"))
    # The fence markers decide what counts for every member: never skipped.
    assert not part._not_ours(fence_key("g"))
    assert not part._not_ours(None)
    whole = Fleet("127.0.0.1:1", 1, "g")
    assert not whole._not_ours(assignment_key("g", "m1"))
