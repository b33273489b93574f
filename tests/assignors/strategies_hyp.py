"""Hypothesis generators for groups, assignments and event sequences."""

from __future__ import annotations

from hypothesis import strategies as st

from assignors import TopicPartition

TOPICS = [f"t{i}" for i in range(5)]
MEMBERS = [f"m{i:02d}" for i in range(12)]


@st.composite
def groups(
    draw: st.DrawFn, *, uniform: bool | None = None
) -> tuple[dict[str, int], dict[str, list[str]]]:
    topics = draw(st.lists(st.sampled_from(TOPICS), min_size=1, max_size=5, unique=True))
    ppt = {t: draw(st.integers(0, 9)) for t in topics}
    members = draw(st.lists(st.sampled_from(MEMBERS), min_size=1, max_size=10, unique=True))
    is_uniform = draw(st.booleans()) if uniform is None else uniform
    if is_uniform:
        subs = {m: list(topics) for m in members}
    else:
        # Subscriptions may name topics that do not exist.
        pool = [*topics, "ghost"]
        subs = {
            m: draw(st.lists(st.sampled_from(pool), max_size=len(pool), unique=True))
            for m in members
        }
    return ppt, subs


@st.composite
def messy_current(
    draw: st.DrawFn, ppt: dict[str, int], members: list[str]
) -> dict[str, list[tuple[str, int]]]:
    """Previous assignments naming departed members, vanished partitions and double claims."""
    owners = [*members, "departed-a", "departed-b"]
    out: dict[str, list[tuple[str, int]]] = {}
    for topic, count in ppt.items():
        for p in range(count + 2):
            claimants = draw(st.lists(st.sampled_from(owners), max_size=2, unique=True))
            for m in claimants:
                out.setdefault(m, []).append((topic, p))
    return out


@st.composite
def lags(draw: st.DrawFn, ppt: dict[str, int]) -> dict[TopicPartition, int]:
    heavy = draw(st.booleans())
    out = {}
    for topic, count in ppt.items():
        for p in range(count):
            base = draw(st.integers(0, 10_000))
            out[TopicPartition(topic, p)] = base * (draw(st.integers(1, 50)) if heavy else 1)
    return out
