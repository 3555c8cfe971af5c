"""Prometheus metrics: deliveries, settlements, retries, dead letters, gauges and latencies."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import grpc
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from gateway.engine.observe import Transition

if TYPE_CHECKING:
    from gateway.engine.engine import Engine


SETTLE_OUTCOMES = {"COMMITTED": "ack", "WAITING_RETRY": "retry", "DEAD_LETTERED": "dead_letter",
                   "DISCARDED": "discard", "READY": "released"}
"""The `outcome` label of gateway_settlements by the state a settle led to."""
MAX_CACHED_LABEL_SETS = 10_000
"""Bound on the cache of labelled children (topics and groups may come and go)."""


class Metrics:
    """One registry per gateway; an engine observer plus a request-timing interceptor."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.deliveries = Counter("gateway_deliveries", "Messages delivered to consumers",
                                  ["topic", "group", "policy"], registry=r)
        self.settlements = Counter("gateway_settlements", "Deliveries settled, by outcome",
                                   ["outcome", "policy"], registry=r)
        self.retries = Counter("gateway_retries", "Retries scheduled, by retry number",
                               ["attempt", "policy"], registry=r)
        self.dead_letters = Counter("gateway_dead_letters", "Messages dead-lettered",
                                    ["topic", "group"], registry=r)
        self.discards = Counter("gateway_discards", "Messages discarded", ["topic", "group"],
                                registry=r)
        self.inflight = Gauge("gateway_inflight", "Deliveries awaiting a result", registry=r)
        self.timers = Gauge("gateway_pending_timers", "Deadlines in the timer wheel", registry=r)
        self.store_bytes = Gauge("gateway_store_bytes", "Size of the embedded store on disk",
                                 registry=r)
        self.latency = Histogram("gateway_request_seconds", "gRPC request latency",
                                 ["method"], registry=r,
                                 buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                          0.25, 0.5, 1, 2.5, 5, 10, 30))
        self._server: Any = None
        self._children: dict[tuple[str, str, str, str, int], tuple[Any, ...]] = {}

    def on_transition(self, t: Transition) -> None:
        self.count_transition(t.to_state, t.topic, t.group, t.policy, t.attempt)

    def count_transition(
        self, to_state: str, topic: str, group: str, policy: str, attempt: int
    ) -> None:
        """Count one transition (the engine calls this without building a `Transition`). The
        labelled children are looked up once per label set and kept: a Prometheus `labels()`
        call costs more than the increment itself."""
        key = (to_state, topic, group, policy, attempt)
        counters = self._children.get(key)
        if counters is None:
            counters = self._children_for(key)
        for counter in counters:
            counter.inc()

    def _children_for(self, key: tuple[str, str, str, str, int]) -> tuple[Any, ...]:
        """The counter children one kind of transition increments (cached by `key`)."""
        to, topic, group, policy, attempt = key
        if len(self._children) >= MAX_CACHED_LABEL_SETS:
            self._children.clear()
        if to == "INFLIGHT":
            counters: tuple[Any, ...] = (self.deliveries.labels(topic, group, policy),)
        else:
            outcome = SETTLE_OUTCOMES.get(to, to.lower())
            counters = (self.settlements.labels(outcome, policy),)
            if to == "WAITING_RETRY":
                counters += (self.retries.labels(str(attempt), policy),)
            elif to == "DEAD_LETTERED":
                counters += (self.dead_letters.labels(topic, group),)
            elif to == "DISCARDED":
                counters += (self.discards.labels(topic, group),)
        self._children[key] = counters
        return counters

    def bind(self, engine: Engine, store_size: Callable[[], int]) -> None:
        self.inflight.set_function(lambda: len(engine.inflight))
        self.timers.set_function(lambda: len(engine.timers))
        self.store_bytes.set_function(store_size)

    def serve(self, host: str, port: int) -> int:
        server, _thread = start_http_server(port, addr=host, registry=self.registry)
        self._server = server
        return int(server.server_address[1])

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


class TimingInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Observes how long each unary request takes (streams: time to set up)."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(details)
        if handler is None or not handler.unary_unary:
            return handler
        inner = handler.unary_unary
        histogram = self.metrics.latency.labels(details.method)

        async def timed(request: Any, context: Any) -> Any:
            start = time.perf_counter()
            try:
                return await inner(request, context)
            finally:
                histogram.observe(time.perf_counter() - start)

        return grpc.unary_unary_rpc_method_handler(
            timed, handler.request_deserializer, handler.response_serializer
        )


def directory_size(path: str) -> int:
    import os

    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.path.getsize(os.path.join(root, name))
    return total
