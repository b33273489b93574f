"""A TLS listener on loopback in front of a plaintext one, for brokers that serve no TLS
themselves (the embedded Tansu): clients speak TLS to it, verified against the test CA,
and it forwards bytes both ways. Run as its own process, so tests start and stop it like
any broker: ``python -m tests.tls_proxy LISTEN_PORT TARGET_PORT CERT KEY``."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import sys
from pathlib import Path

from controller.tools import embedded


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, ssl.SSLError):
        pass
    finally:
        with contextlib.suppress(Exception):
            writer.close()


async def serve(listen: int, target: int, cert: str, key: str) -> None:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", target)
        except OSError:
            writer.close()
            return
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))

    server = await asyncio.start_server(handle, "127.0.0.1", listen, ssl=context)
    async with server:
        await server.serve_forever()


def tls_proxy(workdir: Path, target: int, cert: Path, key: Path) -> embedded.BrokerProcess:
    """The proxy as a process on a free port (``start()`` it, ``stop()`` it)."""
    port = embedded.free_port()
    argv = [sys.executable, "-m", "tests.tls_proxy", str(port), str(target), str(cert), str(key)]
    return embedded.BrokerProcess("tls-proxy", port, argv, workdir / f"tls-proxy-{port}.log")


if __name__ == "__main__":
    listen, target, cert, key = sys.argv[1:5]
    asyncio.run(serve(int(listen), int(target), cert, key))
