"""A loopback proxy in front of Tansu that answers a client's bootstrap as Apache Kafka does.

From Metadata version 1 an empty topic array asks about no topic (null asks about all);
Tansu answers it with every topic. aiokafka's bootstrap sends an empty array, so on Tansu
every client knows every topic from its start, and code that relies on that works here
and not on Kafka (``partitions_for_topic`` right after ``start()``). Clients bootstrap
through this proxy; the brokers its answers name are Tansu's own address, so only the
bootstrap connection passes here."""

from __future__ import annotations

import asyncio
import contextlib
import struct
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field

from controller.runtime.side_loop import SideLoop

METADATA = 3


@dataclass
class KafkaBootstrap:
    upstream_port: int
    port: int = 0
    #: Correlation ids of empty-topic Metadata requests in flight, with their version.
    _empty: dict[int, int] = field(default_factory=dict)
    rewritten: int = 0

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def _pump(
        self, src: asyncio.StreamReader, dst: asyncio.StreamWriter, requests: bool
    ) -> None:
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            while True:
                size = struct.unpack(">i", await src.readexactly(4))[0]
                frame = await src.readexactly(size)
                frame = self._request(frame) if requests else self._response(frame)
                dst.write(struct.pack(">i", len(frame)) + frame)
                await dst.drain()
        dst.close()

    def _request(self, frame: bytes) -> bytes:
        api_key, version, correlation = struct.unpack_from(">hhi", frame)
        if api_key == METADATA and version >= 1:
            (client_len,) = struct.unpack_from(">h", frame, 8)
            at = 10 + max(client_len, 0)
            if struct.unpack_from(">i", frame, at)[0] == 0:
                self._empty[correlation] = version
        return frame

    def _response(self, frame: bytes) -> bytes:
        (correlation,) = struct.unpack_from(">i", frame)
        version = self._empty.pop(correlation, None)
        if version is None:
            return frame
        at = 4 + (4 if version >= 3 else 0)  # correlation id, throttle time
        (brokers,) = struct.unpack_from(">i", frame, at)
        at += 4
        for _ in range(brokers):
            at += 4  # node id
            at += 2 + struct.unpack_from(">h", frame, at)[0]  # host
            at += 4  # port
            at += 2 + max(struct.unpack_from(">h", frame, at)[0], 0)  # rack
        if version >= 2:
            at += 2 + max(struct.unpack_from(">h", frame, at)[0], 0)  # cluster id
        at += 4  # controller id
        self.rewritten += 1
        return frame[:at] + struct.pack(">i", 0)  # no topics

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        await asyncio.gather(
            self._pump(reader, up_writer, requests=True),
            self._pump(up_reader, writer, requests=False),
        )


@contextlib.asynccontextmanager
async def kafka_bootstrap(upstream_port: int) -> AsyncIterator[KafkaBootstrap]:
    proxy = KafkaBootstrap(upstream_port)
    server = await asyncio.start_server(proxy._serve, "127.0.0.1", 0)
    proxy.port = server.sockets[0].getsockname()[1]
    try:
        yield proxy
    finally:
        server.close()
        await server.wait_closed()


@contextlib.contextmanager
def kafka_bootstrap_thread(upstream_port: int) -> Iterator[int]:
    """The proxy on a thread of its own, for a whole test session; yields its port."""
    side = SideLoop("kafka-bootstrap-proxy")
    side.start()
    entered = kafka_bootstrap(upstream_port)
    try:
        proxy = asyncio.run(side.run(entered.__aenter__()))
        yield proxy.port
    finally:
        asyncio.run(side.run(entered.__aexit__(None, None, None)))
        asyncio.run(side.stop())
