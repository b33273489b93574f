"""A Kafka broker with more partitions than its open-file limit or ``vm.max_map_count``
allows stops mid-run ("Too many open files", "Map failed"); the test and benchmark tools
make room for it, or refuse such a run up front with the fix."""

from __future__ import annotations

import resource
from collections.abc import Iterator
from pathlib import Path

import pytest

from controller.tools.apache_kafka import check_room


@pytest.fixture
def file_limit() -> Iterator[int]:
    """The hard open-file limit (an unlimited one read as 2**20, Linux's usual ceiling
    for one process); the limits as they were are restored after the test."""
    before = resource.getrlimit(resource.RLIMIT_NOFILE)
    yield before[1] if before[1] != resource.RLIM_INFINITY else 1 << 20
    resource.setrlimit(resource.RLIMIT_NOFILE, before)


def test_a_broker_short_of_memory_maps_is_refused_with_the_fix(
    tmp_path: Path, file_limit: int
) -> None:
    partitions = min(10_000, file_limit - 2_000)  # open files within reach
    maps = tmp_path / "max_map_count"
    maps.write_text(f"{2 * partitions + 2_000}\n")
    check_room(partitions, maps)
    maps.write_text(f"{2 * partitions}\n")
    with pytest.raises(RuntimeError, match=rf"vm.max_map_count is {2 * partitions}: run `sysctl"):
        check_room(partitions, maps)
    check_room(partitions, tmp_path / "absent")  # not Linux: nothing known about maps


def test_the_open_file_limit_is_raised_for_the_broker_or_the_run_refused(
    tmp_path: Path, file_limit: int
) -> None:
    maps = tmp_path / "max_map_count"
    maps.write_text("262144\n")
    hard = file_limit
    resource.setrlimit(
        resource.RLIMIT_NOFILE, (1024, resource.getrlimit(resource.RLIMIT_NOFILE)[1])
    )
    check_room(hard - 2_000, maps)  # up to the hard limit: raised
    assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] == hard
    if resource.getrlimit(resource.RLIMIT_NOFILE)[1] == resource.RLIM_INFINITY:
        return  # no hard limit to go past (and lowering it to probe could not be undone)
    if _may_raise_hard_limit(hard):
        check_room(hard, maps)
        assert resource.getrlimit(resource.RLIMIT_NOFILE)[1] >= hard + 2_000
    else:  # past it: refused with the fix (no privilege to raise the hard limit, here)
        with pytest.raises(
            RuntimeError, match=f"need about {hard + 2_000} open files, the limit is {hard}"
        ):
            check_room(hard, maps)


def _may_raise_hard_limit(hard: int) -> bool:
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard + 1))
    except (ValueError, OSError):
        return False
    return True
