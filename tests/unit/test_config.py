"""Configuration: YAML + environment, validated with errors that name the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from controller.cli import main
from controller.config import load_config
from controller.errors import InputError

EXAMPLE = Path(__file__).parents[2] / "config" / "ballast.yaml"


def test_example_config_is_valid_and_documented_defaults_hold() -> None:
    cfg = load_config(EXAMPLE, environ={})
    assert cfg.groups[0].name == "orders-fleet"
    assert cfg.rebalance.delay == 1.0
    assert cfg.membership.source == "mqtt"


def test_environment_overrides_and_durations() -> None:
    cfg = load_config(
        EXAMPLE,
        environ={
            "BALLAST_KAFKA__BOOTSTRAP_SERVERS": "broker:9093",
            "BALLAST_REBALANCE__DELAY": "250ms",
            "BALLAST_REBALANCE__LEAVE_GRACE": "2m",
            "BALLAST_KAFKA__IDEMPOTENT_PRODUCER": "false",
            "UNRELATED": "x",
        },
    )
    assert cfg.kafka.bootstrap_servers == "broker:9093"
    assert cfg.rebalance.delay == 0.25
    assert cfg.rebalance.leave_grace == 120
    assert cfg.kafka.idempotent_producer is False


@pytest.mark.parametrize(
    ("yaml_text", "env", "expected"),
    [
        ("groups: []", {}, "groups: List should have at least 1 item"),
        ("groups: [{name: a}, {name: a}]", {}, "repeated: a"),
        (
            "groups: [{name: a}]\nrebalance: {delay: soon}",
            {},
            "rebalance.delay: Value error, not a duration: 'soon'",
        ),
        ("groups: [{name: a}]\nrebalanse: {}", {}, "rebalanse: Extra inputs are not permitted"),
        (
            "groups: [{name: a}]\nmqtt: {port: 70000}",
            {},
            "mqtt.port: Input should be less than or equal to 65535",
        ),
        (
            "groups: [{name: a}]",
            {"BALLAST_LAG__SOURCE": "magic"},
            "lag.source: Input should be 'poll', 'topic' or 'none' (from environment BALLAST_LAG__SOURCE)",
        ),
        (
            "groups: [{name: a}]\nrebalance: {trigger_ratio: 1.1, target_ratio: 1.5}",
            {},
            "target_ratio must not exceed trigger_ratio",
        ),
        ("- just\n- a list", {}, "the top level must be a mapping"),
        ("groups: [", {}, "invalid YAML"),
        ("groups: [{name: 'bad name'}]", {}, "groups.0.name: String should match pattern"),
    ],
)
def test_bad_configs_name_the_key(
    tmp_path: Path, yaml_text: str, env: dict[str, str], expected: str
) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(yaml_text)
    with pytest.raises(InputError) as err:
        load_config(path, environ=env)
    assert expected in str(err.value)
    assert str(path) in str(err.value)


def test_check_config_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check-config", str(EXAMPLE)]) == 0
    assert "OK" in capsys.readouterr().out
    bad = tmp_path / "bad.yaml"
    bad.write_text("groups: []\n")
    assert main(["check-config", str(bad)]) == 2
    assert "groups" in capsys.readouterr().err
    assert main(["check-config", str(tmp_path / "missing.yaml")]) == 2
    assert "cannot read" in capsys.readouterr().err
