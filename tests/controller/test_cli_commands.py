"""Every documented ``ballast`` command, run as a user runs it (a subprocess), ends with
clean output: no traceback, one readable line for an expected error, and an exit code
that says what happened. Broker-backed commands are in tools/test_operator_cli.py."""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from controller.cli import build_parser
from controller.tools import embedded

BIN = str(Path(sys.executable).parent / "ballast")
ROOT = Path(__file__).resolve().parents[2]


def run(
    *args: str, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [BIN, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        cwd=ROOT,
        env={**os.environ, **(env or {})},
    )
    assert "Traceback" not in result.stdout + result.stderr, result.stderr[-3000:]
    return result


def _parsers() -> list[tuple[list[str], argparse.ArgumentParser]]:
    """Every (sub)parser with its command path, nested ones included (``dev up``)."""
    found: list[tuple[list[str], argparse.ArgumentParser]] = []

    def walk(parser: argparse.ArgumentParser, prefix: list[str]) -> None:
        found.append((prefix, parser))
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, [*prefix, name])

    walk(build_parser(), [])
    return found


@pytest.mark.parametrize(
    "command", [p for p, _ in _parsers()], ids=lambda c: " ".join(c) or "ballast"
)
def test_help_is_plain_text_with_defaults(command: list[str]) -> None:
    result = run(*command, "--help")
    assert result.returncode == 0
    text = result.stdout
    assert "``" not in text  # no reStructuredText markup
    assert ":class:" not in text


def test_every_argument_has_help() -> None:
    unexplained = [
        f"{' '.join(path)} {action.dest}"
        for path, parser in _parsers()
        for action in parser._actions
        if not isinstance(action, argparse._SubParsersAction) and not action.help
    ]
    assert unexplained == []


def test_defaults_are_shown() -> None:
    text = run("run", "--help").stdout
    assert "(default: config/ballast.yaml)" in text
    text = run("demo", "--help").stdout
    assert "(default: 5)" in text
    assert "(default: lagsticky)" in text


def test_version() -> None:
    result = run("--version")
    assert result.returncode == 0
    assert re.fullmatch(r"ballast \d+\.\d+\.\d+\S*\n", result.stdout)


def test_schema_into_a_closed_pipe_is_quiet() -> None:
    """``ballast schema | head``: the reader goes away; no BrokenPipeError traceback."""
    proc = subprocess.Popen([BIN, "schema"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None
    proc.stdout.close()  # before it writes: its first write meets a closed pipe
    _, err = proc.communicate(timeout=60)
    assert b"Traceback" not in err
    assert b"BrokenPipe" not in err
    assert proc.returncode == 141


def test_schema_is_json() -> None:
    result = run("schema")
    assert result.returncode == 0
    assert "presence" in json.loads(result.stdout)


def test_assign_and_check_config(example_env: dict[str, str]) -> None:
    assert run("check-config", "config/ballast.yaml", env=example_env).returncode == 0
    result = run(
        "assign", "--strategy", "lagsticky", "--scenario", "config/examples/skewed-fleet.json"
    )
    assert result.returncode == 0
    assert "valid=True" in result.stdout


def test_unsigned_operation_must_be_chosen(tmp_path: Path) -> None:
    """Secure by default: a config without a signing key is refused by ``run`` and
    ``check-config`` (exit 2, naming the setting and the way out); with
    ``signing.required: false`` it is unsigned operation, chosen."""
    config = tmp_path / "unsigned.yaml"
    config.write_text("groups: [{name: g}]\n")
    for command in (["check-config", str(config)], ["run", "--config", str(config)]):
        result = run(*command)
        assert result.returncode == 2, result.stderr
        assert "signing.private_key_file is not set" in result.stderr
        assert "signing.required: false" in result.stderr
    config.write_text("groups: [{name: g}]\nsigning: {required: false}\n")
    assert run("check-config", str(config)).returncode == 0


def test_bad_config_is_one_line_naming_its_source(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("groups: [{name: a}]\nrebalance: {leave_grase: 1s}\n")
    result = run("check-config", str(bad), env={"BALLAST_REBALANSE__MAX_MOVES": "3"})
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert lines[0].startswith("ballast: error: ")
    assert any(
        f"{bad}: rebalance.leave_grase: unknown key (did you mean `leave_grace`?)" in x
        for x in lines
    )
    assert any(
        "environment BALLAST_REBALANSE__MAX_MOVES: rebalanse: unknown key (did you mean `rebalance`?)"
        in x
        for x in lines
    )
    missing = run("check-config", str(tmp_path / "nope.yaml"))
    assert missing.returncode == 2
    assert "cannot read" in missing.stderr


def _unreachable_env(timeout: str, example_env: dict[str, str]) -> dict[str, str]:
    return {
        **example_env,
        "BALLAST_KAFKA__BOOTSTRAP_SERVERS": f"127.0.0.1:{embedded.free_port()}",
        "BALLAST_STARTUP__TIMEOUT": timeout,
        "BALLAST_HTTP__PORT": "0",
        "BALLAST_LOGGING__FORMAT": "json",
    }


def test_run_without_a_broker_retries_then_exits_with_one_line(
    example_env: dict[str, str],
) -> None:
    env = _unreachable_env("2s", example_env)
    result = run("run", "--config", "config/ballast.yaml", env=env)
    assert result.returncode == 3
    events = [json.loads(line) for line in result.stderr.splitlines()]  # JSON only
    attempts = [e for e in events if e["event"] == "broker_unreachable"]
    assert len(attempts) >= 2  # retried with backoff, one line per attempt
    assert all(e["broker"] == "Kafka" and e["error"] == "no broker answered" for e in attempts)
    (failed,) = [e for e in events if e["event"] == "startup_failed"]
    assert "cannot reach Kafka at 127.0.0.1:" in failed["error"]
    assert "kafka.bootstrap_servers" in failed["error"]
    # aiokafka's own "Unable connect to" lines are not repeated beside ours.
    assert not [e for e in events if e.get("logger") == "aiokafka"]


def test_run_is_alive_not_ready_while_waiting_and_ctrl_c_exits_130(
    tmp_path: Path, example_env: dict[str, str]
) -> None:
    port = embedded.free_port()
    env = {**os.environ, **_unreachable_env("5m", example_env), "BALLAST_HTTP__PORT": str(port)}
    proc = subprocess.Popen(
        [BIN, "run", "--config", "config/ballast.yaml"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        embedded.wait_for_port(port, timeout=30, proc=proc)  # type: ignore[arg-type]
        import urllib.error  # noqa: PLC0415
        import urllib.request  # noqa: PLC0415

        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as r:
            assert r.status == 200
        with pytest.raises(urllib.error.HTTPError) as not_ready:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5)
        assert not_ready.value.code == 503
        time.sleep(1)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130
    assert "Traceback" not in out + err


def test_audit_without_a_broker_is_one_line() -> None:
    result = run("audit", "--bootstrap", f"127.0.0.1:{embedded.free_port()}")
    assert result.returncode == 3
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "cannot reach Kafka at 127.0.0.1:" in result.stderr
    assert "Unclosed" not in result.stderr


def test_operator_commands_without_a_controller_are_one_line() -> None:
    url = f"http://127.0.0.1:{embedded.free_port()}"
    for args in (["status"], ["describe", "g"], ["pause", "g"], ["drain", "g", "m"]):
        result = run(*args, "--url", url)
        assert result.returncode == 3, args
        assert result.stderr.count("\n") == 1
        assert f"cannot reach the controller at {url}" in result.stderr
    bad = run("status", "--url", "ftp://x")
    assert bad.returncode == 2
    assert "not an http(s) URL" in bad.stderr


def test_dev_down_with_nothing_running(tmp_path: Path) -> None:
    result = run("dev", "down", "--dir", str(tmp_path))
    assert result.returncode == 0
    assert "no dev brokers were running" in result.stdout
    shown = run("dev", "show", "--dir", str(tmp_path))
    assert shown.returncode == 2


def test_pipeline_synth_writes_a_trace(tmp_path: Path) -> None:
    out = tmp_path / "trace.jsonl"
    result = run(
        "pipeline",
        "synth",
        "--groups",
        "3",
        "--max-members",
        "5",
        "--steps",
        "2",
        "--out",
        str(out),
    )
    assert result.returncode == 0, result.stderr
    assert out.stat().st_size > 0
