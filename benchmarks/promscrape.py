"""Read a running daemon's Prometheus metrics (shared by the benchmarks)."""

from __future__ import annotations

import urllib.request


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
