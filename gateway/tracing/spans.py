"""OpenTelemetry spans for every message: publish, deliver, settle, retry scheduled, dead-lettered.

Imported only when tracing is on (`[tracing] enabled`): a gateway without it never loads the
OpenTelemetry SDK. `Tracing` is an engine observer (`gateway.engine.observe`):

* **publish** — one span per message, from the call until the batch is durable, a child of the
  message's own trace context (a `traceparent` its publisher gave) or the root of a new trace.
  The message is stored with the publish span's context as its `traceparent`, so every later
  span of the message, and its consumers' spans, belong to that trace, under that span.
* **deliver** — each delivery (attempt n), a child of the message's context. Its span id is
  derived from the message's context, id, group and attempt, so the spans of a settlement can
  name it as their parent and a retry's delivery can link to the first delivery without the
  gateway keeping any state: every delivery after the first links to the first.
* **settle** — the delivery's outcome (ack, retry, dead letter, discard, released; a timeout
  too), a child of its delivery.
* **retry scheduled** / **dead-lettered** — what the state machine decided, with the delay and
  the destination, children of the delivery that failed (or of the message, when no delivery
  was involved).

A message stored without a valid context (published with tracing off, or by a broker's own
client) gets a trace id derived from its message id, so its spans still form one trace.
Spans of the engine's transitions are instants at the transition's time.
"""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.sdk.trace.id_generator import IdGenerator, RandomIdGenerator
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
from opentelemetry.trace import Link, NonRecordingSpan, SpanContext, SpanKind, TraceFlags
from opentelemetry.trace.span import TraceState
from opentelemetry.trace.status import Status, StatusCode

from gateway.backend import OutMessage
from gateway.core.properties import TRACEPARENT, TRACESTATE
from gateway.engine.observe import PublishDone, Transition
from gateway.tracing.context import parse, valid_tracestate

SYSTEM = "retry-gateway"
"""`messaging.system` of the gateway's spans."""
PREFIX = "retry_gateway."
"""Prefix of the gateway's own span attributes."""
OUTCOMES = {"COMMITTED": "ack", "WAITING_RETRY": "retry", "DEAD_LETTERED": "dead_letter",
            "DISCARDED": "discard", "READY": "released"}
"""A settlement's `retry_gateway.outcome` by the state it led to."""
INFLIGHT = "INFLIGHT"


class _Ids(IdGenerator):
    """Random ids, except the next one when the tracer asks for a given id (`force`)."""

    def __init__(self) -> None:
        self._random = RandomIdGenerator()
        self.span_id = 0
        self.trace_id = 0
        self._last_forced = False

    def generate_span_id(self) -> int:
        span_id, self.span_id = self.span_id, 0
        return span_id or self._random.generate_span_id()

    def generate_trace_id(self) -> int:
        trace_id, self.trace_id = self.trace_id, 0
        self._last_forced = bool(trace_id)
        return trace_id or self._random.generate_trace_id()

    def is_trace_id_random(self) -> bool:
        return not self._last_forced


_MEMBER = re.compile(r"[a-z0-9][a-z0-9_\-*/@]{0,255}=[\x20-\x2b\x2d-\x3c\x3e-\x7e]{0,255}"
                     r"[\x21-\x2b\x2d-\x3c\x3e-\x7e]")


def _well_formed(tracestate: str) -> bool:
    """A `tracestate` whose list members are all W3C-shaped (OpenTelemetry logs a warning for
    each one that is not: a client must not be able to fill the log)."""
    if not tracestate or len(tracestate) > 512:
        return False
    members = [m.strip(" \t") for m in tracestate.split(",")]
    return all(_MEMBER.fullmatch(m) for m in members if m)


def _hash(size: int, *parts: object) -> int:
    digest = hashlib.blake2b("\0".join(map(str, parts)).encode(), digest_size=size).digest()
    return int.from_bytes(digest, "big") or 1


def _ns(ms: int) -> int:
    return ms * 1_000_000


def header(context: SpanContext) -> str:
    """The `traceparent` of a span context."""
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"


class Tracing:
    """The gateway's tracer: an engine observer making the spans of every message (see the
    module docstring). `processor` replaces the batch exporter (tests: a simple processor over
    the SDK's in-memory exporter)."""

    def __init__(
        self,
        exporter: SpanExporter | None = None,
        *,
        processor: SpanProcessor | None = None,
        service_name: str = SYSTEM,
        gateway_id: str = "gateway",
        sample_ratio: float = 1.0,
    ) -> None:
        self._ids = _Ids()
        self._bound = TraceIdRatioBased.get_bound_for_rate(sample_ratio)
        self.provider = TracerProvider(
            resource=Resource.create({"service.name": service_name,
                                      "service.instance.id": gateway_id}),
            sampler=ParentBased(TraceIdRatioBased(sample_ratio)),
            id_generator=self._ids,
        )
        if processor is None:
            if exporter is None:
                raise ValueError("an exporter or a span processor is needed")
            processor = BatchSpanProcessor(exporter)
        self.provider.add_span_processor(processor)
        self.tracer = self.provider.get_tracer("retry_gateway")

    def close(self) -> None:
        """Export what is pending and stop (blocking: run it off the event loop)."""
        self.provider.shutdown()

    # ------------------------------------------------------------- contexts
    def _message_context(self, traceparent: str, tracestate: str,
                         message_id: str) -> tuple[int, int, TraceFlags, Context | None]:
        """(trace id, parent span id or 0, the trace's flags, the context spans of the message
        start in: None for a message without a valid context, whose spans are roots)."""
        parent = parse(traceparent)
        if parent is None:
            trace_id = _hash(16, "trace", message_id)
            sampled = (trace_id & TraceIdRatioBased.TRACE_ID_LIMIT) < self._bound
            return trace_id, 0, TraceFlags(TraceFlags.SAMPLED if sampled else 0), None
        state = TraceState.from_header([tracestate]) if _well_formed(tracestate) else None
        span_context = SpanContext(int(parent.trace_id, 16), int(parent.span_id, 16),
                                   is_remote=True, trace_flags=TraceFlags(parent.flags),
                                   trace_state=state)
        return (span_context.trace_id, span_context.span_id, span_context.trace_flags,
                trace.set_span_in_context(NonRecordingSpan(span_context)))

    @staticmethod
    def _delivery_id(trace_id: int, parent_id: int, t: Transition, attempt: int) -> int:
        return _hash(8, trace_id, parent_id, t.message_id, t.group, attempt)

    def _start(self, name: str, context: Context | None, trace_id: int, span_id: int,
               ts_ms: int, attributes: dict[str, Any], links: Sequence[Link] = (),
               kind: SpanKind = SpanKind.INTERNAL) -> Any:
        if context is None:
            self._ids.trace_id = trace_id
        self._ids.span_id = span_id
        return self.tracer.start_span(name, context=context, kind=kind, attributes=attributes,
                                      links=links, start_time=_ns(ts_ms))

    # --------------------------------------------------------------- publish
    def on_publish(
        self, topic: str, messages: Sequence[OutMessage]
    ) -> tuple[Sequence[OutMessage], PublishDone]:
        start = time.time_ns()
        spans = []
        out: list[OutMessage] = []
        for message in messages:
            props = message.properties
            parent = parse(props.get(TRACEPARENT))
            context = None
            if parent is not None:
                _, _, _, context = self._message_context(
                    props.get(TRACEPARENT, ""), props.get(TRACESTATE, ""), "")
            span = self.tracer.start_span(
                f"publish {topic}", context=context, kind=SpanKind.PRODUCER, start_time=start,
                attributes={"messaging.system": SYSTEM, "messaging.destination.name": topic,
                            "messaging.operation.type": "send",
                            "messaging.operation.name": "publish"})
            spans.append(span)
            new = dict(props)
            new[TRACEPARENT] = header(span.get_span_context())
            if parent is None or not valid_tracestate(new.get(TRACESTATE, "")):
                new.pop(TRACESTATE, None)
            out.append(replace(message, properties=new))

        def done(ids: Sequence[str] | None) -> None:
            end = time.time_ns()
            for i, span in enumerate(spans):
                if ids is None:
                    span.set_status(Status(StatusCode.ERROR, "not stored"))
                elif i < len(ids):
                    span.set_attribute("messaging.message.id", ids[i])
                span.end(end_time=end)

        return out, done

    # ----------------------------------------------------------- transitions
    def on_transition(self, t: Transition) -> None:
        to, before = t.to_state, t.from_state
        if to == INFLIGHT and before == INFLIGHT:
            return  # a new invisible duration: no span
        trace_id, parent_id, flags, context = self._message_context(
            t.traceparent, t.tracestate, t.message_id)
        base: dict[str, Any] = {
            "messaging.system": SYSTEM, "messaging.destination.name": t.topic,
            "messaging.consumer.group.name": t.group, "messaging.message.id": t.message_id,
            PREFIX + "attempt": t.attempt, PREFIX + "policy": t.policy,
            PREFIX + "dialect": t.dialect, PREFIX + "backend": t.backend,
        }
        if to == INFLIGHT:
            links = []
            if t.attempt > 1:
                first = SpanContext(trace_id, self._delivery_id(trace_id, parent_id, t, 1),
                                    is_remote=False, trace_flags=flags)
                links.append(Link(first, {PREFIX + "link": "first delivery"}))
            span = self._start(f"deliver {t.topic}", context, trace_id,
                               self._delivery_id(trace_id, parent_id, t, t.attempt), t.ts_ms,
                               {**base, "messaging.operation.type": "receive",
                                "messaging.operation.name": "deliver"},
                               links, SpanKind.PRODUCER)
            span.end(end_time=_ns(t.ts_ms))
            return
        if before == INFLIGHT:
            # The spans of a settlement are children of the delivery they settle.
            delivery = SpanContext(trace_id, self._delivery_id(trace_id, parent_id, t, t.attempt),
                                   is_remote=False, trace_flags=flags)
            context = trace.set_span_in_context(NonRecordingSpan(delivery))
            span = self._start(f"settle {t.topic}", context, trace_id, 0, t.ts_ms,
                               {**base, "messaging.operation.type": "settle",
                                "messaging.operation.name": "settle",
                                PREFIX + "outcome": OUTCOMES.get(to, to.lower()),
                                PREFIX + "reason": t.reason})
            span.end(end_time=_ns(t.ts_ms))
        if to == "WAITING_RETRY":
            name, extra = "retry scheduled", {PREFIX + "delay_ms": t.delay_ms,
                                              PREFIX + "destination": t.destination,
                                              PREFIX + "reason": t.reason}
        elif to == "DEAD_LETTERED":
            name, extra = "dead-lettered", {PREFIX + "destination": t.destination,
                                            PREFIX + "reason": t.reason}
        else:
            return
        span = self._start(f"{name} {t.topic}", context, trace_id, 0, t.ts_ms, {**base, **extra})
        span.end(end_time=_ns(t.ts_ms))
