"""HTTP: Prometheus metrics, liveness, readiness (with why not), ``/v1/health`` (each
connection and supervised task), JSON views of the groups, their
constraints and leadership (read-only, open), and operator actions (pause, resume,
rebalance, drain, undrain, constraints) that need ``Authorization: Bearer
<http.admin_token>`` and are logged as ``admin_action``.
"""

from __future__ import annotations

import asyncio
import hmac
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import cast

from aiohttp import web
from aiohttp.typedefs import Middleware
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import ValidationError

from controller import logs
from controller.core.constraint_check import left_unread, unknown_names
from controller.core.group import effective_constraints
from controller.core.views import constraints_view, group_summary
from controller.errors import InputError
from controller.runtime import faultpoints
from controller.runtime.connection_guard import ConnectionGuard
from controller.runtime.daemon import Controller
from controller.runtime.replica_state import ManagedGroup
from controller.wire.records import ConstraintPatch, ConstraintSet, ConstraintsRecord, problems

log = logs.get("ballast.http")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def build_app(
    controller: Controller, api: bool = True, guard: ConnectionGuard | None = None
) -> web.Application:
    """Metrics and probes, and with ``api`` the JSON views and operator actions."""

    async def metrics(_: web.Request) -> web.Response:
        body = generate_latest(controller.metrics.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def healthz(_: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def readyz(_: web.Request) -> web.Response:
        why = controller.not_ready()
        body: dict[str, object] = {"ready": not why}
        if why:
            body["waiting_for"] = why
        return web.json_response(body, status=503 if why else 200)

    async def health(_: web.Request) -> web.Response:
        why = controller.not_ready()
        return web.json_response(
            {
                "replica": controller.replica,
                "ready": not why,
                "waiting_for": why,
                **controller.health.view(),
            }
        )

    async def groups(_: web.Request) -> web.Response:
        out = {name: group_summary(g) for name, g in sorted(controller.groups.items())}
        why = controller.not_ready()
        return web.json_response(
            {
                "replica": controller.replica,
                "ha": controller.election is not None,
                "ready": not why,
                "waiting_for": why,
                "groups": out,
            }
        )

    async def group(request: web.Request) -> web.Response:
        name = request.match_info["group"]
        if name not in controller.groups:
            return web.json_response(
                {"error": f"this replica does not lead a group {name!r}"}, status=404
            )
        partitions = _flag(request, "partitions")
        return web.json_response(controller.group_view(name, partitions))

    async def leadership(_: web.Request) -> web.Response:
        e = controller.election
        return web.json_response(
            {
                "replica": controller.replica,
                "ha": e is not None,
                "shards": sorted(e.owned) if e is not None else None,
                "groups": sorted(controller.groups),
            }
        )

    async def constraints(request: web.Request) -> web.Response:
        g = controller.groups.get(request.match_info["group"])
        if g is None:
            return web.json_response({"error": "this replica does not lead that group"}, status=404)
        return web.json_response(constraints_view(g))

    lock = asyncio.Lock()  # one read-modify-write of the operator state at a time

    async def change_constraints(request: web.Request) -> web.Response:
        refused = _refused(controller, request, "constraints")
        if refused is not None:
            return refused
        async with lock:
            return await _change_constraints(controller, request)

    def admin(action: str) -> Callable[[web.Request], Awaitable[web.Response]]:
        async def handle(request: web.Request) -> web.Response:
            async with lock:  # the operator state is one record: one change at a time
                return await _admin(controller, request, action)

        return handle

    app = web.Application(middlewares=[] if guard is None else [_idle_clock(guard)])
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/v1/health", health)
    if not api:
        return app
    app.router.add_get("/v1/groups", groups)
    app.router.add_get("/v1/groups/{group}", group)
    app.router.add_get("/v1/leadership", leadership)
    app.router.add_get("/v1/groups/{group}/constraints", constraints)
    app.router.add_patch("/v1/groups/{group}/constraints", change_constraints)
    for action in ("pause", "resume", "rebalance"):
        app.router.add_post(f"/v1/groups/{{group}}/{action}", admin(action))
    for action in ("drain", "undrain"):
        app.router.add_post(f"/v1/groups/{{group}}/members/{{member}}/{action}", admin(action))
    return app


def _refused(controller: Controller, request: web.Request, action: str) -> web.Response | None:
    """The answer to a mutating request that may not proceed (no token configured, a
    wrong one, a group this replica does not lead); None when it may."""
    counter = controller.metrics.admin_requests
    group = request.match_info["group"]
    member = request.match_info.get("member")
    who = request.remote or "?"
    token = controller.cfg.http.admin_token
    if token is None:
        counter.labels(action, "disabled").inc()
        return web.json_response(
            {"error": "mutating endpoints are disabled: set http.admin_token"}, status=403
        )
    given = request.headers.get("Authorization", "")
    expected = f"Bearer {token.get_secret_value()}"
    # Any bytes a client sends are a wrong token, not an error: "replace" cannot fail.
    if not hmac.compare_digest(given.encode(errors="replace"), expected.encode()):
        counter.labels(action, "denied").inc()
        log.warning("admin_denied", action=action, group=group, member=member, remote=who)
        return web.json_response({"error": "missing or wrong bearer token"}, status=401)
    if group not in controller.groups:
        counter.labels(action, "not_found").inc()
        return web.json_response({"error": f"this replica does not lead {group!r}"}, status=404)
    return None


async def _change_constraints(controller: Controller, request: web.Request) -> web.Response:
    """Validate, persist (acknowledged), then settle: a change the store did not take is
    not acted on, so a restart never loses one that was."""
    counter = controller.metrics.admin_requests
    group = request.match_info["group"]
    try:
        async with asyncio.timeout(controller.cfg.http.idle_timeout):
            body = await request.read()
        patch = ConstraintPatch.model_validate_json(body)
    except TimeoutError:
        counter.labels("constraints", "invalid").inc()
        return web.json_response({"error": "request body: not sent in time"}, status=408)
    except ValidationError as exc:
        counter.labels("constraints", "invalid").inc()
        return web.json_response({"error": f"request body: {problems(exc)}"}, status=400)
    g = controller.groups.get(group)
    if g is None:  # released while the body was read
        counter.labels("constraints", "not_found").inc()
        return web.json_response({"error": f"this replica does not lead {group!r}"}, status=404)
    state = g.state
    unknown = unknown_names(
        patch,
        state.partitions_per_topic,
        state.knows,
        state.overrides,
        allow_unknown_members=_flag(request, "allow_unknown_members"),
    )
    if unknown:
        counter.labels("constraints", "invalid").inc()
        return web.json_response({"error": "; ".join(unknown)}, status=400)
    overrides = patch.applied_to(state.overrides)
    try:
        effective = effective_constraints(state.configured, overrides)
    except ValueError as exc:
        counter.labels("constraints", "invalid").inc()
        return web.json_response({"error": str(exc)}, status=400)
    unread = await asyncio.to_thread(
        left_unread, dict(state.partitions_per_topic), state.subscriptions(), effective
    )
    if unread and _flag(request, "strict"):
        counter.labels("constraints", "refused").inc()
        return web.json_response(
            {"error": f"{unread} partition(s) would have no reader under these constraints"},
            status=409,
        )
    failed = await _save(controller, g, overrides, state.paused, state.drained)
    if failed is not None:
        counter.labels("constraints", "unavailable").inc()
        return failed
    state.set_constraints(state.configured, overrides, time.monotonic())
    g.wake.set()
    counter.labels("constraints", "ok").inc()
    log.info(
        "admin_action",
        action="constraints",
        group=group,
        remote=request.remote or "?",
        pins=len(overrides.pins),
        max_partitions=len(overrides.max_partitions),
        racks=len(overrides.racks),
        left_unread=unread,
    )
    return web.json_response({**constraints_view(g), "left_unread": unread})


def _flag(request: web.Request, name: str) -> bool:
    return request.query.get(name, "").lower() in ("1", "true", "yes")


async def _admin(controller: Controller, request: web.Request, action: str) -> web.Response:
    """Pause, resume, drain and undrain are acknowledged by the constraints topic before
    they are applied (a restart or takeover in between applies them from there);
    rebalance is a one-off and is not stored."""
    refused = _refused(controller, request, action)
    if refused is not None:
        return refused
    counter = controller.metrics.admin_requests
    group = request.match_info["group"]
    member = request.match_info.get("member")
    who = request.remote or "?"
    g = controller.groups[group]
    state = g.state
    # Idempotent like pause and resume: draining a drained member, or undraining one
    # that is not drained, succeeds and changes nothing; only a stranger is refused.
    if member is not None and not (state.knows(member) or member in state.drained):
        counter.labels(action, "not_found").inc()
        return web.json_response({"error": f"no member {member!r} in {group!r}"}, status=404)
    # What nobody will read once the action is applied (the engine applies it later).
    left = state.unread_topics()
    if action == "drain" and member is not None and member not in state.drained:
        last = state.draining_leaves_unread(member)
        left = sorted({*left, *last})
        if last and not _flag(request, "force"):
            counter.labels(action, "refused").inc()
            shown = ", ".join(last[:5])
            return web.json_response(
                {
                    "error": f"{member!r} is the last member that may read {shown}: draining "
                    "it leaves their partitions unread (the group goes degraded); --force "
                    "(?force=true) drains it anyway"
                },
                status=409,
            )
    if action != "rebalance":
        paused = {"pause": True, "resume": False}.get(action, state.paused)
        drained = set(state.drained)
        if member is not None:
            (drained.add if action == "drain" else drained.discard)(member)
        failed = await _save(controller, g, state.overrides, paused, drained)
        if failed is not None:
            counter.labels(action, "unavailable").inc()
            return failed
        faultpoints.reached("admin.after_save")
    now = time.monotonic()
    if action == "pause":
        state.paused = True
    elif action == "resume":
        state.paused = False
    elif action == "rebalance":
        state.force_rebalance(now)
    elif member is not None:
        if action == "drain":
            state.drain(member, now)
        else:
            state.undrain(member, now)
    g.wake.set()
    counter.labels(action, "ok").inc()
    log.info("admin_action", action=action, group=group, member=member, remote=who)
    return web.json_response(
        {
            "ok": True,
            "action": action,
            "group": group,
            "member": member,
            "paused": state.paused,
            "drained": sorted(state.drained),
            "unread_topics": left,
        }
    )


async def _save(
    controller: Controller,
    g: ManagedGroup,
    overrides: ConstraintSet,
    paused: bool,
    drained: set[str],
) -> web.Response | None:
    """Store the group's operator state, acknowledged; the 503 to answer when the topic
    did not take it (nothing is applied then)."""
    record = ConstraintsRecord(
        group=g.name,
        controller_epoch=g.epoch,
        constraints=overrides,
        paused=paused,
        drained=sorted(drained),
        replica=controller.replica,
        issued_at=time.time(),
    )
    try:
        await controller.constraints.save(record)
    except Exception as exc:
        log.warning("operator_state_not_saved", group=g.name, error=repr(exc))
        return web.json_response(
            {"error": f"the constraints topic did not take the change: {exc!r}"}, status=503
        )
    return None


def _idle_clock(guard: ConnectionGuard) -> Middleware:
    """Stops the connection's idle clock while a request is handled."""

    @web.middleware
    async def clock(request: web.Request, handler: Handler) -> web.StreamResponse:
        guard.busy(request.transport)
        try:
            return await handler(request)
        finally:
            guard.rested(request.transport)

    return clock


@dataclass
class HttpServer:
    """The listeners: the API's (with metrics and probes unless they have a port of their
    own) and, with ``http.metrics_port``, the metrics and probes one."""

    port: int
    metrics_port: int | None
    _runners: list[web.AppRunner]
    _servers: list[asyncio.Server]

    async def cleanup(self) -> None:
        for server in self._servers:
            server.close()
        for runner in self._runners:
            await runner.cleanup()
        for server in self._servers:
            await server.wait_closed()


async def serve(controller: Controller, host: str, port: int) -> HttpServer:
    """Listen on ``port`` (and ``http.metrics_port``); ``InputError`` naming the setting
    when one cannot be had."""
    listeners = [("api", port)]
    if controller.cfg.http.metrics_port is not None:
        listeners.append(("metrics", controller.cfg.http.metrics_port))
    runners: list[web.AppRunner] = []
    servers: list[asyncio.Server] = []
    try:
        for name, wanted in listeners:
            runner, server = await _listen(controller, name, host, wanted)
            runners.append(runner)
            servers.append(server)
    except BaseException:
        await HttpServer(0, None, runners, servers).cleanup()
        raise
    bound = [int(s.sockets[0].getsockname()[1]) for s in servers]
    return HttpServer(bound[0], bound[1] if len(bound) > 1 else None, runners, servers)


async def _listen(
    controller: Controller, name: str, host: str, port: int
) -> tuple[web.AppRunner, asyncio.Server]:
    settings = controller.cfg.http
    runner: web.AppRunner | None = None
    guard = ConnectionGuard(
        lambda: _protocol(runner),
        settings.max_connections,
        settings.idle_timeout,
        controller.metrics.http_closing(name),
    )
    controller.metrics.http_connections.labels(name).set_function(guard.count)
    app = build_app(controller, api=name == "api", guard=guard)
    runner = web.AppRunner(app, access_log=None, keepalive_timeout=settings.idle_timeout)
    await runner.setup()
    try:
        server = await asyncio.get_running_loop().create_server(guard, host, port)
    except OSError as exc:  # the port is taken, or the address is not this host's
        await runner.cleanup()
        setting = "http.port" if name == "api" else "http.metrics_port"
        raise InputError(f"{setting}: cannot listen on {host}:{port}: {exc.strerror}") from exc
    return runner, server


def _protocol(runner: web.AppRunner | None) -> asyncio.Protocol:
    server = None if runner is None else runner.server
    if server is None:
        raise RuntimeError("the HTTP runner is not set up")
    return cast(asyncio.Protocol, server())
