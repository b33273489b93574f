"""What the benchmarks read from a running daemon: percentiles, raw or from its
Prometheus histograms, and its summary of a group."""

from __future__ import annotations

import json
import urllib.request
from typing import Any


def pct(values: list[float], q: float) -> float:
    """The ``q`` quantile of raw values, nearest rank (0.0 when there are none)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] if ordered else 0.0


def group_summary(port: int, group: str) -> dict[str, Any]:
    """``group`` as ``/v1/groups`` sums it up (generation, members, revoking, settled):
    O(members) to answer and to read. ``/v1/groups/<group>`` lists every member, and
    reading that every 20 ms took most of a 1 000-member bench's CPU."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/groups", timeout=10) as r:
        summary: dict[str, Any] = json.loads(r.read())["groups"][group]
    return summary


def scrape(port: int) -> dict[str, float]:
    """The daemon's metrics as {"name{labels}": value}."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            out[key] = float(value)
    return out


def quantile(
    after: dict[str, float],
    name: str,
    q: float,
    *,
    group: str,
    before: dict[str, float] | None = None,
) -> float:
    """``histogram_quantile`` over the observations between two scrapes (``before``
    absent: since start), interpolated linearly inside the bucket, as Prometheus does.
    NaN when nothing was observed."""
    prefix, label = f"{name}_bucket{{", f'group="{group}"'

    def counts(m: dict[str, float]) -> dict[float, float]:
        return {
            float(k.split('le="')[1].split('"')[0]): v
            for k, v in m.items()
            if k.startswith(prefix) and label in k
        }

    now, then = counts(after), counts(before or {})
    buckets = sorted((b, now[b] - then.get(b, 0.0)) for b in now)
    total = buckets[-1][1] if buckets else 0.0
    if total <= 0:
        return float("nan")
    rank, lower, below = q * total, 0.0, 0.0
    for bound, count in buckets:
        if count >= rank:
            if bound == float("inf"):
                return lower
            return lower + (bound - lower) * (rank - below) / max(count - below, 1e-12)
        lower, below = bound, count
    return lower
