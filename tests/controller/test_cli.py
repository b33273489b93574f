"""``ballast`` finds the subcommands other packages register (the controller imports
none of them: ``controller → pipeline`` is a forbidden import)."""

from __future__ import annotations

from importlib.metadata import entry_points

from controller.cli import COMMANDS, build_parser


def test_pipeline_subcommand_comes_from_its_entry_point() -> None:
    assert {e.name: e.value for e in entry_points(group=COMMANDS)} == {
        "pipeline": "pipeline.commands:register"
    }
    args = build_parser().parse_args(["pipeline", "synth", "--out", "trace.jsonl"])
    assert (args.command, args.job, args.groups) == ("pipeline", "synth", 500)
    assert args.func.__module__ == "pipeline.commands"
