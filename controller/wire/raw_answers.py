"""The primitives that read Kafka responses from their bytes.

aiokafka decodes every response in the event loop that reads it, into a Python object
per field of every partition. For the answers that name every partition of a fleet
(Metadata, ListOffsets, OffsetFetch) that is most of the controller's CPU at 100 000
partitions; the modules beside this one read only the fields they need, with ``struct``
(``controller.adapters.undecoded`` hands them the bytes).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

I16 = struct.Struct(">h")
I32 = struct.Struct(">i")


class RawDecodeError(ValueError):
    """The bytes are not a response of the kind and version they were asked as."""


def read_count(buf: bytes, at: int) -> tuple[int, int]:
    """An array's length (a null array, -1, has none)."""
    (n,) = I32.unpack_from(buf, at)
    return max(n, 0), at + 4


def read_string(buf: bytes, at: int) -> tuple[str | None, int]:
    """A (nullable) string: int16 length, -1 for null, then UTF-8."""
    (n,) = I16.unpack_from(buf, at)
    at += 2
    if n < 0:
        return None, at
    if at + n > len(buf):
        raise RawDecodeError("a string runs past the end of the response")
    return buf[at : at + n].decode(), at + n


def read_checked(
    kind: str,
    versions: range,
    version: int,
    body: bytes,
    read: Callable[[int, bytes], T],
    *,
    error: type[RawDecodeError] = RawDecodeError,
) -> T:
    """``read(version, body)``; a version it does not read, or bytes that are not such a
    response, raise ``error`` naming the kind and the version."""
    if version not in versions:
        raise error(f"{kind} version {version}: only {versions[0]}-{versions[-1]} are read")
    try:
        return read(version, body)
    except (struct.error, ValueError, IndexError, OverflowError) as exc:  # RawDecodeError too
        raise error(f"{kind} v{version} response: {exc}") from exc
