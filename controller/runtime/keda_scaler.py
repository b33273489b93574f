"""KEDA's external scaler, served over gRPC (``keda.enabled``): a ``ScaledObject`` whose
trigger is ``type: external`` (or ``external-push``) with ``scalerAddress`` here and
``metadata: {group: <name>}`` scales its Deployment to the group's recommended member
count (``groups[].autoscale``).

- ``GetMetricSpec``: one metric, ``ballast-desired-members``, target 1 per replica, so
  the HPA asks for exactly the recommended count;
- ``GetMetrics``: the recommendation (the current member count until one is made);
- ``IsActive`` / ``StreamIsActive``: whether anything arrives or waits (KEDA scales a
  ``minReplicaCount: 0`` Deployment to zero when not).

Requests are read with ``wire.keda`` (bytes in, values out; bad ones answered
INVALID_ARGUMENT, counted and logged). A group this replica does not lead is answered
UNAVAILABLE naming the replica: with HA, point KEDA at each group's leader or use the
HPA with the Prometheus adapter (docs/operations.md, "Autoscaling").
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any, NoReturn, TypeVar

from controller import logs
from controller.config import Config
from controller.errors import InputError
from controller.runtime.membership import invalid_input
from controller.runtime.metrics import Metrics
from controller.runtime.replica_state import ManagedGroup, ReplicaState
from controller.tasks import cancel_and_wait
from controller.wire.keda import (
    KedaDecodeError,
    MetricSpec,
    MetricValue,
    ScaledObjectRef,
    get_metric_spec_response,
    get_metrics_response,
    is_active_response,
    read_get_metrics_request,
    read_scaled_object_ref,
)

log = logs.get("ballast.keda")

SERVICE = "externalscaler.ExternalScaler"
METRIC = "ballast-desired-members"
#: How often the scaler looks for a change that its StreamIsActive streams should hear (s).
STREAM_CHECK = 1.0
#: gRPC's own bounds on a connection: the time it gets for its HTTP/2 handshake (a socket
#: that never sends one is closed after it), and how long it may carry no call (KEDA
#: polls IsActive every 30 s by default and keeps its connection). No cap on their
#: number: gRPC refuses new connections at one, KEDA's own included.
GRPC_OPTIONS = (
    ("grpc.server_handshake_timeout_ms", 10_000),
    ("grpc.max_connection_idle_ms", 300_000),
)

R = TypeVar("R")
_REFUSALS = logs.Throttle()


class KedaScaler:
    def __init__(self, cfg: Config, state: ReplicaState, metrics: Metrics) -> None:
        self._cfg = cfg
        self._state = state
        self._metrics = metrics
        self._autoscaled = {g.name for g in cfg.groups if g.autoscale is not None}
        self._server: Any = None
        self._watch: asyncio.Task[None] | None = None
        #: Set (and replaced) when any autoscaled group's activity or leader changes: one
        #: look per group per STREAM_CHECK, however many streams listen.
        self._changed = asyncio.Event()
        self._streams = 0
        self.port = 0
        metrics.keda_streams.set_function(lambda: self._streams)

    async def start(self) -> None:
        """Listen; ``OSError`` when the port cannot be had."""
        try:
            import grpc  # noqa: PLC0415 (an optional extra, loaded only when enabled)
        except ImportError as exc:
            raise InputError(
                "keda.enabled needs the keda extra: pip install 'ballast[keda]'"
            ) from exc
        self._grpc = grpc
        raw = {"request_deserializer": None, "response_serializer": None}
        handler = grpc.method_handlers_generic_handler(
            SERVICE,
            {
                "IsActive": grpc.unary_unary_rpc_method_handler(self._is_active, **raw),
                "StreamIsActive": grpc.unary_stream_rpc_method_handler(
                    self._stream_is_active, **raw
                ),
                "GetMetricSpec": grpc.unary_unary_rpc_method_handler(self._get_metric_spec, **raw),
                "GetMetrics": grpc.unary_unary_rpc_method_handler(self._get_metrics, **raw),
            },
        )
        server = grpc.aio.server(options=GRPC_OPTIONS)
        server.add_generic_rpc_handlers((handler,))
        where = f"{self._cfg.keda.host}:{self._cfg.keda.port}"
        try:
            self.port = server.add_insecure_port(where)
        except RuntimeError:  # grpc's "Failed to bind"
            self.port = 0
        if self.port == 0:
            raise OSError(f"keda.port: cannot listen on {where}")
        await server.start()
        self._server = server
        self._watch = asyncio.create_task(self._watch_activity(), name="keda-activity")
        log.info("keda_scaler_listening", host=self._cfg.keda.host, port=self.port)

    async def stop(self) -> None:
        if self._watch is not None:
            await cancel_and_wait(self._watch)
            self._watch = None
        if self._server is not None:
            await self._server.stop(grace=1.0)
            self._server = None

    # ------------------------------------------------------------------ the methods

    async def _is_active(self, request: bytes, context: Any) -> bytes:
        g = await self._group(read_scaled_object_ref, request, context)
        return is_active_response(_active(g))

    async def _stream_is_active(self, request: bytes, context: Any) -> AsyncIterator[bytes]:
        ref = await self._read(read_scaled_object_ref, request, context)
        if self._streams >= self._cfg.keda.max_streams:
            held = _REFUSALS.allow("streams")
            if held is not None:  # a flood of streams is counted, not logged line by line
                log.warning("keda_streams_refused", streams=self._streams, suppressed=held)
            await self._refuse(
                context,
                "RESOURCE_EXHAUSTED",
                f"keda: {self._streams} StreamIsActive streams are open (keda.max_streams)",
            )
        self._streams += 1
        try:
            last: bool | None = None
            while True:
                changed = self._changed
                now = _active(await self._led(ref, context))
                if now != last:
                    yield is_active_response(now)
                    last = now
                await changed.wait()
        finally:
            self._streams -= 1

    async def _watch_activity(self) -> None:
        seen: dict[str, bool | None] = {}
        while True:
            now = {name: self._activity(name) for name in sorted(self._autoscaled)}
            if now != seen:
                seen = now
                self._changed.set()
                self._changed = asyncio.Event()
            await asyncio.sleep(STREAM_CHECK)

    def _activity(self, name: str) -> bool | None:
        g = self._state.groups.get(name)
        return None if g is None else _active(g)

    async def _get_metric_spec(self, request: bytes, context: Any) -> bytes:
        await self._group(read_scaled_object_ref, request, context)
        return get_metric_spec_response([MetricSpec(METRIC, 1.0)])

    async def _get_metrics(self, request: bytes, context: Any) -> bytes:
        req = await self._read(read_get_metrics_request, request, context)
        g = await self._led(req.scaled_object, context)
        desired = g.sizing.desired if g.sizing is not None else g.state.member_count()
        return get_metrics_response([MetricValue(METRIC, float(desired))])

    # ------------------------------------------------------------------ reading

    async def _read(self, reader: Callable[[bytes], R], request: bytes, context: Any) -> R:
        try:
            return reader(request)
        except KedaDecodeError as exc:
            invalid_input(self._metrics, "keda", str(exc))
            await self._refuse(context, "INVALID_ARGUMENT", f"keda: {exc}")

    async def _group(
        self, reader: Callable[[bytes], ScaledObjectRef], request: bytes, context: Any
    ) -> ManagedGroup:
        return await self._led(await self._read(reader, request, context), context)

    async def _led(self, ref: ScaledObjectRef, context: Any) -> ManagedGroup:
        name = ref.metadata.get("group")
        if name is None:
            await self._refuse(context, "INVALID_ARGUMENT", "keda: the trigger names no group")
        if name not in self._autoscaled:
            shown = logs.clipped(name)
            await self._refuse(
                context, "INVALID_ARGUMENT", f"keda: group {shown!r} has no autoscale settings"
            )
        g = self._state.groups.get(name)
        if g is None:
            replica = self._cfg.ha.replica_id or "this replica"
            await self._refuse(
                context, "UNAVAILABLE", f"keda: {replica} does not lead group {name!r} now"
            )
        return g

    async def _refuse(self, context: Any, code: str, text: str) -> NoReturn:
        await context.abort(getattr(self._grpc.StatusCode, code), text)
        raise AssertionError("grpc's abort returned")  # it raises, always


def _active(g: ManagedGroup) -> bool:
    """Anything to do: records arriving or waiting (or nothing measured yet)."""
    s = g.sizing
    return s is None or s.backlog > 0 or (s.input_rate or 0.0) > 0
