"""``ballast assign`` on the shipped scenarios and on malformed input (and the one other
rack argument, ``ballast worker --rack``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from assignors import STRATEGIES
from controller.cli import main

EXAMPLES = sorted((Path(__file__).parents[2] / "config" / "examples").glob("*.json"))


@pytest.mark.parametrize("scenario", EXAMPLES, ids=lambda p: p.stem)
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_every_example_with_every_strategy(
    scenario: Path, strategy: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["assign", "--strategy", strategy, "--scenario", str(scenario), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["quality"]["valid"] is True
    if strategy in ("sticky", "lagsticky"):
        assert out["quality"]["balanced"] is True


def test_examples_exist() -> None:
    assert len(EXAMPLES) >= 5


def test_json_output_round_trips_as_current(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario = next(p for p in EXAMPLES if "example3" in p.name)
    main(["assign", "--strategy", "sticky", "--scenario", str(scenario), "--json"])
    saved = tmp_path / "current.json"
    saved.write_text(capsys.readouterr().out)
    assert (
        main(
            [
                "assign",
                "--strategy",
                "sticky",
                "--scenario",
                str(scenario),
                "--current",
                str(saved),
                "--json",
            ]
        )
        == 0
    )
    # Re-running on its own output is a fixed point: nothing moves.
    assert json.loads(capsys.readouterr().out)["quality"]["moved"] == 0


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ('{"partitions_per_topic": ', "line 1 column 26: invalid JSON"),
        (
            '{"partitions_per_topic": {"t": -1}, "subscriptions": {}}',
            "partitions_per_topic.t: Input should be greater than or equal to 0",
        ),
        (
            '{"partitions_per_topic": {}, "subscriptions": {"a": "t"}}',
            "subscriptions.a: Input should be a valid list",
        ),
        (
            '{"partitions_per_topic": {}, "subscriptions": {}, "extra": 1}',
            "extra: Extra inputs are not permitted",
        ),
        (
            '{"partitions_per_topic": {"t": 1}, "subscriptions": {"a": ["t"]}, "lag": {"t": {"x": 1}}}',
            "lag.t.x.[key]",
        ),
        (
            '{"partitions_per_topic": {"t": 1}, "subscriptions": {"a": ["t"]}, "lag": {"t": {"0": -5}}}',
            "lag.t.0: Input should be greater than or equal to 0",
        ),
        (
            '{"partitions_per_topic": {"t": 1}, "subscriptions": {"a": ["t"]}, "current": {"a": [["t"]]}}',
            "current.a.0",
        ),
        (
            '{"partitions_per_topic": {"t": 1}, "subscriptions": {"a": ["t"]}, "member_racks": {"a": "az 1"}}',
            "member_racks.a: String should match pattern",
        ),
        (
            '{"partitions_per_topic": {"t": 1}, "subscriptions": {"a": ["t"]}, "member_racks": {"b": "az-1"}}',
            "member_racks names 'b', which has no subscription",
        ),
        (
            '{"partitions_per_topic": {"t": 1}, "subscriptions": {"a": ["t"]}, "partition_racks": {"t": {"0": "az-1"}}}',
            "partition_racks.t.0: Input should be a valid list",
        ),
    ],
)
def test_malformed_scenarios_name_the_problem(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, expected: str
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    assert main(["assign", "--scenario", str(bad)]) == 2
    err = capsys.readouterr().err
    assert str(bad) in err
    assert expected in err


def test_missing_file(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["assign", "--scenario", "/nonexistent/scenario.json"]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_unknown_strategy_is_rejected_by_the_parser(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["assign", "--strategy", "nope", "--scenario", "x.json"])
    assert exc.value.code == 2
    assert "lagsticky" in capsys.readouterr().err


def test_racks_report_cross_rack_before_and_after(capsys: pytest.CaptureFixture[str]) -> None:
    """The KIP-881 example: a zone-blind assignment leaves 4 of 12 partitions remote; the
    sticky strategies bring them home by swapping, and say so."""
    scenario = next(p for p in EXAMPLES if "kip881" in p.name)
    assert main(["assign", "--strategy", "sticky", "--scenario", str(scenario)]) == 0
    text = capsys.readouterr().out
    assert "cross_rack=0/12 (0.0%) (before 4/12 (33.3%))" in text
    assert main(["assign", "--strategy", "roundrobin", "--scenario", str(scenario), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["quality"]["cross_rack"], out["cross_rack_before"]) == (4, 4)  # rack-blind


def test_a_worker_rack_is_checked_as_the_controller_checks_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = ["worker", "--bootstrap", "127.0.0.1:1", "--group", "g", "--member", "m"]
    with pytest.raises(SystemExit) as exc:
        main([*args, "--topic", "t", "--out", "/dev/null", "--rack", "zone a"])
    assert exc.value.code == 2
    assert "--rack: rack 'zone a' contains whitespace" in capsys.readouterr().err


def test_capacities_give_each_member_its_share(capsys: pytest.CaptureFixture[str]) -> None:
    """Pods of sizes 1, 1, 2 and 4 share 16 partitions 2, 2, 4 and 8; only what the new
    shares ask for moves (the three old pods held 6, 5 and 5)."""
    scenario = next(p for p in EXAMPLES if "capacity" in p.name)
    assert main(["assign", "--strategy", "sticky", "--scenario", str(scenario), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {m: len(v) for m, v in out["assignment"].items()} == {
        "c0": 2,
        "c1": 2,
        "c2": 4,
        "c3": 8,
    }
    assert out["quality"]["balanced"] is True
    assert out["quality"]["share_error"] == 0.0
    assert out["quality"]["moved"] == 8
    assert main(["assign", "--strategy", "sticky", "--scenario", str(scenario)]) == 0
    assert "share_error=0.00 partitions" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("capacities", "message"),
    [
        ({"c9": 2}, "member_capacities names 'c9', which has no subscription"),
        ({"c0": 0}, "greater than 0"),
        ({"c0": "lots"}, "valid number"),
    ],
)
def test_bad_capacities_in_a_scenario_are_named(
    tmp_path: Path, capacities: dict[str, object], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario = tmp_path / "s.json"
    scenario.write_text(
        json.dumps(
            {
                "partitions_per_topic": {"orders": 4},
                "subscriptions": {"c0": ["orders"], "c1": ["orders"]},
                "member_capacities": capacities,
            }
        )
    )
    assert main(["assign", "--scenario", str(scenario)]) == 2
    err = capsys.readouterr().err
    assert message in err
    assert "member_capacities" in err


def test_a_worker_capacity_is_checked_as_the_controller_checks_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = ["worker", "--bootstrap", "127.0.0.1:1", "--group", "g", "--member", "m"]
    for bad, said in (("0", "capacity must be > 0"), ("many", "expected a number, got 'many'")):
        with pytest.raises(SystemExit) as exc:
            main([*args, "--topic", "t", "--out", "/dev/null", "--capacity", bad])
        assert exc.value.code == 2
        assert f"--capacity: {said}" in capsys.readouterr().err
