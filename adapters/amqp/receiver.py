"""A buffered frame receiver for aiormq connections: one socket read, every frame in it.

aiormq's own `FrameReceiver` reads each frame with three awaited reads under a lock, into a
`BytesIO`: about a third of the gateway's CPU on a busy RabbitMQ consumer, three frames a message.
`BufferedFrameReceiver` reads what the socket has (up to `READ_SIZE`), splits every complete frame
out of it and hands them out one by one without another read, each decoded into what aiormq's
`pamqp.frame.unmarshal` gives (`wire.unmarshal`: the same `(bytes, channel, frame)` triple). What it
does at the edges is aiormq's too: end of stream between frames ends the iteration, in the middle
of one raises `AMQPConnectionError`, as do socket errors; a server that answers with a protocol
header raises `ProtocolSyntaxError`; an undecodable frame raises `InvalidFrameError`.

`install()` makes aiormq's connections use it (aiormq looks the class up by name when a connection
opens). `aiormq.connection.FrameReceiver` stays the reference the tests compare it against.
"""

from __future__ import annotations

import asyncio
import struct
from collections import deque

import aiormq.connection
from aiormq.exceptions import AMQPConnectionError, InvalidFrameError, ProtocolSyntaxError
from pamqp.exceptions import PAMQPException

from adapters.amqp import wire
from adapters.amqp.wire import Received

READ_SIZE = 256 * 1024
_HEAD = struct.Struct(">BHI")
_REFERENCE = aiormq.connection.FrameReceiver


class BufferedFrameReceiver(_REFERENCE):
    """aiormq's frame receiver, reading the socket in large pieces."""

    def __init__(self, reader: asyncio.StreamReader) -> None:
        super().__init__(reader)
        self._frames: deque[Received] = deque()
        self._partial = bytearray()
        """The start of a frame not complete yet (appended to as pieces come: no copying of
        everything so far on every read, however large the frame)."""
        self._error: BaseException | None = None
        """What went wrong after the queued frames: raised once they are handed out."""

    async def get_frame(self) -> Received:
        if self._frames:
            return self._frames.popleft()
        if self._error is not None:
            raise self._error
        while True:
            if not self._partial and self.reader.at_eof():
                raise StopAsyncIteration
            data = await self._read()
            if self._partial:
                self._partial += data
                if not self._complete():
                    continue
                data, self._partial = bytes(self._partial), bytearray()
            try:
                self._split(data)
            except (ProtocolSyntaxError, InvalidFrameError) as exc:
                self._error = exc
            if self._frames:
                return self._frames.popleft()
            if self._error is not None:
                raise self._error

    async def _read(self) -> bytes:
        try:
            data = await self.reader.read(READ_SIZE)
        except ConnectionRefusedError as exc:
            raise AMQPConnectionError(f"Server connection refused: {exc!r}") from exc
        except ConnectionResetError as exc:
            raise AMQPConnectionError(f"Server connection reset: {exc!r}") from exc
        except ConnectionError as exc:
            raise AMQPConnectionError(f"Server connection error: {exc!r}") from exc
        except OSError as exc:
            raise AMQPConnectionError(f"Server communication error: {exc!r}") from exc
        if not data:
            raise AMQPConnectionError(
                "Server connection unexpectedly closed. "
                f"Read {len(self._partial)} bytes of an incomplete frame"
            )
        return data

    def _complete(self) -> bool:
        """Whether the frame begun in `_partial` has all arrived."""
        partial = self._partial
        return len(partial) >= 7 and len(partial) >= 8 + _HEAD.unpack_from(partial, 0)[2]

    def _split(self, data: bytes) -> None:
        """Queue every complete frame of `data`; keep the incomplete rest."""
        pos, length = 0, len(data)
        while length - pos >= 7:
            if not self.started:
                if data.startswith(b"AMQP", pos):
                    raise ProtocolSyntaxError("Unexpected AMQP protocol header")
                self.started = True
            _, _, size = _HEAD.unpack_from(data, pos)
            end = pos + 8 + size
            if end > length:
                break
            try:
                self._frames.append(wire.unmarshal(data[pos:end]))
            except PAMQPException as exc:
                raise InvalidFrameError(str(exc)) from exc
            pos = end
        if pos < length:
            self._partial = bytearray(data[pos:])


def install() -> None:
    """Make every aiormq connection opened from now on read with `BufferedFrameReceiver`."""
    aiormq.connection.FrameReceiver = BufferedFrameReceiver  # type: ignore[misc]
