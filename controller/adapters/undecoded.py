"""Kafka responses handed to the caller as bytes, for ``controller.wire``'s readers.

aiokafka decodes a response in the event loop that reads it, into a Python object per
field of every partition. Two internals are used to keep the bytes instead: a request
builder's ``build`` (the request struct it returns) and that struct's ``RESPONSE_TYPE``,
whose ``decode`` the connection calls with the response body."""

from __future__ import annotations

from typing import Any, NamedTuple


class Undecoded(NamedTuple):
    """A response as the connection received it, and the type that would decode it."""

    kind: Any
    data: Any

    @property
    def version(self) -> int:
        return int(self.kind.API_VERSION)

    def body(self) -> bytes:
        """The response after its header."""
        return bytes(self.data.read())


class _LeaveUndecoded:
    """Stands in for a response type: the connection's ``decode`` keeps the bytes."""

    def __init__(self, kind: Any) -> None:
        self.kind = kind

    def decode(self, data: Any) -> Undecoded:
        return Undecoded(self.kind, data)


class AnsweredUndecoded:
    """Mixed into an aiokafka request builder (first base): whichever version the
    connection negotiates, the response reaches the caller as ``Undecoded``."""

    def build(self, request_struct_class: Any) -> Any:
        struct_ = super().build(request_struct_class)  # type: ignore[misc]
        # private: the connection decodes the response with RESPONSE_TYPE.decode
        struct_.RESPONSE_TYPE = _LeaveUndecoded(request_struct_class.RESPONSE_TYPE)
        return struct_
