"""The ballast command line: one entry point for the daemon, the demo, the operator
commands and the tools (each subcommand says what it does in ``--help``)."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from importlib.metadata import PackageNotFoundError, entry_points, version
from pathlib import Path
from typing import Any

import yaml

from assignors import (
    STRATEGIES,
    TopicPartition,
    assign,
    check_capacity,
    check_rack,
    evaluate,
    member_lag,
)
from controller import logs
from controller.adapters.connection import client_options
from controller.adapters.presence import MqttAuth
from controller.client.worker import run_worker
from controller.config import (
    AssignmentsTopic,
    Config,
    applied_overrides,
    load_config,
    misspelt_overrides,
)
from controller.errors import BallastError, InputError
from controller.runtime import collector_policy
from controller.runtime.daemon import Controller
from controller.runtime.http import bound_port, serve
from controller.tasks import cancel_and_wait
from controller.tools import apache_kafka, demo, dev, operator
from controller.tools.audit import run_audit
from controller.tools.scenario import load_current, load_scenario
from controller.wire.records import json_schemas
from controller.wire.signing import KeyFileError, Verifier, generate


def _cmd_assign(args: argparse.Namespace) -> int:
    scenario = load_scenario(args.scenario)
    current = load_current(args.current) if args.current else scenario.current_map()
    lag = scenario.lag_map()
    ppt, subs = scenario.partitions_per_topic, scenario.subscriptions
    m_racks, p_racks = scenario.member_racks, scenario.partition_rack_map()
    caps = scenario.member_capacities
    started = time.perf_counter()
    result = assign(
        args.strategy, ppt, subs, current=current, lag=lag, member_racks=m_racks,
        partition_racks=p_racks, member_capacities=caps,
    )  # fmt: skip
    elapsed = time.perf_counter() - started
    quality = evaluate(
        result, ppt, subs, before=current, lag=lag, member_racks=m_racks,
        partition_racks=p_racks, member_capacities=caps,
    )  # fmt: skip
    # The previous assignment's cross-rack count, to read beside the new one.
    before = (
        evaluate(current, ppt, subs, member_racks=m_racks, partition_racks=p_racks).cross_rack
        if current
        else None
    )
    lags = member_lag(result, lag)
    if args.json:
        out = {
            "strategy": args.strategy,
            "assignment": {m: [[tp.topic, tp.partition] for tp in v] for m, v in result.items()},
            "member_lag": lags,
            "quality": quality._asdict(),
            "cross_rack_before": before,
            "seconds": elapsed,
        }
        print(json.dumps(out, indent=2))
        return 0
    width = max((len(m) for m in result), default=6)
    print(
        f"strategy {args.strategy}  ({scenario.description})"
        if scenario.description
        else f"strategy {args.strategy}"
    )
    for member, parts in result.items():
        shown = ", ".join(f"{tp.topic}-{tp.partition}" for tp in parts) or "-"
        print(f"  {member:<{width}}  {len(parts):>4} partitions  lag {lags[member]:>10}  {shown}")
    print(
        f"valid={quality.valid} balanced={quality.balanced} count_spread={quality.count_spread} "
        f"moved={quality.moved} max_member_lag={quality.max_member_lag} "
        f"lag_skew={quality.lag_skew:.3f} time={elapsed * 1000:.2f}ms"
    )
    if m_racks:
        line = f"cross_rack={_fraction(quality.cross_rack, _held(result))}"
        if current and before is not None:
            line += f" (before {_fraction(before, _held(current))})"
        print(line)
    if caps:
        print(f"share_error={quality.share_error:.2f} partitions (largest distance from a share)")
    return 0


def _held(assignment: Mapping[str, list[TopicPartition]]) -> int:
    return sum(len(tps) for tps in assignment.values())


def _fraction(part: int, whole: int) -> str:
    return f"{part}/{whole} ({100 * part / whole if whole else 0.0:.1f}%)"


def _cmd_check_config(args: argparse.Namespace) -> int:
    cfg = load_config(args.config)
    misspelt = misspelt_overrides(os.environ)
    if misspelt:
        raise InputError("\n".join(misspelt))
    print(
        f"{args.config}: OK ({len(cfg.groups)} group(s): {', '.join(g.name for g in cfg.groups)})"
    )
    for line in applied_overrides(os.environ):
        print(f"  overridden by the environment: {line}")
    return 0


def _cmd_schema(_: argparse.Namespace) -> int:
    print(json.dumps(json_schemas(), indent=2, sort_keys=True))
    return 0


def _cmd_run(args: argparse.Namespace) -> int:
    cfg = load_config(args.config)
    logs.configure(cfg.logging.level, cfg.logging.format)
    for line in misspelt_overrides(os.environ):
        logs.get("ballast").warning("environment_not_read", problem=line)
    return asyncio.run(run_daemon(cfg, args.record))


async def run_daemon(cfg: Config, record: Path | None = None) -> int:
    """Run until SIGTERM (exit 0) or SIGINT (exit 130), draining in-flight publication
    first. Alive but not ready while the brokers are being reached (``startup.timeout``)."""
    log = logs.get("ballast")
    collector_policy.configure()
    controller = Controller(cfg, record=record)
    stop = asyncio.Event()
    stopped_by: list[signal.Signals] = []

    def on_signal(sig: signal.Signals) -> None:
        stopped_by.append(sig)
        stop.set()

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal, sig)
    try:
        runner = await serve(controller, cfg.http.host, cfg.http.port)
    except OSError as exc:  # the port is taken, or the address is not this host's
        await controller.stop()  # closes the clients it made, never started
        where = f"{cfg.http.host}:{cfg.http.port}"
        log.error("startup_failed", error=f"http.port: cannot listen on {where}: {exc.strerror}")
        return InputError.exit_code
    log.info("http_listening", host=cfg.http.host, port=bound_port(runner))
    try:
        starting = asyncio.create_task(controller.start())
        stopping = asyncio.create_task(stop.wait())
        await asyncio.wait({starting, stopping}, return_when=asyncio.FIRST_COMPLETED)
        if starting.done():
            starting.result()
            failing = asyncio.create_task(controller.failed.wait())
            await asyncio.wait({stopping, failing}, return_when=asyncio.FIRST_COMPLETED)
            failing.cancel()
        else:
            await cancel_and_wait(starting)
        stopping.cancel()
        log.info("shutting_down")
    except BallastError as exc:  # a broker never answered, a topic is unusable
        log.error("startup_failed", error=str(exc))
        return exc.exit_code
    finally:
        await controller.stop()
        await runner.cleanup()
    if controller.failed.is_set():
        return 1
    return INTERRUPTED if signal.SIGINT in stopped_by else 0


def _cmd_demo(args: argparse.Namespace) -> int:
    if args.members < 3 or args.partitions < 2 or args.duration < 0 or args.pace <= 0:
        raise InputError(
            "demo: --members must be >= 3, --partitions >= 2, --duration >= 0, --pace > 0"
        )
    strategies = demo.STRATEGIES if args.compare else (args.strategy,)
    outcomes = [
        asyncio.run(
            demo.run_demo(
                args.members,
                args.partitions,
                args.duration,
                args.http_port,
                args.pace,
                strategy=strategy,
                broker=args.broker,
            )
        )
        for strategy in strategies
    ]
    if args.compare:
        print(demo.compare(outcomes))
    return 0


def _cmd_worker(args: argparse.Namespace) -> int:
    asyncio.run(
        run_worker(
            bootstrap=args.bootstrap,
            mqtt_port=args.mqtt_port,
            group=args.group,
            member=args.member,
            topics=args.topic,
            out=args.out,
            restart=args.restart,
            presence=args.presence,
            delay=args.delay,
            rack=args.rack,
            capacity=args.capacity,
            verify_key=None if args.public_key is None else _verifier(args.public_key),
            mqtt_auth=_mqtt_login(args.mqtt_user, args.mqtt_password_file),
        )
    )
    return 0


def _mqtt_login(user: str | None, password_file: Path | None) -> MqttAuth | None:
    if (user is None) != (password_file is None):
        raise InputError("--mqtt-user and --mqtt-password-file go together")
    if user is None or password_file is None:
        return None
    try:
        password = password_file.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise InputError(f"--mqtt-password-file {password_file}: {exc.strerror}") from None
    return MqttAuth(user, password)


def _capacity(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--capacity: expected a number, got {value!r}") from None
    try:
        return check_capacity(number, "--capacity")
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _rack(value: str) -> str:
    try:
        return check_rack(value, "--rack")
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _cmd_audit(args: argparse.Namespace) -> int:
    logs.configure("error")
    verifier = None if args.public_key is None else _verifier(args.public_key)
    bootstrap, topic, security = args.bootstrap, args.topic, {}
    if args.config is not None:
        cfg = load_config(args.config)
        bootstrap = bootstrap or cfg.kafka.bootstrap_servers
        topic = topic or cfg.assignments.name
        security = client_options(cfg)
        del security["bootstrap_servers"]
    if bootstrap is None:
        raise InputError("audit: give --bootstrap, or --config (its kafka section)")
    topic = topic or AssignmentsTopic().name
    rejected: list[str] = []
    reports = asyncio.run(
        run_audit(
            bootstrap,
            topic,
            args.group,
            args.window,
            verifier=verifier,
            rejected=rejected,
            security=security,
        )
    )
    if rejected:
        print(f"{len(rejected)} records rejected (not read, not audited):")
        for why in rejected[:50]:
            print(f"  rejected: {logs.clipped(why)}")
    for report in reports:
        print(report.render())
    if not reports:
        print(f"no groups found in {topic}")
    return 0 if all(r.ok for r in reports) else 1


def _verifier(path: Path) -> Verifier:
    try:
        return Verifier.from_file(path)
    except KeyFileError as exc:
        raise InputError(f"--public-key: {exc}") from None


def _cmd_keys(args: argparse.Namespace) -> int:
    try:
        private, public = generate(args.out)
    except KeyFileError as exc:
        raise InputError(str(exc)) from None
    print(f"private key {private} (mode 0600): signing.private_key_file of every controller")
    print(f"public key  {public}: verify_key of every consumer, --public-key of audit")
    return 0


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
    result = operator.act(_api(args), args.command, args.group, getattr(args, "member", None))
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


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a number of seconds > 0, got {text!r}")
    return value


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


def _cmd_dev(args: argparse.Namespace) -> int:
    if args.dev == "up":
        members = tuple(m for m in args.members.split(",") if m)
        started = dev.up(
            args.dir,
            args.kafka_port,
            args.mqtt_port,
            args.http_port,
            members=members,
            mqtt=args.mqtt,
            kafka_broker=args.broker,
        )
        print(started.summary())
    elif args.dev == "down":
        stack = dev.find(args.dir)
        stopped = dev.down(stack) if stack else []
        print(f"stopped {', '.join(stopped)}" if stopped else "no dev brokers were running")
    else:
        stack = dev.find(args.dir)
        if stack is None or not dev.running(stack):
            raise InputError(f"{args.dir}: no dev brokers running (`ballast dev up`)")
        print(stack.summary())
    return 0


#: Entry-point group through which other packages add subcommands: each entry is a
#: function taking the subparsers and adding its own (so this module imports none).
COMMANDS = "ballast.commands"
#: Exit codes beside ``BallastError.exit_code`` (all listed in the parser's epilog).
INTERRUPTED = 130
BROKEN_PIPE = 141


class _HelpFormatter(argparse.HelpFormatter):
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


class _Parser(argparse.ArgumentParser):
    """Every (sub)parser with the same help formatter: subparsers are made by this class."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _HelpFormatter)
        super().__init__(**kwargs)


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
        help="output format (default: table, also when piped; wide: more columns)",
    )


def _watch_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--watch",
        type=_positive_seconds,
        nargs="?",
        const=2.0,
        metavar="SECONDS",
        help="show it again every SECONDS (default 2) until Ctrl-C",
    )


def _add_operator_commands(sub: argparse._SubParsersAction[_Parser]) -> None:
    p = sub.add_parser("status", help="groups this controller leads: members, lag, handoffs")
    _api_options(p)
    _watch_option(p)
    p.set_defaults(func=_cmd_status)
    p = sub.add_parser(
        "describe",
        help="a group (or every group led), member by member (like kafka-consumer-groups)",
    )
    p.add_argument("group", nargs="?", help="consumer group name (default: every group led)")
    p.add_argument(
        "--partitions", action="store_true", help="also list each partition: owner and lag"
    )
    _api_options(p)
    _watch_option(p)
    p.set_defaults(func=_cmd_describe)
    actions = {
        "pause": "stop publishing for a group (events wait until resume)",
        "resume": "publish again for a paused group",
        "rebalance": "rebalance a group now, with a fresh look at lag",
    }
    for action, text in actions.items():
        p = sub.add_parser(action, help=text)
        p.add_argument("group", help="consumer group name")
        _api_options(p)
        p.set_defaults(func=_cmd_action)
    for action, text in (
        ("drain", "move every partition off a member and keep it empty"),
        ("undrain", "let a drained member take partitions again"),
    ):
        p = sub.add_parser(action, help=text)
        p.add_argument("group", help="consumer group name")
        p.add_argument("member", help="member id")
        _api_options(p)
        p.set_defaults(func=_cmd_action)
    p = sub.add_parser(
        "constraints",
        help="show or change a group's pins, caps and rack overrides (kept across restarts)",
    )
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


def _add_dev_command(sub: argparse._SubParsersAction[_Parser]) -> None:
    p = sub.add_parser("dev", help="embedded brokers left running, to try `ballast run` by hand")
    steps = p.add_subparsers(dest="dev", required=True)
    up = steps.add_parser("up", help="start a Kafka broker and MQTT on loopback")
    up.add_argument("--kafka-port", type=int, default=9092, help="Kafka listener port")
    up.add_argument(
        "--broker",
        choices=apache_kafka.BROKER_KINDS,
        default="tansu",
        help="tansu (light, starts in a second) or kafka (Apache Kafka "
        f"{apache_kafka.VERSION} in KRaft mode: Java 17 and, the first time, Maven)",
    )
    up.add_argument("--mqtt-port", type=int, default=1883, help="MQTT listener port")
    up.add_argument(
        "--mqtt",
        choices=("auto", "mosquitto", "amqtt"),
        default="auto",
        help="MQTT broker: mosquitto (per-member passwords and ACL; auto when installed) "
        "or amqtt (no authentication)",
    )
    up.add_argument(
        "--members",
        default=",".join(dev.MEMBERS),
        help="members to make MQTT users for (comma-separated; mosquitto only)",
    )
    up.add_argument("--http-port", type=int, default=8080, help="HTTP port in the written config")
    steps.add_parser("down", help="stop the brokers `dev up` started")
    steps.add_parser("show", help="print the running brokers and what to run next")
    for step in steps.choices.values():
        step.add_argument(
            "--dir", type=Path, default=dev.DEFAULT_DIR, help="state, logs, config and token"
        )
    p.set_defaults(func=_cmd_dev)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="ballast",
        description="Ballast: lag-aware sticky partition assignment for Kafka consumer "
        "fleets that use manual assign().",
        epilog="Exit codes: 0 done, 1 a check or the daemon failed, 2 bad input or usage, "
        "3 a broker or the controller unreachable, 4 refused by the controller, 130 Ctrl-C, "
        "141 the output pipe closed.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    p = sub.add_parser(
        "assign", help="compute an assignment for a scenario file and report its quality"
    )
    p.add_argument("--strategy", choices=STRATEGIES, default="lagsticky", help="strategy")
    p.add_argument(
        "--scenario", type=Path, required=True, help="scenario JSON (see config/examples)"
    )
    p.add_argument(
        "--current", type=Path, help="previous assignment JSON; overrides the scenario's"
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_cmd_assign)

    p = sub.add_parser("run", help="run the controller daemon")
    p.add_argument(
        "--config", type=Path, default=Path("config/ballast.yaml"), help="YAML config file"
    )
    p.add_argument(
        "--record", type=Path, help="append each group's assignment inputs to this trace (JSONL)"
    )
    p.set_defaults(func=_cmd_run)

    p = sub.add_parser(
        "check-config", help="validate a daemon config file (and BALLAST_* overrides)"
    )
    p.add_argument("config", type=Path, help="YAML config file")
    p.set_defaults(func=_cmd_check_config)

    p = sub.add_parser("demo", help="embedded brokers, the controller and a simulated fleet")
    p.add_argument("--members", type=int, default=5, help="consumers at the start (>= 3)")
    p.add_argument("--partitions", type=int, default=24, help="partitions of the demo topic")
    p.add_argument(
        "--duration", type=float, default=0.0, help="seconds to keep serving after the scenario"
    )
    p.add_argument("--http-port", type=int, default=0, help="metrics port; 0: any free port")
    p.add_argument("--pace", type=float, default=6.0, help="seconds between scenario steps")
    p.add_argument(
        "--broker",
        choices=apache_kafka.BROKER_KINDS,
        default="tansu",
        help=f"Kafka broker: tansu (light) or kafka (Apache Kafka {apache_kafka.VERSION})",
    )
    p.add_argument(
        "--strategy",
        choices=demo.STRATEGIES,
        default="lagsticky",
        help="sticky: the same scenario with the controller given no lag",
    )
    p.add_argument(
        "--compare", action="store_true", help="run both strategies, then print them side by side"
    )
    p.set_defaults(func=_cmd_demo)

    _add_dev_command(sub)
    _add_operator_commands(sub)

    p = sub.add_parser("worker", help="a ManagedConsumer process that logs what it processes")
    p.add_argument("--bootstrap", required=True, help="Kafka bootstrap servers")
    p.add_argument("--mqtt-port", type=int, default=1883, help="MQTT port on 127.0.0.1")
    p.add_argument(
        "--presence", choices=("mqtt", "kafka"), default="mqtt", help="how it announces itself"
    )
    p.add_argument("--group", required=True, help="consumer group name")
    p.add_argument("--member", required=True, help="member id, unique in the group")
    p.add_argument("--topic", action="append", required=True, help="topic (repeatable)")
    p.add_argument("--out", type=Path, required=True, help="file it appends processed records to")
    p.add_argument(
        "--restart", action="store_true", help="on SIGTERM keep partitions (leave_grace)"
    )
    p.add_argument("--delay", type=float, default=0.0, help="seconds of simulated work per batch")
    p.add_argument("--rack", type=_rack, help="its client.rack (availability zone), if any")
    p.add_argument(
        "--capacity",
        type=_capacity,
        help="its capacity weight (default 1): 2 takes a share twice as large",
    )
    p.add_argument(
        "--public-key", type=Path, help="the controller's public key: act on signed records only"
    )
    p.add_argument("--mqtt-user", help="MQTT user name (its member id, with per-member ACLs)")
    p.add_argument("--mqtt-password-file", type=Path, help="file holding the MQTT password")
    p.set_defaults(func=_cmd_worker)

    p = sub.add_parser("audit", help="check the invariants against the assignments topic's history")
    p.add_argument("--bootstrap", help="Kafka bootstrap servers (default: --config's)")
    p.add_argument(
        "--config",
        type=Path,
        help="a Ballast config: its kafka section (TLS, SASL) and assignments topic",
    )
    p.add_argument("--topic", help="the assignments topic (default: ballast.assignments)")
    p.add_argument("--group", action="append", help="only these groups (repeatable)")
    p.add_argument(
        "--window",
        type=float,
        default=60.0,
        help="longest a partition may stay ungranted, seconds (rebalance_delay + handoff_timeout)",
    )
    p.add_argument(
        "--public-key", type=Path, help="the controller's public key: audit signed records only"
    )
    p.set_defaults(func=_cmd_audit)

    p = sub.add_parser("keys", help="the controller's signing key pair")
    keys = p.add_subparsers(dest="step", required=True, metavar="STEP")
    gen = keys.add_parser("generate", help="write signing.key (0600) and signing.pub")
    gen.add_argument("--out", type=Path, required=True, help="directory to write them to")
    p.set_defaults(func=_cmd_keys)

    p = sub.add_parser("schema", help="print the JSON Schemas of the wire records")
    p.set_defaults(func=_cmd_schema)

    for command in entry_points(group=COMMANDS):
        try:
            register = command.load()  # e.g. ``ballast pipeline`` (pipeline/commands.py)
        except ImportError:
            continue  # declared, but its package is not in this installation
        register(sub)
    return parser


def _version() -> str:
    try:
        return version("ballast")
    except PackageNotFoundError:
        return "unknown (not installed)"


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code: int = args.func(args)
        sys.stdout.flush()
    except BallastError as exc:
        print(f"ballast: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("ballast: interrupted", file=sys.stderr)
        return INTERRUPTED
    except BrokenPipeError:
        # The reader went away (``ballast schema | head``): no traceback, and no second
        # error when Python flushes stdout at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return BROKEN_PIPE
    return code


if __name__ == "__main__":
    sys.exit(main())
