"""Prometheus metrics, by the conventions: base units in names, `_total` counters, the process
and Python collectors, the gRPC status code on request counts, and bounded label cardinality.

Topic and group labels are capped (`metrics_label_cap`, default 100 each): the first values
seen keep their names, every later one is counted under `_other`, so a client that invents
names cannot grow the registry (or the gateway's memory); a name of that form itself (`_other`,
`__other`, ...) is shown with one more leading underscore. Attempt labels above 32 are `_other`
too. Method labels are the registered methods only (an unknown method has no handler).

The engine's counts are plain dicts bumped on the hot path (`count_transition`,
`observe_settle`) and turned into metric families only when Prometheus scrapes.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import Any

import grpc
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector

from gateway.engine.observe import Transition
from gateway.engine.port import EngineQueries
from gateway.server.handlers import inner_behaviour, rebuild, responses
from gateway.server.metrics_http import serve_metrics

SETTLE_OUTCOMES = {"COMMITTED": "ack", "WAITING_RETRY": "retry", "DEAD_LETTERED": "dead_letter",
                   "DISCARDED": "discard", "READY": "released"}
"""The `outcome` label of gateway_settlements by the state a settle led to."""
OTHER = "_other"
"""The label value every topic or group beyond the cap is counted under."""
DEFAULT_LABEL_CAP = 100
ATTEMPT_CAP = 32
"""Retry numbers above this are counted under `_other`."""
SETTLE_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
                  30.0, 60.0, 300.0, 1800.0)
"""Seconds from delivery to settlement (the last buckets: retries by deadline, long holds)."""
REQUEST_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5,
                   10, 30)


class LabelCap:
    """The first `cap` distinct values keep their names; the rest are `_other`."""

    __slots__ = ("cap", "kept")

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.kept: dict[str, str] = {}

    def __call__(self, value: str) -> str:
        kept = self.kept.get(value)
        if kept is not None:
            return kept
        if len(self.kept) < self.cap:
            # A topic or group a client names `_other` (`__other`, ...) gets one more leading
            # underscore: it was one series with the names beyond the cap.
            kept = "_" + value if value.lstrip("_") == "other" and value[0] == "_" else value
            self.kept[value] = kept
            return kept
        return OTHER


class Metrics:
    """One registry per gateway: an engine observer, a request interceptor's counters, the
    process and Python collectors."""

    def __init__(self, label_cap: int = DEFAULT_LABEL_CAP) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.topics = LabelCap(label_cap)
        self.groups = LabelCap(label_cap)
        self._topic_names = self.topics.kept
        self._group_names = self.groups.kept
        self._counts: dict[tuple[str, str, str, str, int], int] = {}
        """Transitions by (to state, topic, group, policy, attempt or 0), labels capped."""
        self._settles: dict[tuple[str, str], list[float]] = {}
        """Settle latencies by (policy, state the settle led to): a count per bucket (+Inf
        last), then the sum."""
        ProcessCollector(registry=r)
        PlatformCollector(registry=r)
        GCCollector(registry=r)
        r.register(_TransitionCollector(self._counts))
        r.register(_SettleCollector(self._settles))
        self.inflight = Gauge("gateway_inflight", "Deliveries awaiting a result", registry=r)
        self.timers = Gauge("gateway_pending_timers", "Deadlines in the timer wheel", registry=r)
        self.store_bytes = Gauge("gateway_store_bytes", "Size of the embedded store on disk",
                                 registry=r)
        self.serving = Gauge("gateway_serving", "1 while health says SERVING (the back end "
                             "works and the gateway is not draining), else 0", registry=r)
        self.latency = Histogram("gateway_request_seconds", "gRPC request latency (unary)",
                                 ["method"], registry=r, buckets=REQUEST_BUCKETS)
        self.requests = Counter("gateway_requests", "gRPC calls ended, by method and status code",
                                ["method", "code"], registry=r)
        self.streams = Gauge("gateway_open_streams", "gRPC streaming calls open, by method",
                             ["method"], registry=r)
        self._consumers = _ConsumerCollector(self)
        r.register(self._consumers)
        self._telemetry = _TelemetryCollector()
        r.register(self._telemetry)
        self._server: Any = None

    def on_transition(self, t: Transition) -> None:
        self.count_transition(t.to_state, t.topic, t.group, t.policy, t.attempt)

    def count_transition(
        self, to_state: str, topic: str, group: str, policy: str, attempt: int, n: int = 1
    ) -> None:
        """Count `n` transitions (the engine calls this without building a `Transition`)."""
        if to_state != "WAITING_RETRY":
            attempt = 0
        elif attempt > ATTEMPT_CAP:
            attempt = -1
        # The caps' dicts read inline: a method call per label costs as much as the rest.
        topic = self._topic_names.get(topic) or self.topics(topic)
        group = self._group_names.get(group) or self.groups(group)
        key = (to_state, topic, group, policy, attempt)
        counts = self._counts
        counts[key] = counts.get(key, 0) + n

    def observe_settle(self, policy: str, to_state: str, seconds: float) -> None:
        """A delivery settled after `seconds` (the engine's settle-latency hook)."""
        row = self._settles.get((policy, to_state))
        if row is None:
            row = self._settles[(policy, to_state)] = [0.0] * (len(SETTLE_BUCKETS) + 2)
        row[bisect.bisect_left(SETTLE_BUCKETS, seconds)] += 1
        row[-1] += seconds

    def observe_settles(self, policy: str, to_state: str, seconds: list[float]) -> None:
        """`observe_settle` for each of a batch settled alike (one call per batch)."""
        row = self._settles.get((policy, to_state))
        if row is None:
            row = self._settles[(policy, to_state)] = [0.0] * (len(SETTLE_BUCKETS) + 2)
        find = bisect.bisect_left
        for one in seconds:
            row[find(SETTLE_BUCKETS, one)] += 1
        row[-1] += sum(seconds)

    def bind(self, engine: EngineQueries, store_size: Callable[[], int],
             serving: Callable[[], bool] = lambda: True) -> None:
        self.serving.set_function(lambda: 1.0 if serving() else 0.0)
        self.inflight.set_function(engine.unsettled_count)
        self.timers.set_function(engine.pending_timers)
        self.store_bytes.set_function(store_size)
        self._consumers.engine = engine

    def watch_telemetry(self, dropped: Callable[[], Mapping[str, int]]) -> None:
        """Show `gateway_telemetry_dropped_total` by reason from `dropped` (the telemetry
        spool's `dropped_counts`); without it (no `--telemetry`) the metric has no samples."""
        self._telemetry.dropped = dropped

    def serve(self, host: str, port: int, tls: Any = None) -> int:
        """Serve /metrics on host:port (HTTPS with `tls`, an `ssl.SSLContext`); the port."""
        self._server, bound = serve_metrics(host, port, self.registry, tls)
        return bound

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


def _code_name(context: Any, default: str) -> str:
    """The status code a finished call's context holds, or `default` when none was set."""
    code = None
    with contextlib.suppress(Exception):
        code = context.code()
    if isinstance(code, grpc.StatusCode):
        return str(code.name)
    if isinstance(code, int):  # grpc.aio keeps the code's number
        return _CODE_NAMES.get(code, "UNKNOWN")
    return default


_CODE_NAMES: dict[int, str] = {int(c.value[0]): str(c.name) for c in grpc.StatusCode}


class TimingInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Counts every call by method and status code (`gateway_requests_total`), times unary
    calls, and keeps the number of open streaming calls by method."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(details)
        if handler is None:
            return handler
        method = details.method
        inner = inner_behaviour(handler)
        requests = self.metrics.requests
        histogram = self.metrics.latency.labels(method) if handler.unary_unary else None
        streaming = bool(handler.unary_stream or handler.stream_stream)
        open_streams = self.metrics.streams.labels(method) if streaming else None

        async def unary(request: Any, context: Any) -> Any:
            start = time.perf_counter()
            code = "UNKNOWN"
            try:
                response = await inner(request, context)
                code = _code_name(context, "OK")
                return response
            except BaseException as exc:
                code = _code_name(context, _failed(exc))
                raise
            finally:
                if histogram is not None:
                    histogram.observe(time.perf_counter() - start)
                requests.labels(method, code).inc()

        async def stream(request: Any, context: Any) -> Any:
            assert open_streams is not None
            open_streams.inc()
            code = "UNKNOWN"
            try:
                async for item in responses(inner, request, context):
                    yield item
                code = _code_name(context, "OK")
            except BaseException as exc:
                code = _code_name(context, _failed(exc))
                raise
            finally:
                open_streams.dec()
                requests.labels(method, code).inc()

        rebuilt: grpc.RpcMethodHandler = rebuild(handler, unary, stream)
        return rebuilt


def _failed(exc: BaseException) -> str:
    """The code of a call that ended with `exc` and no status set: a cancelled call (the client
    went away) or an error grpc reports as UNKNOWN."""
    return "CANCELLED" if isinstance(exc, asyncio.CancelledError) else "UNKNOWN"


def directory_size(path: str) -> int:
    import os

    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.path.getsize(os.path.join(root, name))
    return total


class _ConsumerCollector(Collector):
    """Push consumers connected now, by topic and group (labels capped), from the engine."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics
        self.engine: EngineQueries | None = None

    def describe(self) -> list[Any]:
        return [GaugeMetricFamily("gateway_consumers", "Push consumers connected",
                                  labels=["topic", "group"])]

    def collect(self) -> Iterator[Any]:
        family = GaugeMetricFamily("gateway_consumers", "Push consumers connected",
                                   labels=["topic", "group"])
        sums: dict[tuple[str, str], int] = {}
        states: list[Any] = []
        if self.engine is not None:
            # Read from the scrape thread while the event loop runs: a copy of the table.
            with contextlib.suppress(RuntimeError):
                states = self.engine.groups()
        for state in states:
            key = (self.metrics.topics(state.topic), self.metrics.groups(state.group))
            sums[key] = sums.get(key, 0) + state.consumers
        for (topic, group), n in sums.items():
            family.add_metric([topic, group], n)
        yield family


class _TelemetryCollector(Collector):
    """Telemetry events the spool lost, by reason, read from it at scrape time."""

    def __init__(self) -> None:
        self.dropped: Callable[[], Mapping[str, int]] | None = None

    @staticmethod
    def _family() -> CounterMetricFamily:
        return CounterMetricFamily(
            "gateway_telemetry_dropped", "Telemetry events the spool lost, by reason "
            "(buffer_full, disk_cap, write_failed, closed)", labels=["reason"])

    def describe(self) -> list[Any]:
        return [self._family()]

    def collect(self) -> Iterator[Any]:
        family = self._family()
        if self.dropped is not None:
            for reason, n in self.dropped().items():
                family.add_metric([reason], n)
        yield family


class _SettleCollector(Collector):
    """The settle-latency histogram, built from the engine's bucket counts at scrape time."""

    def __init__(self, settles: dict[tuple[str, str], list[float]]) -> None:
        self._settles = settles

    def describe(self) -> list[Any]:
        return [self._family()]

    @staticmethod
    def _family() -> HistogramMetricFamily:
        return HistogramMetricFamily(
            "gateway_settle_seconds", "From delivery to settlement, by policy and outcome",
            labels=["policy", "outcome"])

    def collect(self) -> Iterator[Any]:
        family = self._family()
        merged: dict[tuple[str, str], list[float]] = {}
        for (policy, to_state), row in list(self._settles.items()):
            key = (policy, SETTLE_OUTCOMES.get(to_state, to_state.lower()))
            total = merged.setdefault(key, [0.0] * len(row))
            for i, n in enumerate(list(row)):
                total[i] += n
        for (policy, outcome), row in merged.items():
            buckets, running = [], 0.0
            for bound, n in zip((*map(str, SETTLE_BUCKETS), "+Inf"), row[:-1], strict=True):
                running += n
                buckets.append((bound, running))
            family.add_metric([policy, outcome], buckets, row[-1])
        yield family


class _TransitionCollector(Collector):
    """The transition counters, built from the engine's counts at scrape time."""

    def __init__(self, counts: dict[tuple[str, str, str, str, int], int]) -> None:
        self._counts = counts

    def describe(self) -> list[Any]:
        return list(self._families({}))

    def collect(self) -> Iterator[Any]:
        # dict(...) copies in one step under the GIL while the event loop keeps counting.
        return iter(self._families(dict(self._counts)))

    @staticmethod
    def _families(counts: dict[tuple[str, str, str, str, int], int]) -> list[Any]:
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
            elif to in SETTLE_OUTCOMES:
                keys = [("settlements", (SETTLE_OUTCOMES[to], policy))]
                if to == "WAITING_RETRY":
                    keys.append(("retries", (str(attempt) if attempt >= 0 else OTHER, policy)))
                elif to == "DEAD_LETTERED":
                    keys.append(("dead", (topic, group)))
                elif to == "DISCARDED":
                    keys.append(("discards", (topic, group)))
            else:
                continue  # a transition that is no settlement (a publish, say): not counted here
            for key in keys:
                sums[key] = sums.get(key, 0) + n
        families = {"deliveries": deliveries, "settlements": settlements, "retries": retries,
                    "dead": dead, "discards": discards}
        for (name, labels), n in sums.items():
            families[name].add_metric(list(labels), n)
        return list(families.values())
