"""``ballast assign`` on the shipped scenarios and on malformed input."""

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
