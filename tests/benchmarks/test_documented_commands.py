"""Every benchmark command the docs print runs as printed, smoke-sized: the same script
and options on its default broker, fewer members, partitions and seconds. Each case
names the line of docs it stands for, and the test fails when that line is no longer in
the docs (a renamed option would otherwise leave the docs behind). What each benchmark
measures is checked only where a tiny run can show it; timings are never asserted."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).parents[2]
DOCS = ("performance.md", "assignors.md", "pipeline.md")


def _documented(command: str) -> None:
    text = " ".join((ROOT / "docs" / d).read_text().replace("\\\n", " ") for d in DOCS)
    text = " ".join(text.split())
    assert command in text, f"no longer in {', '.join(DOCS)}: {command}"


def _run(script: str, *args: str, timeout: float = 600) -> str:
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / script), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,  # the assertion shows the benchmark's own error
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def _last_json(out: str) -> Any:
    return json.loads(out.strip().splitlines()[-1])


def _last_json_object(out: str) -> Any:
    """An indented JSON object that ends the output."""
    return json.loads(out[out.index("{") :])


def test_signing_cost() -> None:
    _documented("benchmarks/signing_cost.py")
    row = _last_json(_run("signing_cost.py", "--members", "20", "--per-member", "5",
                          "--repeat", "2", "--json"))  # fmt: skip
    assert row["partitions"] == 100
    assert row["verify_per_record_us"] > 0


def test_cli_startup() -> None:
    _documented("python benchmarks/cli_startup.py")
    out = _last_json_object(_run("cli_startup.py", "--runs", "1", "--json"))
    (row,) = out["trees_ms"].values()
    assert set(row) == {
        "import controller.cli", "ballast --version", "ballast --help", "ballast status",
        "ballast worker --help",
    }  # fmt: skip
    assert all(ms > 0 for ms in row.values())


def test_fuzz_readers() -> None:
    _documented("benchmarks/fuzz_readers.py")
    counts = _last_json(_run("fuzz_readers.py", "--count", "300", "--json"))
    assert len(counts) >= 7  # the record readers and the config
    for reader, c in counts.items():
        assert c["inputs"] == 300, reader
        assert c["escaped"] == 0, reader  # every input: a value or the documented error
        assert c["accepted"] + c["refused"] == c["inputs"], reader


def test_differential() -> None:
    _documented(
        "PYTHONHASHSEED=0 python benchmarks/differential.py --runs 400 --events 150 --fresh 1000"
    )
    report = _last_json_object(
        _run("differential.py", "--runs", "3", "--events", "20", "--fresh", "5")
    )
    assert report["failure_count"] == 0


def test_constraints_cost() -> None:
    _documented("`python benchmarks/constraints_cost.py`")
    out = _run("constraints_cost.py", "--members", "200", "--partitions", "2000")
    rows = [line.split("|") for line in out.splitlines() if line.startswith("| ")][1:]
    assert [r[1].strip() for r in rows] == ["none", "2 pins, 10 caps"]
    assert all(r[6].strip() == "0" for r in rows)  # no constraint broken


def test_the_rows_beside_kafkas_own_assignors(tmp_path: Path) -> None:
    """The Java peer (Kafka 4.4's jars) runs on the same inputs, one row each."""
    _documented('python benchmarks/assignors_bench.py --scale --only "identical 10k x 100k"')
    _documented("python benchmarks/assignors_bench.py --scale --markdown benchmarks/results/")
    table = tmp_path / "scale.md"
    _run("assignors_bench.py", "--scale", "--quick", "--only", "identical 1k x 10k",
         "--repeat", "2", "--markdown", str(table))  # fmt: skip
    rows = [r.split("|") for r in table.read_text().splitlines()]
    leave = [r for r in rows if len(r) > 4 and r[1].strip() == "identical 1k x 10k"
             and r[2].strip() == "leave"]  # fmt: skip
    assert leave, table.read_text()[:2000]
    assert all(float(r[3]) > 0 and float(r[4]) > 0 for r in leave)  # Uniform, Sticky


def test_samples_write() -> None:
    _documented("python benchmarks/samples_write.py --partitions 100000 --writes 4")
    out = json.loads(_run("samples_write.py", "--partitions", "200", "--writes", "2"))
    assert out["partitions"] == 200
    assert out["bulk"]["cpu_s"] >= 0
    assert out["per_sample"]["cpu_s"] >= 0


def test_controller_bench() -> None:
    _documented(
        "python benchmarks/controller_bench.py --members 1000 --partitions 100000 --events 40 "
        "--burst 500 --broker tansu"
    )
    out = json.loads(_run("controller_bench.py", "--members", "10", "--partitions", "200",
                          "--topics", "2", "--events", "3", "--burst", "20", "--broker", "tansu"))  # fmt: skip
    assert out["events"] == 6  # three leaves and their rejoins, each published
    assert out["burst_joins"] == 20


def test_load_soak() -> None:
    _documented(
        "python benchmarks/load_soak.py --members 1000 --partitions 100000 --seconds 2 "
        "--cold-start all --broker tansu"
    )
    out = json.loads(_run("load_soak.py", "--members", "20", "--partitions", "200",
                          "--seconds", "2", "--cold-start", "all", "--broker", "tansu"))  # fmt: skip
    assert out["audit"] == "clean"
    assert out["double_owned"] == 0
    assert out["rebalances"] > 0


def test_connection_flood() -> None:
    _documented("python benchmarks/connection_flood.py --connections 20000 --seconds 30")
    out = _run("connection_flood.py", "--connections", "200", "--seconds", "3")
    daemons = {d["daemon"]: d for d in map(json.loads, out.strip().splitlines())}
    assert set(daemons) == {"bounded", "unbounded"}
    assert daemons["bounded"]["alive"]
    assert daemons["bounded"]["failed"] == {"healthz_api": 0, "healthz_metrics": 0, "keda": 0}


def test_handoff_bench() -> None:
    _documented("python benchmarks/handoff_bench.py --consumers 20 --events 5")
    printed = _run("handoff_bench.py", "--consumers", "3", "--events", "1")
    out = json.loads(printed[printed.rindex("\n{\n") :])  # after the members' log lines
    for peer in ("ballast", "group_protocol", "kip848"):
        assert out[peer]["duplicates"] == 0, peer
        assert out[peer]["clean_leave_ms"]["n"] == 1, peer
    assert out["ballast"]["crash_ms"]["n"] == 1


def test_autoscale() -> None:
    """A step of 40 -> 120 records/s against two pods of 30 records/s each: Ballast's
    recommendation scales up, and neither fleet reads an offset twice."""
    _documented("python benchmarks/autoscale.py --json")
    out = _last_json(_run(
        "autoscale.py", "--partitions", "6", "--input", "40", "--member-rate", "30",
        "--warmup", "5", "--step", "10", "--after", "10", "--sync", "2", "--stabilization", "4",
        "--start-delay", "1", "--initial", "2", "--min", "1", "--max", "4", "--json",
    ))  # fmt: skip
    for fleet in ("ballast", "keda"):
        assert out[f"{fleet}_read_twice"] == 0, fleet
        assert out[f"{fleet}_pod_crashes"] == 0, fleet
    assert out["ballast_peak_replicas"] > 2, out["ballast_replicas"]
