"""Tracing from the configuration: the OTLP exporter `[tracing]` names, and the tracer.

Imported only when tracing is on; the `tracing` extra brings the OpenTelemetry SDK and the OTLP
exporters (`pip install 'retry-gateway[tracing]'`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gateway.errors import MissingExtra
from gateway.server.config import ServeConfig

if TYPE_CHECKING:
    from gateway.tracing.spans import Tracing

EXTRA = ("tracing needs the OpenTelemetry SDK and OTLP exporter: "
         "pip install 'retry-gateway[tracing]'")


def otlp_exporter(endpoint: str, protocol: str) -> Any:
    """The OTLP span exporter for `protocol` (`grpc` or `http/protobuf`) sending to `endpoint`
    ("": the exporter's default and the `OTEL_EXPORTER_OTLP_*` environment variables)."""
    try:
        if protocol == "grpc":
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

            if not endpoint:
                return OTLPSpanExporter()
            return OTLPSpanExporter(endpoint=endpoint, insecure=endpoint.startswith("http://"))
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
            OTLPSpanExporter as HttpExporter,
        )
    except ImportError:
        raise MissingExtra(EXTRA) from None
    return HttpExporter(endpoint=endpoint) if endpoint else HttpExporter()


def open_tracing(config: ServeConfig) -> Tracing:
    """The tracer a gateway with `config` uses."""
    try:
        from gateway.tracing.spans import Tracing
    except ImportError:
        raise MissingExtra(EXTRA) from None
    return Tracing(otlp_exporter(config.tracing_endpoint, config.tracing_protocol),
                   service_name=config.tracing_service_name, gateway_id=config.gateway_id,
                   sample_ratio=config.tracing_sample_ratio)
