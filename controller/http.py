"""Read-only HTTP: Prometheus metrics, health, readiness, and JSON views of the groups."""

from __future__ import annotations

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from .daemon import Controller


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
        out = {
            name: {
                "generation": g.state.reconciler.generation,
                "controller_epoch": g.epoch,
                "members": len(g.state.engine.members),
            }
            for name, g in sorted(controller.groups.items())
        }
        return web.json_response({"groups": out})

    async def group(request: web.Request) -> web.Response:
        name = request.match_info["group"]
        if name not in controller.groups:
            return web.json_response({"error": f"no group {name!r}"}, status=404)
        return web.json_response(controller.group_view(name))

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/v1/groups", groups)
    app.router.add_get("/v1/groups/{group}", group)
    return app


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
