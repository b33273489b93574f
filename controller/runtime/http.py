"""HTTP: Prometheus metrics, health, readiness, JSON views of the groups and leadership
(read-only, open), and operator actions (pause, resume, rebalance, drain, undrain) that
need ``Authorization: Bearer <http.admin_token>`` and are logged as ``admin_action``.
"""

from __future__ import annotations

import hmac
import time
from collections.abc import Awaitable, Callable

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from controller import logs
from controller.runtime.daemon import Controller
from controller.runtime.group_view import group_summary

log = logs.get("ballast.http")


def build_app(controller: Controller) -> web.Application:
    async def metrics(_: web.Request) -> web.Response:
        body = generate_latest(controller.metrics.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def healthz(_: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def readyz(_: web.Request) -> web.Response:
        ready = controller.ready
        return web.json_response({"ready": ready}, status=200 if ready else 503)

    async def groups(_: web.Request) -> web.Response:
        out = {name: group_summary(g) for name, g in sorted(controller.groups.items())}
        return web.json_response(
            {"replica": controller.replica, "ha": controller.election is not None, "groups": out}
        )

    async def group(request: web.Request) -> web.Response:
        name = request.match_info["group"]
        if name not in controller.groups:
            return web.json_response(
                {"error": f"this replica does not lead a group {name!r}"}, status=404
            )
        partitions = request.query.get("partitions", "").lower() in ("1", "true", "yes")
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

    def admin(action: str) -> Callable[[web.Request], Awaitable[web.Response]]:
        async def handle(request: web.Request) -> web.Response:
            return _admin(controller, request, action)

        return handle

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/v1/groups", groups)
    app.router.add_get("/v1/groups/{group}", group)
    app.router.add_get("/v1/leadership", leadership)
    for action in ("pause", "resume", "rebalance"):
        app.router.add_post(f"/v1/groups/{{group}}/{action}", admin(action))
    for action in ("drain", "undrain"):
        app.router.add_post(f"/v1/groups/{{group}}/members/{{member}}/{action}", admin(action))
    return app


def _admin(controller: Controller, request: web.Request, action: str) -> web.Response:
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
    if not hmac.compare_digest(given.encode(), expected.encode()):
        counter.labels(action, "denied").inc()
        log.warning("admin_denied", action=action, group=group, member=member, remote=who)
        return web.json_response({"error": "missing or wrong bearer token"}, status=401)
    g = controller.groups.get(group)
    if g is None:
        counter.labels(action, "not_found").inc()
        return web.json_response({"error": f"this replica does not lead {group!r}"}, status=404)
    now = time.monotonic()
    state = g.state
    if action == "pause":
        state.paused = True
    elif action == "resume":
        state.paused = False
    elif action == "rebalance":
        state.force_rebalance(now)
    elif member is not None:
        done = state.drain(member, now) if action == "drain" else state.undrain(member, now)
        if not done:
            counter.labels(action, "not_found").inc()
            what = "member" if action == "drain" else "drained member"
            return web.json_response({"error": f"no {what} {member!r} in {group!r}"}, status=404)
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
        }
    )


async def serve(controller: Controller, host: str, port: int) -> web.AppRunner:
    runner = web.AppRunner(build_app(controller), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    return runner


def bound_port(runner: web.AppRunner) -> int:
    """The port actually bound (useful with port 0)."""
    for addr in runner.addresses:
        return int(addr[1])
    raise RuntimeError("HTTP server is not listening")
