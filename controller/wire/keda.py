"""KEDA's external scaler messages (``externalscaler.proto`` of kedacore/keda) in
protobuf's wire format, by hand: the few messages Ballast serves need no generated code
and no protobuf runtime. Requests come from whatever can reach the port, so reading one
returns a value or raises ``KedaDecodeError``, whatever the bytes; fields this reader
does not know are skipped, as protobuf readers must.

    ScaledObjectRef   {1: name, 2: namespace, 3: map<string, string> scalerMetadata}
    GetMetricsRequest {1: ScaledObjectRef, 2: metricName}
    IsActiveResponse  {1: bool result}
    MetricSpec        {1: metricName, 2: int64 targetSize, 3: double targetSizeFloat}
    GetMetricSpecResponse {1: repeated MetricSpec}
    MetricValue       {1: metricName, 2: int64 metricValue, 3: double metricValueFloat}
    GetMetricsResponse {1: repeated MetricValue}
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import NamedTuple

#: A request larger than this is refused (KEDA's are a few hundred bytes).
MAX_REQUEST = 64 * 1024
#: Entries of ``scalerMetadata`` kept at most; more is refused.
MAX_METADATA = 256
_MAX_STRING = 4096

_VARINT, _I64, _LEN, _I32 = 0, 1, 2, 5


class KedaDecodeError(ValueError):
    """A request that is not a message of the external scaler protocol."""


class ScaledObjectRef(NamedTuple):
    name: str
    namespace: str
    metadata: dict[str, str]


class GetMetricsRequest(NamedTuple):
    scaled_object: ScaledObjectRef
    metric_name: str


class MetricSpec(NamedTuple):
    metric_name: str
    target_size: float


class MetricValue(NamedTuple):
    metric_name: str
    value: float


# ---------------------------------------------------------------------- reading


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if at >= len(data):
            raise KedaDecodeError("a number runs past the end")
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, at
        shift += 7
        if shift >= 64:
            raise KedaDecodeError("a number longer than 10 bytes")


def _fields(data: bytes) -> Iterator[tuple[int, int, int | bytes]]:
    """``(field number, wire type, value)``: an int, or the bytes of a length-delimited
    field."""
    at = 0
    while at < len(data):
        key, at = _varint(data, at)
        number, kind = key >> 3, key & 7
        if number == 0:
            raise KedaDecodeError("field number 0")
        if kind == _VARINT:
            value, at = _varint(data, at)
            yield number, kind, value
        elif kind == _LEN:
            size, at = _varint(data, at)
            if size > len(data) - at:
                raise KedaDecodeError("a field runs past the end")
            yield number, kind, data[at : at + size]
            at += size
        elif kind in (_I64, _I32):
            width = 8 if kind == _I64 else 4
            if width > len(data) - at:
                raise KedaDecodeError("a fixed-size field runs past the end")
            yield number, kind, int.from_bytes(data[at : at + width], "little")
            at += width
        else:
            raise KedaDecodeError(f"wire type {kind} (groups are not used by this protocol)")


def _text(value: int | bytes, what: str) -> str:
    if not isinstance(value, bytes):
        raise KedaDecodeError(f"{what} is not a string")
    if len(value) > _MAX_STRING:
        raise KedaDecodeError(f"{what} is longer than {_MAX_STRING} bytes")
    try:
        return value.decode()
    except UnicodeDecodeError as exc:
        raise KedaDecodeError(f"{what} is not UTF-8") from exc


def _checked(data: object) -> bytes:
    if not isinstance(data, bytes):
        raise KedaDecodeError("a request must be bytes")
    if len(data) > MAX_REQUEST:
        raise KedaDecodeError(f"a request larger than {MAX_REQUEST} bytes")
    return data


def read_scaled_object_ref(data: bytes) -> ScaledObjectRef:
    name = namespace = ""
    metadata: dict[str, str] = {}
    for number, _, value in _fields(_checked(data)):
        if number == 1:
            name = _text(value, "name")
        elif number == 2:
            namespace = _text(value, "namespace")
        elif number == 3:
            if not isinstance(value, bytes):
                raise KedaDecodeError("a scalerMetadata entry is not a message")
            key = item = ""
            for n, _, v in _fields(value):
                if n == 1:
                    key = _text(v, "a scalerMetadata key")
                elif n == 2:
                    item = _text(v, "a scalerMetadata value")
            metadata[key] = item
            if len(metadata) > MAX_METADATA:
                raise KedaDecodeError(f"more than {MAX_METADATA} scalerMetadata entries")
    return ScaledObjectRef(name, namespace, metadata)


def read_get_metrics_request(data: bytes) -> GetMetricsRequest:
    ref, metric = ScaledObjectRef("", "", {}), ""
    for number, _, value in _fields(_checked(data)):
        if number == 1:
            if not isinstance(value, bytes):
                raise KedaDecodeError("scaledObjectRef is not a message")
            ref = read_scaled_object_ref(value)
        elif number == 2:
            metric = _text(value, "metricName")
    return GetMetricsRequest(ref, metric)


# ---------------------------------------------------------------------- writing


def _put_varint(value: int) -> bytes:
    value &= 0xFFFFFFFFFFFFFFFF  # int64: negatives as ten bytes, as protobuf writes them
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _put(number: int, kind: int, payload: bytes) -> bytes:
    key = _put_varint(number << 3 | kind)
    if kind == _LEN:
        return key + _put_varint(len(payload)) + payload
    return key + payload


def _metric(name: str, whole: int, real: float) -> bytes:
    """Name, the deprecated int64 and the double (KEDA reads the double when set)."""
    return (
        _put(1, _LEN, name.encode())
        + _put(2, _VARINT, _put_varint(whole))
        + _put(3, _I64, struct.pack("<d", real))
    )


def is_active_response(active: bool) -> bytes:
    return _put(1, _VARINT, _put_varint(1)) if active else b""


def get_metric_spec_response(specs: list[MetricSpec]) -> bytes:
    return b"".join(
        _put(1, _LEN, _metric(s.metric_name, round(s.target_size), s.target_size)) for s in specs
    )


def get_metrics_response(values: list[MetricValue]) -> bytes:
    return b"".join(_put(1, _LEN, _metric(v.metric_name, round(v.value), v.value)) for v in values)
