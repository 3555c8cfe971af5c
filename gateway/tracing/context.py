"""The W3C trace context of a message: parsing, and carrying it into a message's properties.

Pure and free of OpenTelemetry: front ends use it whether tracing is on or off. A message's
context lives in its properties `traceparent` / `tracestate` (`gateway.core.properties`); each
front end maps its own carrier into them at its edge (`carry`) and out again on delivery.

A `traceparent` that is not valid is not a trace context (the W3C rule: a receiver that cannot
parse it ignores it): `carry` does not copy it, and the spans of a message that holds one start
a trace of their own.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, MutableMapping
from dataclasses import dataclass

from gateway.core.properties import TRACEPARENT, TRACESTATE

MAX_TRACESTATE_CHARS = 512
"""Longest `tracestate` carried (the W3C asks to propagate at least 512 characters); a longer
one is dropped, its `traceparent` kept."""
_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?")
_TRACESTATE = re.compile(r"[\x20-\x7e]*")
_ZERO_TRACE = "0" * 32
_ZERO_SPAN = "0" * 16


@dataclass(frozen=True, slots=True)
class TraceParent:
    """A valid `traceparent`, in parts (hex text)."""

    trace_id: str
    span_id: str
    flags: int

    @property
    def sampled(self) -> bool:
        return bool(self.flags & 1)

    def header(self) -> str:
        return f"00-{self.trace_id}-{self.span_id}-{self.flags:02x}"


def parse(value: object) -> TraceParent | None:
    """The trace context `value` holds, or None when it is not a valid `traceparent`
    (version `ff`, an all-zero id, the wrong shape; a version 00 one with trailing parts)."""
    if not isinstance(value, str) or len(value) > 512:
        return None
    match = _TRACEPARENT.fullmatch(value)
    if match is None:
        return None
    version, trace_id, span_id, flags, rest = match.groups()
    if version == "ff" or (version == "00" and rest) or trace_id == _ZERO_TRACE \
            or span_id == _ZERO_SPAN:
        return None
    return TraceParent(trace_id, span_id, int(flags, 16))


def valid_tracestate(value: object) -> bool:
    """True for a `tracestate` the gateway carries: printable ASCII of at most 512 characters."""
    return (isinstance(value, str) and len(value) <= MAX_TRACESTATE_CHARS
            and _TRACESTATE.fullmatch(value) is not None)


def carry(properties: MutableMapping[str, str], traceparent: object,
          tracestate: object = "") -> bool:
    """Put a carrier's trace context into `properties` when it is valid and the message has no
    valid one of its own (the message's own comes first); True when it was put."""
    if parse(traceparent) is None or parse(properties.get(TRACEPARENT)) is not None:
        return False
    properties[TRACEPARENT] = str(traceparent)
    if tracestate and valid_tracestate(tracestate):
        properties[TRACESTATE] = str(tracestate)
    else:
        properties.pop(TRACESTATE, None)
    return True


def with_carrier(properties: Mapping[str, str], traceparent: object,
                 tracestate: object = "") -> Mapping[str, str]:
    """`properties` itself, or a copy holding the carrier's trace context when `carry` puts it
    there (the caller's mapping is never changed)."""
    if parse(traceparent) is None or parse(properties.get(TRACEPARENT)) is not None:
        return properties
    copy = dict(properties)
    carry(copy, traceparent, tracestate)
    return copy


def from_metadata(metadata: Iterable[tuple[str, str | bytes]] | None) -> tuple[str, str]:
    """(traceparent, tracestate) from call metadata (gRPC headers); "" for what is absent.
    Several `tracestate` headers are joined with commas, as the W3C allows."""
    traceparent = ""
    states: list[str] = []
    for key, value in metadata or ():
        if isinstance(value, bytes):
            continue
        if key == TRACEPARENT and not traceparent:
            traceparent = value
        elif key == TRACESTATE:
            states.append(value)
    return traceparent, ",".join(states)
