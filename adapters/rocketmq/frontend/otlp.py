"""A sink for the OTLP metric exports that RocketMQ push consumers send to their broker.

The push consumer needs metrics switched on (its telemetry reader stops otherwise), and then
exports to the endpoint named in Settings every minute. The gateway accepts and drops them.
"""

from __future__ import annotations

from typing import Any

import grpc

SERVICE = "opentelemetry.proto.collector.metrics.v1.MetricsService"


def described() -> bool:
    """Load the service's descriptor into the default pool (so that reflection can describe
    it); False when its proto module (opentelemetry-proto, which the SDK's exporter brings)
    is not installed."""
    try:
        import opentelemetry.proto.collector.metrics.v1.metrics_service_pb2  # noqa: F401
    except ImportError:
        return False
    return True


async def _export(request: bytes, context: Any) -> bytes:
    # An empty ExportMetricsServiceResponse serializes to no bytes.
    return b""


def metrics_sink() -> grpc.GenericRpcHandler:
    """Generic handler answering `MetricsService/Export` with an empty success."""
    handler = grpc.unary_unary_rpc_method_handler(_export)
    return grpc.method_handlers_generic_handler(SERVICE, {"Export": handler})
