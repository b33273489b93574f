"""``ballast demo`` runs its scenario end to end and leaves no process behind, also when
interrupted with Ctrl-C."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

BIN = Path(sys.executable).parent / "ballast"


def _children_of(pid: int) -> list[int]:
    """Processes whose parent is ``pid`` (brokers the demo started)."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(entry))
    return out


def _gone(pids: list[int]) -> bool:
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            return False
    return True


def test_demo_plays_its_scenario_and_cleans_up() -> None:
    result = subprocess.run(
        [str(BIN), "demo", "--members", "3", "--partitions", "6", "--pace", "2"],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    out = result.stdout
    for step in ("member-0 leaves cleanly", "member-new joins", "member-1 crashes", "lag spike"):
        assert step in out
    last = out.rsplit("ballast demo", 1)[1]
    assert "member-new" in last
    assert "count spread 0" in last
    assert out.rstrip().endswith("demo stopped; brokers shut down")


def test_ctrl_c_stops_everything() -> None:
    proc = subprocess.Popen(
        [str(BIN), "demo", "--members", "3", "--partitions", "6", "--pace", "30"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    brokers: list[int] = []
    while len(brokers) < 2 and time.monotonic() < deadline:
        brokers = _children_of(proc.pid)
        time.sleep(0.2)
    assert len(brokers) >= 2, "the demo never started its brokers"
    time.sleep(3)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err[-2000:]
    assert "interrupted" in out or "demo stopped" in out
    time.sleep(1)
    assert _gone(brokers), f"brokers left behind: {brokers}"
