"""The daemon's process: the HTTP server, the controller, and the signals that end them."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

from controller import logs
from controller.config import Config
from controller.errors import INTERRUPTED, BallastError, InputError
from controller.runtime import collector_policy
from controller.runtime.daemon import Controller
from controller.runtime.http import serve
from controller.runtime.keda_scaler import KedaScaler
from controller.tasks import cancel_and_wait


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
    except InputError as exc:  # a port is taken, or the address is not this host's
        await controller.stop()  # closes the clients it made, never started
        log.error("startup_failed", error=str(exc))
        return InputError.exit_code
    log.info(
        "http_listening", host=cfg.http.host, port=runner.port, metrics_port=runner.metrics_port
    )
    scaler = KedaScaler(cfg, controller.state, controller.metrics) if cfg.keda.enabled else None
    try:
        if scaler is not None:
            await scaler.start()
    except (OSError, InputError) as exc:
        await controller.stop()
        await runner.cleanup()
        log.error("startup_failed", error=str(exc))
        return InputError.exit_code
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
        if scaler is not None:
            await scaler.stop()
        await controller.stop()
        await runner.cleanup()
    if controller.failed.is_set():
        return controller.failure_code
    return INTERRUPTED if signal.SIGINT in stopped_by else 0
