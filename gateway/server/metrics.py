"""Prometheus metrics: deliveries, settlements, retries, dead letters, gauges and latencies."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import grpc
from prometheus_client import CollectorRegistry, Gauge, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily, Metric

from gateway.engine.observe import Transition
from gateway.engine.port import EngineQueries

SETTLE_OUTCOMES = {"COMMITTED": "ack", "WAITING_RETRY": "retry", "DEAD_LETTERED": "dead_letter",
                   "DISCARDED": "discard", "READY": "released"}
"""The `outcome` label of gateway_settlements by the state a settle led to."""


class Metrics:
    """One registry per gateway; an engine observer plus a request-timing interceptor."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self._counts: dict[tuple[str, str, str, str, int], int] = {}
        """Transitions by (to state, topic, group, policy, attempt or 0): a plain dict bumped on
        the hot path; Prometheus reads it only when scraped (`_TransitionCollector`)."""
        r.register(_TransitionCollector(self._counts))
        self.inflight = Gauge("gateway_inflight", "Deliveries awaiting a result", registry=r)
        self.timers = Gauge("gateway_pending_timers", "Deadlines in the timer wheel", registry=r)
        self.store_bytes = Gauge("gateway_store_bytes", "Size of the embedded store on disk",
                                 registry=r)
        self.latency = Histogram("gateway_request_seconds", "gRPC request latency",
                                 ["method"], registry=r,
                                 buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                          0.25, 0.5, 1, 2.5, 5, 10, 30))
        self._server: Any = None

    def on_transition(self, t: Transition) -> None:
        self.count_transition(t.to_state, t.topic, t.group, t.policy, t.attempt)

    def count_transition(
        self, to_state: str, topic: str, group: str, policy: str, attempt: int, n: int = 1
    ) -> None:
        """Count `n` transitions (the engine calls this without building a `Transition`)."""
        key = (to_state, topic, group, policy, attempt if to_state == "WAITING_RETRY" else 0)
        counts = self._counts
        counts[key] = counts.get(key, 0) + n

    def bind(self, engine: EngineQueries, store_size: Callable[[], int]) -> None:
        self.inflight.set_function(engine.unsettled_count)
        self.timers.set_function(engine.pending_timers)
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


class _TransitionCollector:
    """The transition counters, built from the engine's counts at scrape time."""

    def __init__(self, counts: dict[tuple[str, str, str, str, int], int]) -> None:
        self._counts = counts

    def describe(self) -> list[Metric]:
        return list(self._families({}))

    def collect(self) -> Iterator[Metric]:
        # dict(...) copies in one step under the GIL while the event loop keeps counting.
        return iter(self._families(dict(self._counts)))

    @staticmethod
    def _families(counts: dict[tuple[str, str, str, str, int], int]) -> list[Metric]:
        deliveries = CounterMetricFamily("gateway_deliveries", "Messages delivered to consumers",
                                         labels=["topic", "group", "policy"])
        settlements = CounterMetricFamily("gateway_settlements", "Deliveries settled, by outcome",
                                          labels=["outcome", "policy"])
        retries = CounterMetricFamily("gateway_retries", "Retries scheduled, by retry number",
                                      labels=["attempt", "policy"])
        dead = CounterMetricFamily("gateway_dead_letters", "Messages dead-lettered",
                                   labels=["topic", "group"])
        discards = CounterMetricFamily("gateway_discards", "Messages discarded",
                                       labels=["topic", "group"])
        sums: dict[tuple[str, tuple[str, ...]], int] = {}
        for (to, topic, group, policy, attempt), n in counts.items():
            if to == "INFLIGHT":
                keys: list[tuple[str, tuple[str, ...]]] = [("deliveries", (topic, group, policy))]
            else:
                keys = [("settlements", (SETTLE_OUTCOMES.get(to, to.lower()), policy))]
                if to == "WAITING_RETRY":
                    keys.append(("retries", (str(attempt), policy)))
                elif to == "DEAD_LETTERED":
                    keys.append(("dead", (topic, group)))
                elif to == "DISCARDED":
                    keys.append(("discards", (topic, group)))
            for key in keys:
                sums[key] = sums.get(key, 0) + n
        families = {"deliveries": deliveries, "settlements": settlements, "retries": retries,
                    "dead": dead, "discards": discards}
        for (name, labels), n in sums.items():
            families[name].add_metric(list(labels), n)
        return list(families.values())
