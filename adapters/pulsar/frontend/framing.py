"""A frame's body read in chunks, with what incomplete frames hold counted across the listener.

The read budget (`budget`) charges a frame once it is whole; until then its bytes sit in the
connection. So that clients announcing large frames and sending all but their last bytes cannot
hold memory without bound (1000 connections x the frame limit), the bytes of incomplete frames
are counted against `PartialFrames.limit` (4 x the read budget by default): a connection whose
incomplete frame would pass it is closed (logged at info, naming the cap). The chunk that
completes a frame is never counted, so complete frames, of any connection, are never refused.
A frame must also complete within `deadline_s` of its size being read (twice the keepalive
interval), else its connection is closed.
"""

from __future__ import annotations

import asyncio

import structlog

log = structlog.get_logger(__name__)

CHUNK_BYTES = 256 * 1024
"""Most bytes taken from the socket buffer at once while a frame is read."""
PARTIAL_FACTOR = 4
"""The default cap on incomplete frames, in read budgets."""


class PartialFrames:
    """Bytes of incomplete frames held across one listener's connections."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0

    def take(self, size: int) -> bool:
        """Hold `size` more; False (nothing held) when that would pass the limit."""
        if self.used + size > self.limit:
            return False
        self.used += size
        return True

    def give(self, size: int) -> None:
        self.used -= size


class FrameAbandoned(ConnectionError):
    """The frame passed the cap or its deadline: the connection is to be closed."""


async def read_body(
    reader: asyncio.StreamReader, size: int, partial: PartialFrames, deadline_s: float,
    connection: int,
) -> bytes:
    """The `size` bytes of a frame's body (see the module); raises FrameAbandoned, or
    IncompleteReadError when the client closes first. A frame already whole in the socket's
    buffer (most are) is taken in one read, without a timer: the first read waits at most as
    long as the connection's idle check allows (no whole frame for twice the keepalive)."""
    first = await reader.read(min(size, CHUNK_BYTES))
    if len(first) == size:
        return first
    if not first:
        raise asyncio.IncompleteReadError(b"", size)
    body = bytearray()
    held = 0
    if not partial.take(len(first)):
        log.info("pulsar incomplete frames over the listener's cap, closing",
                 connection=connection, cap_bytes=partial.limit, frame_bytes=size)
        raise FrameAbandoned("incomplete frames over the cap")
    held = len(first)
    body += first
    try:
        async with asyncio.timeout(deadline_s):
            while len(body) < size:
                chunk = await reader.read(min(size - len(body), CHUNK_BYTES))
                if not chunk:
                    raise asyncio.IncompleteReadError(bytes(body), size)
                if len(body) + len(chunk) < size:  # still incomplete: counted
                    if not partial.take(len(chunk)):
                        log.info("pulsar incomplete frames over the listener's cap, closing",
                                 connection=connection, cap_bytes=partial.limit,
                                 frame_bytes=size)
                        raise FrameAbandoned("incomplete frames over the cap")
                    held += len(chunk)
                body += chunk
    except TimeoutError:
        log.info("pulsar frame not completed in time, closing", connection=connection,
                 deadline_s=deadline_s, frame_bytes=size, received=len(body))
        raise FrameAbandoned("frame not completed in time") from None
    finally:
        partial.give(held)
    return bytes(body)
