"""`[tracing]` in the config file: a `gateway serve` process exports its spans over OTLP/gRPC to
a collector (here a small OTLP trace service in the test), and flushes them on SIGTERM."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

from gateway.client import GatewayClient
from gateway.v1 import gateway_pb2
from tests.amqp_front import free_port

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
PARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


class Collector(trace_service_pb2_grpc.TraceServiceServicer):  # type: ignore[misc]
    def __init__(self) -> None:
        self.requests: list[trace_service_pb2.ExportTraceServiceRequest] = []

    async def Export(self, request: trace_service_pb2.ExportTraceServiceRequest,
                     context: object) -> trace_service_pb2.ExportTraceServiceResponse:
        self.requests.append(request)
        return trace_service_pb2.ExportTraceServiceResponse()

    def spans(self) -> list[tuple[str, str, bytes]]:
        """(service name, span name, trace id) of every span received."""
        out = []
        for request in self.requests:
            for resource_spans in request.resource_spans:
                service = next(a.value.string_value for a in resource_spans.resource.attributes
                               if a.key == "service.name")
                for scope in resource_spans.scope_spans:
                    out += [(service, span.name, span.trace_id) for span in scope.spans]
        return out


async def serving(target: str) -> bool:
    try:
        async with grpc.aio.insecure_channel(target) as channel:
            reply = await health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=""), timeout=2)
            return reply.status == health_pb2.HealthCheckResponse.SERVING
    except grpc.aio.AioRpcError:
        return False


async def test_config_file_tracing_exports_over_otlp(tmp_path: Path) -> None:
    collector = Collector()
    server = grpc.aio.server()
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(collector, server)
    otlp_port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    config = tmp_path / "gateway.toml"
    config.write_text(
        "[tracing]\n"
        "enabled = true\n"
        f'endpoint = "http://127.0.0.1:{otlp_port}"\n'
        'service_name = "gateway-under-test"\n')
    target = f"127.0.0.1:{free_port()}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "gateway.cli", "serve", "--config", str(config),
         "--data-dir", str(tmp_path / "data"), "--listen", target, "--log-level", "warning"],
        env={**os.environ, "PYTHONPATH": str(ROOT)}, stderr=subprocess.PIPE)
    try:
        for _ in range(300):
            if await serving(target):
                break
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            await asyncio.sleep(0.1)
        topic = f"otlp-{uuid.uuid4().hex[:8]}"
        async with GatewayClient(target) as client:
            await client.stub.Publish(
                gateway_pb2.PublishRequest(topic=topic, messages=[gateway_pb2.Message(body=b"x")]),
                metadata=(("traceparent", PARENT),))
            async with client.consume(topic, "g", policy="rocketmq") as stream:
                msg = await stream.next(30)
                assert msg is not None
                assert (await msg.ack()).ok
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(proc.wait, 60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        await server.stop(None)
    spans = collector.spans()
    names = {name for _, name, _ in spans}
    assert {f"publish {topic}", f"deliver {topic}", f"settle {topic}"} <= names
    assert {service for service, _, _ in spans} == {"gateway-under-test"}
    assert {trace_id.hex() for _, _, trace_id in spans} == {PARENT.split("-")[1]}
