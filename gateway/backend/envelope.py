"""What a broker-backed back end reads back from one broker message: the gateway's fields.

A back end on a broker writes a message's gateway fields (stable id, key, tag, times, counters)
into the broker's own properties or headers, each in the broker's shape, and its codec reads them
back into this one value. The counters are as the message states them: each back end reconciles
the attempt with the broker's own delivery evidence before the engine sees it.
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.backend.base import OutMessage, Release


@dataclass(frozen=True, slots=True)
class Envelope:
    """The gateway fields of one received broker message (counters not yet reconciled)."""

    message_id: str
    properties: dict[str, str]
    """The message's own properties, reserved `x-gateway-*` ones included."""
    key: str
    tag: str
    publish_ms: int
    deliver_at_ms: int
    stated_attempt: int = 0
    """Deliveries before this copy was published, as the copy states (0 when it does not)."""
    retries: int = 0
    """Failures counted before this copy was published, as the copy states."""

    def released_copy(self, body: bytes, release: Release, now_ms: int) -> OutMessage:
        """The copy a broker-backed back end publishes to give this message back: its fields
        with the release's counters, visible at the release's time (at once if that has come)."""
        return OutMessage(
            body=body,
            properties=self.properties,
            key=self.key,
            tag=self.tag,
            deliver_at_ms=release.visible_at_ms if release.visible_at_ms > now_ms else 0,
            message_id=self.message_id,
            attempt=release.attempt,
            retries=release.retries,
        )
