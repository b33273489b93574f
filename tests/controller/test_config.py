"""Configuration: YAML + environment, validated with errors that name the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from controller.cli import main
from controller.config import applied_overrides, load_config, misspelt_overrides
from controller.errors import InputError

EXAMPLE = Path(__file__).parents[2] / "config" / "ballast.yaml"


def test_example_config_is_valid_and_documented_defaults_hold(
    example_env: dict[str, str],
) -> None:
    cfg = load_config(EXAMPLE, environ=example_env)
    assert cfg.signing.verifier() is not None  # the example signs
    assert cfg.groups[0].name == "orders-fleet"
    assert cfg.rebalance.delay == 1.0
    assert cfg.membership.source == "mqtt"


def test_environment_overrides_and_durations(example_env: dict[str, str]) -> None:
    cfg = load_config(
        EXAMPLE,
        environ={
            **example_env,
            "BALLAST_KAFKA__BOOTSTRAP_SERVERS": "broker:9093",
            "BALLAST_REBALANCE__DELAY": "250ms",
            "BALLAST_REBALANCE__LEAVE_GRACE": "2m",
            "BALLAST_KAFKA__IDEMPOTENT_PRODUCER": "false",
            "UNRELATED": "x",
            # Not overrides: the operator commands' settings, a test's and fault points'.
            "BALLAST_URL": "http://ballast:8080",
            "BALLAST_TOKEN_FILE": "/run/secrets/token",
            "BALLAST_DASHBOARD_PNG": "/tmp/x.png",
            "BALLAST_FAULT_POINTS": "x",
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
        (
            "groups: [{name: a}]\nrebalanse: {}",
            {},
            "rebalanse: unknown key (did you mean `rebalance`?)",
        ),
        (
            "groups: [{name: a}]\nrebalance: {leave_grase: 1s}",
            {},
            "rebalance.leave_grase: unknown key (did you mean `leave_grace`?)",
        ),
        (
            "groups: [{name: a, comit_group: x}]",
            {},
            "groups.0.comit_group: unknown key (did you mean `commit_group`?)",
        ),
        ("groups: [{name: a}]\nhttp: {zzz: 1}", {}, "http.zzz: unknown key (known: host, port,"),
        (
            "groups: [{name: a}]",
            {"BALLAST_REBALANSE__MAX_MOVES": "3"},
            "environment BALLAST_REBALANSE__MAX_MOVES: rebalanse: unknown key (did you mean `rebalance`?)",
        ),
        (
            "groups: [{name: a}]\nmqtt: {port: 70000}",
            {},
            "mqtt.port: Input should be less than or equal to 65535",
        ),
        (
            "groups: [{name: a}]",
            {"BALLAST_LAG__SOURCE": "magic"},
            "environment BALLAST_LAG__SOURCE: lag.source: Input should be 'poll', 'topic' or 'none'",
        ),
        (
            "groups: [{name: a}]\nrebalance: {trigger_ratio: 1.1, target_ratio: 1.5}",
            {},
            "target_ratio must not exceed trigger_ratio",
        ),
        (
            "groups: [{name: a}]\nrebalance: {trigger_ratio: .inf}",
            {},
            "rebalance.trigger_ratio: Input should be a finite number",
        ),
        (
            "groups: [{name: a}]",
            {"BALLAST_LAG__SMOOTHING": "nan"},
            "environment BALLAST_LAG__SMOOTHING: lag.smoothing: Input should be a finite number",
        ),
        ("- just\n- a list", {}, "the top level must be a mapping"),
        ("groups: [", {}, "invalid YAML"),
        ("groups: [{name: 'bad name'}]", {}, "groups.0.name: String should match pattern"),
        (
            "groups: [{name: a, constraints: {max_partitions: {w: 1}, pins: "
            "[{topic: t, partition: 0, member: w}, {topic: t, partition: 1, member: w}]}}]",
            {},
            "groups.0: Value error, max_partitions['w'] is 1 but 2 partitions are pinned",
        ),
        (
            "groups: [{name: a, constraints: {pins: "
            "[{topic: t, partition: 0, member: w}, {topic: t, partition: 0, member: v}]}}]",
            {},
            "groups.0.constraints.pins: Value error, t:0 is pinned twice",
        ),
        (
            "groups: [{name: a, constraints: {max_partitions: {w: -1}}}]",
            {},
            "groups.0.constraints.max_partitions.w: Input should be greater than or equal to 0",
        ),
        (
            "groups: [{name: a, constraints: {racks: {w: 'two words'}}}]",
            {},
            "groups.0.constraints.racks.w: String should match pattern",
        ),
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
    # Each error names its true source: the file, or the environment variable.
    assert (str(path) in str(err.value)) == (not env)


def test_check_config_cli(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    example_env: dict[str, str],
) -> None:
    for name, value in example_env.items():
        monkeypatch.setenv(name, value)
    assert main(["check-config", str(EXAMPLE)]) == 0
    assert "OK" in capsys.readouterr().out
    bad = tmp_path / "bad.yaml"
    bad.write_text("groups: []\n")
    assert main(["check-config", str(bad)]) == 2
    assert "groups" in capsys.readouterr().err
    assert main(["check-config", str(tmp_path / "missing.yaml")]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_secrets_come_from_files_or_environment_and_never_print(tmp_path: Path) -> None:
    (tmp_path / "kafka").write_text("k-secret-value\n")
    (tmp_path / "token").write_text("t" * 20)
    cfg_file = tmp_path / "b.yaml"
    cfg_file.write_text(
        "groups: [{name: g}]\n"
        "kafka: {security_protocol: SASL_SSL, sasl_mechanism: SCRAM-SHA-512, "
        f"sasl_username: u, sasl_password_file: {tmp_path / 'kafka'}}}\n"
        f"http: {{admin_token_file: {tmp_path / 'token'}}}\n"
    )
    cfg = load_config(
        cfg_file,
        environ={"BALLAST_MQTT__USERNAME": "ctl", "BALLAST_MQTT__PASSWORD": "m-secret-value"},
    )
    assert cfg.kafka.sasl_password is not None
    assert cfg.kafka.sasl_password.get_secret_value() == "k-secret-value"
    assert cfg.mqtt.password is not None
    assert cfg.mqtt.password.get_secret_value() == "m-secret-value"
    shown = repr(cfg) + str(cfg.model_dump())
    for secret in ("k-secret-value", "m-secret-value", "t" * 20):
        assert secret not in shown


@pytest.mark.parametrize(
    ("yaml_text", "mentions"),
    [
        (
            "kafka: {security_protocol: SASL_SSL}",
            "needs sasl_mechanism, sasl_username and sasl_password",
        ),
        ("kafka: {sasl_mechanism: PLAIN}", "sasl_mechanism needs security_protocol"),
        (
            "kafka: {sasl_password: a, sasl_password_file: /x, security_protocol: SASL_SSL, sasl_mechanism: PLAIN, sasl_username: u}",
            "not both",
        ),
        ("mqtt: {password: p}", "password needs username"),
        ("mqtt: {ca_file: /x}", "need tls: true"),
        ("http: {admin_token: short}", "at least 16 characters"),
        ("ha: {heartbeat_interval: 3s, session_timeout: 6s}", "at most a third"),
        ("ha: {transactional_id_prefix: t}", "needs ha.enabled"),
        ("lag: {weight: time}", "needs source: topic"),
        ("pipeline: {history: 10s, rate_window: 60s}", "history must be at least rate_window"),
    ],
)
def test_security_ha_and_pipeline_settings_are_validated(
    tmp_path: Path, yaml_text: str, mentions: str
) -> None:
    path = tmp_path / "b.yaml"
    path.write_text("groups: [{name: g}]\n" + yaml_text + "\n")
    with pytest.raises(InputError, match=mentions):
        load_config(path, environ={})


def test_an_override_with_one_underscore_is_named_not_ignored(
    example_env: dict[str, str],
) -> None:
    """``BALLAST_HTTP_PORT`` (one underscore) set nothing and passed silently: it is
    named with the spelling that works. The operator commands' own names are not."""
    environ = {
        "BALLAST_HTTP_PORT": "9000",
        "BALLAST_REBALANCE_DELAY": "2s",
        "BALLAST_URL": "http://ballast:8080",
        "BALLAST_TOKEN_FILE": "/run/token",
        "BALLAST_KAFKA__BOOTSTRAP_SERVERS": "b:9092",
    }
    assert misspelt_overrides(environ) == [
        "environment BALLAST_HTTP_PORT: not read; did you mean BALLAST_HTTP__PORT? (two "
        "underscores between a section and its key)",
        "environment BALLAST_REBALANCE_DELAY: not read; did you mean BALLAST_REBALANCE__DELAY? "
        "(two underscores between a section and its key)",
    ]
    assert applied_overrides(environ) == [
        "BALLAST_KAFKA__BOOTSTRAP_SERVERS (kafka.bootstrap_servers)"
    ]
    loaded = load_config(EXAMPLE, environ={**environ, **example_env})
    assert loaded.kafka.bootstrap_servers == "b:9092"


@pytest.mark.parametrize(
    ("group", "mentions"),
    [
        ("{name: g, autoscale: {min_members: 5, max_members: 2}}", "min_members .5. is above"),
        ("{name: g, autoscale: {headroom: -1}}", "headroom"),
        ("{name: g, autoscale: {drain_time: 0s}}", "drain_time"),
        ("{name: g, autoscale: {drain_time: 20s}}", r"start_time \(30 s\) is not below drain_time"),
        ("{name: g, autoscale: {start_time: -1s}}", "start_time"),
        ("{name: g, autoscale: {min_members: 0}}", "min_members"),
    ],
)
def test_autoscale_settings_are_validated(tmp_path: Path, group: str, mentions: str) -> None:
    path = tmp_path / "b.yaml"
    path.write_text(f"groups: [{group}]\n")
    with pytest.raises(InputError, match=mentions):
        load_config(path, environ={})


def test_autoscale_is_off_unless_configured(tmp_path: Path) -> None:
    path = tmp_path / "b.yaml"
    path.write_text("groups: [{name: g}, {name: h, autoscale: {max_members: 8}}]\n")
    cfg = load_config(path, environ={})
    assert cfg.groups[0].autoscale is None
    assert cfg.groups[1].autoscale is not None
    assert (cfg.groups[1].autoscale.max_members, cfg.groups[1].autoscale.drain_time) == (8, 600.0)
