"""The parser every ``ballast`` command is built with, and the argument types several
command families share. Light on purpose: every command imports it (the member's
argument types, which need the assignors and the wire, are in ``member_options``)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any, TypeAlias


class HelpFormatter(argparse.HelpFormatter):
    """Shows an option's default when it has one worth showing."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        if (
            "%(default)" in text
            or default in (None, False, argparse.SUPPRESS)
            or action.option_strings == []
        ):
            return text
        return f"{text} (default: %(default)s)"


class Parser(argparse.ArgumentParser):
    """Every (sub)parser with the same help formatter: subparsers are made by this class."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(**kwargs)


#: A command's own arguments and handler, added to the parser ``ballast`` made for it
#: (each command module's ``ARGUMENTS`` maps its command names to these).
Arguments: TypeAlias = Callable[[argparse.ArgumentParser], None]


def positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a number of seconds > 0, got {text!r}")
    return value
