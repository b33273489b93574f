"""A KEDA-shaped client: stubs generated from ``externalscaler.proto`` with grpcio-tools,
as KEDA's own are, so the scaler's tests check Ballast's hand-written codec against the
protobuf runtime."""

from __future__ import annotations

import importlib
import sys
import tempfile
from pathlib import Path
from types import ModuleType

PROTO = Path(__file__).with_name("externalscaler.proto")


def stubs() -> tuple[ModuleType, ModuleType]:
    """``(externalscaler_pb2, externalscaler_pb2_grpc)``, generated once per process."""
    if "externalscaler_pb2_grpc" not in sys.modules:
        from grpc_tools import protoc  # noqa: PLC0415

        out = tempfile.mkdtemp(prefix="keda-stubs-")
        args = ["protoc", f"-I{PROTO.parent}", f"--python_out={out}", f"--grpc_python_out={out}"]
        if protoc.main([*args, str(PROTO)]) != 0:
            raise RuntimeError("protoc failed on externalscaler.proto")
        sys.path.insert(0, out)
    return importlib.import_module("externalscaler_pb2"), importlib.import_module(
        "externalscaler_pb2_grpc"
    )
