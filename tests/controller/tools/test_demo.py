"""``ballast demo`` runs its scenario end to end and leaves no process behind, also when
interrupted with Ctrl-C."""

from __future__ import annotations

import os
import re
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


def test_demo_shows_lag_moves_and_compares_with_sticky() -> None:
    """Both strategies play the same scenario. With lagsticky the controller moves
    partitions for lag, and says so with the member and how far past the bound it was;
    with sticky (no lag given to the controller) nothing moves for lag. No traceback and
    no asyncio error anywhere (the crash step used to log one)."""
    result = subprocess.run(
        [str(BIN), "demo", "--members", "3", "--partitions", "6", "--pace", "2", "--compare"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    out = result.stdout
    for noise in ("Traceback", "Exception in callback", "Bad file descriptor"):
        assert noise not in out + result.stderr, noise
    lagsticky, sticky = out.split("ballast demo (sticky)", 1)
    for run in (lagsticky, sticky):
        for step in ("member-0 leaves cleanly", "member-new joins", "member-1 crashes", "hot spot"):
            assert step in run
    assert re.search(
        r"moved \d+(, \d+ of them)? for lag: member-\S+ was \d+\.\dx the bound", lagsticky
    )
    assert " for lag: " not in sticky.split("demo stopped", 1)[0].split("events:")[-1]
    last = lagsticky.rsplit("ballast demo (lagsticky)", 1)[1]
    assert "member-new" in last
    assert "count spread 0" in last
    table = out.rsplit("demo stopped; brokers shut down", 1)[1]
    rows = {line[:33].strip(): line[33:].split() for line in table.strip().splitlines()[1:]}
    assert int(rows["of which for lag"][0]) >= 1
    assert int(rows["of which for lag"][1]) == 0


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
    assert proc.returncode == 130, err[-2000:]
    assert "ballast: interrupted" in err
    assert "Traceback" not in out + err
    time.sleep(1)
    assert _gone(brokers), f"brokers left behind: {brokers}"


@pytest.mark.parametrize("client", ["confluent", "kafka-python"])
def test_demo_runs_on_the_synchronous_bindings(client: str) -> None:
    """``--client``: the same scenario with every member on another binding, and the
    controller still moves partitions for lag (the members report it)."""
    result = subprocess.run(
        [str(BIN), "demo", "--members", "3", "--partitions", "6", "--pace", "2",
         "--client", client],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    assert "Traceback" not in result.stdout + result.stderr
    assert f"members on {client}" in result.stdout
    for step in ("member-0 leaves cleanly", "member-new joins", "member-1 crashes", "hot spot"):
        assert step in result.stdout
    last = result.stdout.rsplit("ballast demo (lagsticky)", 1)[1]
    assert "count spread 0" in last
