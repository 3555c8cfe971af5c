"""RocketMQ 5 gRPC front end: official RocketMQ 5 SDKs talk to the gateway unmodified.

`register(server, engine, settings)` adds `apache.rocketmq.v2.MessagingService` (and a sink
for the SDK's OTLP metric exports) to the gateway's grpc.aio server.
"""

from __future__ import annotations

import grpc

from gateway.engine.port import EnginePort
from gateway.limits import StreamSlots

from . import otlp
from .edge import SERVICE, generic_handler
from .otlp import metrics_sink
from .service import MessagingService
from .settings import ROCKETMQ_BACKOFF_S, FrontendSettings

__all__ = [
    "ROCKETMQ_BACKOFF_S",
    "SERVICE_NAMES",
    "FrontendSettings",
    "MessagingService",
    "register",
]

SERVICE_NAMES = (SERVICE.full_name, *((otlp.SERVICE,) if otlp.described() else ()))
"""The gRPC services `register` adds, as reflection lists them (the OTLP metrics sink when its
descriptor can be loaded)."""


def register(
    server: grpc.aio.Server, engine: EnginePort, settings: FrontendSettings,
    stream_slots: StreamSlots | None = None,
) -> MessagingService:
    """Serve the RocketMQ protocol on `server` (before it starts); returns the servicer.
    `stream_slots`: the server's bound on streams no credentials admitted."""
    service = MessagingService(engine, settings, stream_slots=stream_slots)
    server.add_generic_rpc_handlers((generic_handler(service), metrics_sink()))
    return service
