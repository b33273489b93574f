"""``ballast status``, ``describe``, the group actions and ``constraints``: the HTTP API's
client."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import yaml

from controller.cli.parsing import Arguments, positive_seconds
from controller.tools import operator


def _api(args: argparse.Namespace) -> operator.AdminApi:
    return operator.AdminApi.from_env(args.url, args.token_file, args.cacert)


def _emit(args: argparse.Namespace, data: Mapping[str, Any], table: Callable[[], str]) -> int:
    """The table whatever stdout is (a pipe to ``grep`` wants what the screen shows);
    JSON or YAML on request."""
    if args.output == "json":
        print(json.dumps(data, indent=2, sort_keys=True))
    elif args.output == "yaml":
        print(yaml.safe_dump(data, sort_keys=True).rstrip())
    else:
        print(table())
    return 0


def _watched(args: argparse.Namespace, show: Callable[[], int]) -> int:
    """``show()`` once, or with ``--watch SECONDS`` again and again until interrupted
    (exit 130), the screen cleared between views on a terminal."""
    if args.watch is None:
        return show()
    while True:
        if sys.stdout.isatty():
            print("\x1b[H\x1b[2J", end="")
        print(f"every {args.watch:g}s  {time.strftime('%H:%M:%S')}")
        show()
        sys.stdout.flush()
        time.sleep(args.watch)


def _cmd_status(args: argparse.Namespace) -> int:
    api = _api(args)

    def show() -> int:
        view = operator.status(api)
        return _emit(args, view, lambda: operator.render_status(view))

    return _watched(args, show)


def _cmd_describe(args: argparse.Namespace) -> int:
    api = _api(args)
    shape = (args.partitions, args.output == "wide")

    def show() -> int:
        names = [args.group] if args.group else sorted(operator.status(api)["groups"])
        views = [operator.describe(api, name, args.partitions) for name in names]
        if args.group:
            return _emit(args, views[0], lambda: operator.render_describe(views[0], *shape))
        every = {v["group"]: v for v in views}
        return _emit(
            args,
            every,
            lambda: (
                "\n\n".join(operator.render_describe(v, *shape) for v in views)
                or "this replica leads no group"
            ),
        )

    return _watched(args, show)


def _cmd_action(args: argparse.Namespace) -> int:
    result = operator.act(
        _api(args),
        args.command,
        args.group,
        getattr(args, "member", None),
        force=getattr(args, "force", False),
    )
    return _emit(args, result, lambda: operator.render_action(result))


def _cmd_constraints(args: argparse.Namespace) -> int:
    change: dict[str, Any] = {}
    if args.pin:
        change["pins"] = [{"topic": t, "partition": p, "member": m} for (t, p), m in args.pin]
    if args.unpin:
        change["unpin"] = [[t, p] for t, p in args.unpin]
    caps = dict(args.max_partitions) | dict.fromkeys(args.no_max_partitions)
    if caps:
        change["max_partitions"] = caps
    racks = dict(args.rack) | dict.fromkeys(args.no_rack)
    if racks:
        change["racks"] = racks
    view = operator.constraints(
        _api(args),
        args.group,
        change or None,
        allow_unknown_members=args.allow_unknown_members,
        strict=args.strict,
    )
    if view.get("left_unread"):
        print(
            f"warning: {view['left_unread']} partition(s) of {args.group} will have no reader "
            "under these constraints (the group shows as degraded; --strict refuses this)",
            file=sys.stderr,
        )
    return _emit(args, view, lambda: operator.render_constraints(view))


def _partition_arg(text: str) -> tuple[str, int]:
    """``TOPIC:PARTITION`` (Kafka topic names cannot hold a colon)."""
    topic, sep, number = text.rpartition(":")
    if not sep or not topic or not number.isdigit():
        raise argparse.ArgumentTypeError(f"expected TOPIC:PARTITION, got {text!r}")
    return topic, int(number)


def _pin_arg(text: str) -> tuple[tuple[str, int], str]:
    where, sep, member = text.partition("=")
    if not sep or not member:
        raise argparse.ArgumentTypeError(f"expected TOPIC:PARTITION=MEMBER, got {text!r}")
    return _partition_arg(where), member


def _cap_arg(text: str) -> tuple[str, int]:
    member, sep, count = text.rpartition("=")
    if not sep or not member or not count.isdigit():
        raise argparse.ArgumentTypeError(f"expected MEMBER=COUNT, got {text!r}")
    return member, int(count)


def _rack_arg(text: str) -> tuple[str, str]:
    member, sep, rack = text.partition("=")
    if not sep or not member or not rack:
        raise argparse.ArgumentTypeError(f"expected MEMBER=RACK, got {text!r}")
    return member, rack


def _api_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--url",
        help=f"controller HTTP API (default: $BALLAST_URL, else {operator.DEFAULT_URL})",
    )
    p.add_argument(
        "--token-file",
        type=Path,
        help="file holding http.admin_token (default: $BALLAST_TOKEN_FILE, or $BALLAST_TOKEN)",
    )
    p.add_argument("--cacert", type=Path, help="CA bundle for an https URL ($BALLAST_CACERT)")
    p.add_argument(
        "-o",
        "--output",
        choices=("table", "wide", "json", "yaml"),
        default="table",
        help="output format (also when piped; wide: more columns)",
    )


def _watch_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--watch",
        type=positive_seconds,
        nargs="?",
        const=2.0,
        metavar="SECONDS",
        help="show it again every SECONDS (default 2) until Ctrl-C",
    )


def _status(p: argparse.ArgumentParser) -> None:
    _api_options(p)
    _watch_option(p)
    p.set_defaults(func=_cmd_status)


def _describe(p: argparse.ArgumentParser) -> None:
    p.add_argument("group", nargs="?", help="consumer group name (default: every group led)")
    p.add_argument(
        "--partitions", action="store_true", help="also list each partition: owner and lag"
    )
    _api_options(p)
    _watch_option(p)
    p.set_defaults(func=_cmd_describe)


def _action(p: argparse.ArgumentParser) -> None:
    """``pause``, ``resume``, ``rebalance``: a group's."""
    p.add_argument("group", help="consumer group name")
    _api_options(p)
    p.set_defaults(func=_cmd_action)


def _undrain(p: argparse.ArgumentParser) -> None:
    p.add_argument("group", help="consumer group name")
    p.add_argument("member", help="member id")
    _api_options(p)
    p.set_defaults(func=_cmd_action)


def _drain(p: argparse.ArgumentParser) -> None:
    p.add_argument("group", help="consumer group name")
    p.add_argument("member", help="member id")
    p.add_argument(
        "--force",
        action="store_true",
        help="drain even the last member that may read a topic (refused without: "
        "its partitions would go unread; exit 4)",
    )
    _api_options(p)
    p.set_defaults(func=_cmd_action)


def _constraints(p: argparse.ArgumentParser) -> None:
    p.add_argument("group", help="consumer group name")
    p.add_argument(
        "--pin",
        action="append",
        type=_pin_arg,
        default=[],
        metavar="TOPIC:PARTITION=MEMBER",
        help="keep a partition on this member (repeatable)",
    )
    p.add_argument(
        "--unpin",
        action="append",
        type=_partition_arg,
        default=[],
        metavar="TOPIC:PARTITION",
        help="let a pinned partition move again",
    )
    p.add_argument(
        "--max-partitions",
        action="append",
        type=_cap_arg,
        default=[],
        metavar="MEMBER=COUNT",
        help="cap a member's partitions, its pins included",
    )
    p.add_argument(
        "--no-max-partitions",
        action="append",
        default=[],
        metavar="MEMBER",
        help="lift a member's cap",
    )
    p.add_argument(
        "--rack",
        action="append",
        type=_rack_arg,
        default=[],
        metavar="MEMBER=RACK",
        help="treat a member as in this rack, whatever client.rack it declares",
    )
    p.add_argument(
        "--no-rack",
        action="append",
        default=[],
        metavar="MEMBER",
        help="drop a rack override; the member's declared client.rack counts again",
    )
    p.add_argument(
        "--allow-unknown-members",
        action="store_true",
        help="accept members that have not joined yet (pre-provisioning)",
    )
    p.add_argument(
        "--strict",
        action="store_true",
        help="refuse a change that would leave partitions without a reader",
    )
    _api_options(p)
    p.set_defaults(func=_cmd_constraints)


ARGUMENTS: dict[str, Arguments] = {
    "status": _status,
    "describe": _describe,
    "pause": _action,
    "resume": _action,
    "rebalance": _action,
    "drain": _drain,
    "undrain": _undrain,
    "constraints": _constraints,
}
