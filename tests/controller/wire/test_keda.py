"""KEDA's external scaler messages, read and written by hand, against the protobuf
runtime (stubs generated from the proto KEDA uses): what protobuf writes is read alike,
what is written protobuf reads alike, and any bytes give a value or ``KedaDecodeError``."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from controller.wire.keda import (
    MAX_METADATA,
    MAX_REQUEST,
    KedaDecodeError,
    MetricSpec,
    MetricValue,
    get_metric_spec_response,
    get_metrics_response,
    is_active_response,
    read_get_metrics_request,
    read_scaled_object_ref,
)
from tests.keda import stubs

pb, _ = stubs()
texts = st.text(max_size=40)


@given(texts, texts, st.dictionaries(texts, texts, max_size=10))
def test_a_scaled_object_ref_reads_as_protobuf_wrote_it(
    name: str, namespace: str, metadata: dict[str, str]
) -> None:
    ref = pb.ScaledObjectRef(name=name, namespace=namespace, scalerMetadata=metadata)
    assert read_scaled_object_ref(ref.SerializeToString()) == (name, namespace, metadata)


@given(texts, st.dictionaries(texts, texts, max_size=5), texts)
def test_a_get_metrics_request_reads_as_protobuf_wrote_it(
    name: str, metadata: dict[str, str], metric: str
) -> None:
    req = pb.GetMetricsRequest(
        scaledObjectRef=pb.ScaledObjectRef(name=name, scalerMetadata=metadata), metricName=metric
    )
    got = read_get_metrics_request(req.SerializeToString())
    assert (got.scaled_object.name, got.scaled_object.metadata, got.metric_name) == (
        name,
        metadata,
        metric,
    )


@given(texts, st.integers(0, 10**6))
def test_responses_read_in_protobuf_as_written(name: str, count: int) -> None:
    values = pb.GetMetricsResponse.FromString(get_metrics_response([MetricValue(name, count)]))
    assert [(v.metricName, v.metricValue, v.metricValueFloat) for v in values.metricValues] == [
        (name, count, float(count))
    ]
    specs = pb.GetMetricSpecResponse.FromString(get_metric_spec_response([MetricSpec(name, 1.0)]))
    assert [(s.metricName, s.targetSize, s.targetSizeFloat) for s in specs.metricSpecs] == [
        (name, 1, 1.0)
    ]
    for active in (True, False):
        assert pb.IsActiveResponse.FromString(is_active_response(active)).result is active


def test_unknown_fields_are_skipped_as_protobuf_requires() -> None:
    known = pb.ScaledObjectRef(name="so", scalerMetadata={"group": "g"}).SerializeToString()
    extra = bytes([0x20, 0x05]) + bytes([0x29]) + b"\x00" * 8 + bytes([0x35]) + b"\x00" * 4
    assert read_scaled_object_ref(extra + known) == ("so", "", {"group": "g"})


@pytest.mark.parametrize(
    ("data", "says"),
    [
        (b"\x0a\x05ab", "runs past the end"),
        (b"\x0a" + b"\xff" * 11, "longer than 10 bytes"),
        (b"\x08\x01", "name is not a string"),
        (b"\x0a\x02\xff\xfe", "not UTF-8"),
        (b"\x00\x01", "field number 0"),
        (b"\x0b", "wire type 3"),
        (b"\x1a\x01\x08", "runs past the end"),
        (b"\x19" + b"\x00" * 3, "fixed-size field runs past the end"),
        (b"\x0a" + b"\x00" * (MAX_REQUEST + 1), f"larger than {MAX_REQUEST}"),
    ],
)
def test_malformed_requests_are_one_documented_error(data: bytes, says: str) -> None:
    with pytest.raises(KedaDecodeError, match=says):
        read_scaled_object_ref(data)


def test_metadata_stays_bounded() -> None:
    many = {f"k{i}": "v" for i in range(MAX_METADATA + 1)}
    data = pb.ScaledObjectRef(scalerMetadata=many).SerializeToString()
    with pytest.raises(KedaDecodeError, match="scalerMetadata entries"):
        read_scaled_object_ref(data)


@given(st.binary(max_size=300))
def test_any_bytes_give_a_value_or_the_one_error(data: bytes) -> None:
    for reader in (read_scaled_object_ref, read_get_metrics_request):
        with contextlib.suppress(KedaDecodeError):
            reader(data)
