"""One AMQP 0-9-1 connection: the protocol header, negotiation (SASL PLAIN / AMQPLAIN, tuning,
the virtual host), heartbeats, the channel table and the close handshakes.

A protocol error on a channel closes that channel (`Channel.Close`); a hard error closes the
connection (`Connection.Close` with the code, the text and the failing method), after which
every frame but `Connection.Close` / `Close-Ok` is discarded, as the specification says. Nothing
a client sends raises out of here: what is not a protocol error is logged and answered with
INTERNAL_ERROR, and the gateway goes on serving everyone else.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import structlog
from pamqp import commands

from adapters.amqp.frontend import framing, negotiation, sasl
from adapters.amqp.frontend.channel import Channel
from adapters.amqp.frontend.context import Context
from adapters.amqp.frontend.errors import (
    ACCESS_REFUSED,
    CHANNEL_ERROR,
    COMMAND_INVALID,
    CONNECTION_FORCED,
    INTERNAL_ERROR,
    NOT_ALLOWED,
    NOT_IMPLEMENTED,
    UNEXPECTED_FRAME,
    AMQPError,
    short,
)
from adapters.amqp.frontend.flow import FlowControl
from adapters.amqp.frontend.framing import FrameReader
from adapters.amqp.frontend.queues import drop_exclusive
from gateway.errors import GatewayError

log = structlog.get_logger(__name__)

READ_TURN = 5_000
"""Units of work (`framing.work`, about a microsecond each) one connection's frames may take in
one turn of the event loop before the others are served."""

AWAIT_HEADER, AWAIT_START_OK, AWAIT_TUNE_OK, AWAIT_OPEN, OPEN, CLOSING, CLOSED = range(7)


class Connection(FlowControl, asyncio.Protocol):
    def __init__(self, ctx: Context, on_lost: Any) -> None:
        self.ctx = ctx
        self.id = next(ctx.connection_ids)
        self.limits = ctx.limits
        self._on_lost = on_lost
        self.transport: asyncio.Transport | None = None
        self.state = AWAIT_HEADER
        self.reader = FrameReader(negotiation.HANDSHAKE_FRAME_MAX)
        self.frame_max = ctx.limits.frame_max
        self.channel_max = ctx.limits.channel_max
        self.heartbeat_s = 0
        self.channels: dict[int, Channel] = {}
        self.principal: Any = None
        self.user = ""
        self.cancel_notify = False
        self.peer = ""
        self.writable = asyncio.Event()
        self.writable.set()
        self.last_read = self.last_write = time.monotonic()
        self.pending_publish_bytes = 0
        self.partial_content_bytes = 0
        """Body bytes of messages still arriving, on every channel (bounded: RESOURCE_ERROR)."""
        self._reading_paused = False
        self._admission = None
        self._unread = False
        """Frames read from the socket wait in the reader for a turn of their own."""
        self._turn: asyncio.Handle | None = None
        self._eof_sent = False
        self._backlogged = False
        """More than `write_backlog_bytes` wait to be sent: the client does not read."""
        self._header = bytearray()
        self._timers: list[asyncio.TimerHandle] = []
        self._heartbeat: asyncio.Task[None] | None = None
        self.closed = asyncio.Event()
        self._teardown: asyncio.Task[None] | None = None
        self._finishing: asyncio.Task[None] | None = None
        self.refuse = False
        """Set by the listener when it serves its most connections already."""
        self.settle_guard: Any = None
        """The principal's check for settling (None while authentication is off)."""

    # ------------------------------------------------------------------ transport
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        if self.refuse:
            self.state = CLOSED
            transport.close()
            return
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        loop = asyncio.get_running_loop()
        self._timers.append(loop.call_later(self.limits.handshake_timeout_s, self._handshake_due))

    def _handshake_due(self) -> None:
        if self.state < OPEN:
            log.info("amqp handshake timed out", peer=self.peer)
            self.abort()

    def write(self, data: bytes) -> None:
        """Frames to send; nothing once the connection is closing (after its connection.close
        only the close-ok may go out: `send`)."""
        if self.state < CLOSING:
            self._put([data])

    def write_backlog(self) -> int:
        """Bytes sent to the client and not yet taken by it."""
        transport = self.transport
        return 0 if transport is None else transport.get_write_buffer_size()

    def writelines(self, parts: list[bytes]) -> None:
        if self.state < CLOSING:
            self._put(parts)

    def _put(self, parts: list[bytes]) -> None:
        transport = self.transport
        if transport is not None and not transport.is_closing() and not self._eof_sent:
            transport.writelines(parts)
            self.last_write = time.monotonic()
            self._backlog_check(transport)

    def send(self, channel: int, method: Any) -> None:
        if self.state < CLOSING or (
            self.state == CLOSING and isinstance(method, commands.Connection.CloseOk)
        ):
            self._put([framing.method_frame(channel, method)])

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        self.state = CLOSED
        self.forget_room()
        self.writable.set()
        for timer in self._timers:
            timer.cancel()
        if self._turn is not None:
            self._turn.cancel()
        if self._heartbeat is not None:
            self._heartbeat.cancel()
        self._teardown = asyncio.ensure_future(self._tear_down())

    async def _release(self) -> None:
        for channel in list(self.channels.values()):
            await channel.tear_down()
        await drop_exclusive(self.ctx, self.id)
        self.ctx.topology.budget.forget(self.id)

    async def _tear_down(self) -> None:
        try:
            if self._finishing is not None:
                await asyncio.wait([self._finishing])  # the client's close, bounded
            await self._release()
            self.channels.clear()
        except Exception as exc:
            log.error("amqp connection teardown failed", error=str(exc), exc_info=True)
        finally:
            self.closed.set()
            self._on_lost(self)

    # ------------------------------------------------------------------ reading
    def data_received(self, data: bytes) -> None:
        self.last_read = time.monotonic()
        if self.state >= CLOSED:
            return
        if self.state == AWAIT_HEADER:
            data = self._protocol_header(data)
            if not data:
                return
        if self._unread:  # frames from before wait for their turn: these go behind them
            self.reader.keep(data)
            return
        self._read(data)

    def _read(self, data: bytes) -> None:
        """Read frames from what arrived (and what is buffered) for one turn: until
        `READ_TURN` units of work are spent, or the published bytes not yet stored pass their
        limit. What is left waits, the socket not read from, until the event loop has served
        everything else once (`_read_on`), or until enough is stored: a flood of header-heavy
        or tiny messages on one connection is decoded a slice at a time, never a whole socket
        read of it (256 KiB: a tenth of a second) in one go while other clients wait."""
        budget = READ_TURN
        frames = self.reader.feed(data)
        try:
            for incoming in frames:
                self._frame(incoming)
                if self.state == CLOSED:
                    return
                budget -= framing.work(incoming)
                if budget <= 0 or self._over():
                    self._unread = True
                    break
        except AMQPError as exc:
            self.fail(exc)
        except Exception as exc:  # a bug, not the client's fault: say so, serve on
            log.error("amqp frame handling failed", peer=self.peer, error=str(exc),
                      exc_info=True)
            self.fail(AMQPError(INTERNAL_ERROR, type(exc).__name__))
        finally:
            frames.close()  # what was not read stays buffered
        self._flow_check()

    def _read_on(self) -> None:
        self._turn = None
        if self.state < CLOSED and self._unread and not self._over():
            self._unread = False
            self._read(b"")

    def _protocol_header(self, data: bytes) -> bytes:
        self._header += data
        if len(self._header) < 8:
            return b""
        got, rest = bytes(self._header[:8]), bytes(self._header[8:])
        self._header.clear()
        if got != framing.PROTOCOL_HEADER:
            # The specification: answer with the protocol we speak, then close.
            self.write(framing.PROTOCOL_HEADER)
            self.state = CLOSED
            if self.transport is not None:
                self.transport.close()
            return b""
        self.state = AWAIT_START_OK
        self.send(0, commands.Connection.Start(
            version_major=0, version_minor=9, server_properties=negotiation.SERVER_PROPERTIES,
            mechanisms=" ".join(sasl.MECHANISMS), locales="en_US"))
        return rest

    def _frame(self, incoming: framing.Incoming) -> None:
        if isinstance(incoming, framing.Heartbeat):
            return
        if self.state == CLOSING:
            if isinstance(incoming, framing.Method) and incoming.channel == 0 and isinstance(
                incoming.method, commands.Connection.Close | commands.Connection.CloseOk
            ):
                self._closed_by_peer(incoming.method)
            return
        channel = incoming.channel
        if channel == 0:
            if not isinstance(incoming, framing.Method):
                raise AMQPError(UNEXPECTED_FRAME, "a content frame on channel 0")
            self._connection_method(incoming.method)
            return
        if self.state != OPEN:
            raise AMQPError(CHANNEL_ERROR, "no channel may be used before connection.open")
        open_channel = self.channels.get(channel)
        if open_channel is None and isinstance(incoming, framing.Method) and isinstance(
            incoming.method, commands.Channel.Open
        ):
            if len(self.channels) >= self.channel_max:  # RabbitMQ's rule: how many, any number
                raise AMQPError(NOT_ALLOWED, f"number of channels opened ({len(self.channels)}) "
                                f"has reached the negotiated channel_max ({self.channel_max})")
            self.channels[channel] = Channel(self, self.ctx, channel)
            self.send(channel, commands.Channel.OpenOk())
            return
        if open_channel is None:
            if not isinstance(incoming, framing.Method):  # RabbitMQ: a frame out of place
                raise AMQPError(UNEXPECTED_FRAME, "expected method frame, got non method "
                                                  "frame instead")
            raise AMQPError(CHANNEL_ERROR, "expected 'channel.open'", _ids(incoming.method))
        open_channel.frame(incoming)

    # ------------------------------------------------------------------ negotiation
    def _connection_method(self, method: Any) -> None:
        if isinstance(method, commands.Connection.Close):
            self._closed_by_peer(method)
        elif isinstance(method, commands.Connection.CloseOk):
            raise AMQPError(COMMAND_INVALID, "connection.close-ok without a close", (10, 51))
        elif isinstance(method, commands.Connection.StartOk) and self.state == AWAIT_START_OK:
            self._start_ok(method)
        elif isinstance(method, commands.Connection.TuneOk) and self.state == AWAIT_TUNE_OK:
            self._tune_ok(method)
        elif isinstance(method, commands.Connection.Open) and self.state == AWAIT_OPEN:
            self._open(method)
        elif isinstance(method, commands.Connection.UpdateSecret):
            raise AMQPError(NOT_IMPLEMENTED, "connection.update-secret", (10, 70))
        elif isinstance(method, commands.Connection.Blocked | commands.Connection.Unblocked):
            return  # a client's own flow notices: nothing to do
        else:
            raise AMQPError(CHANNEL_ERROR, f"unexpected method {method.name} in connection state "
                            f"{_STATES[self.state]}", _ids(method))

    def _start_ok(self, method: commands.Connection.StartOk) -> None:
        capabilities = (method.client_properties or {}).get("capabilities")
        if isinstance(capabilities, dict):
            self.cancel_notify = bool(capabilities.get("consumer_cancel_notify", False))
        user, password = sasl.credentials(method.mechanism, method.response)
        self.user = user
        authorizer = self.ctx.authorizer
        if authorizer is not None:
            try:
                principal = authorizer.authenticate(password)
            except GatewayError:
                principal = None
            if principal is None or principal.name != user:
                log.info("amqp login refused", peer=self.peer, user=short(user))
                raise AMQPError(ACCESS_REFUSED, f"login refused for user {short(user)}: the "
                                                "password must be that principal's token",
                                (10, 11))
            self.principal = principal
            self.settle_guard = authorizer.settle_guard(principal)
        self.state = AWAIT_TUNE_OK
        self.send(0, commands.Connection.Tune(
            channel_max=self.limits.channel_max, frame_max=self.limits.frame_max,
            heartbeat=self.limits.heartbeat_s))

    def _tune_ok(self, method: commands.Connection.TuneOk) -> None:
        self.frame_max, self.channel_max = negotiation.tuned(self.limits, method)
        self.reader.frame_max = self.frame_max
        self.heartbeat_s = method.heartbeat
        self.state = AWAIT_OPEN

    def _open(self, method: commands.Connection.Open) -> None:
        negotiation.check_vhost(method)
        self.state = OPEN
        for timer in self._timers:
            timer.cancel()
        self._timers.clear()
        self.send(0, commands.Connection.OpenOk())
        if self.heartbeat_s:
            self._heartbeat = asyncio.ensure_future(self._beat())
        log.info("amqp connection open", peer=self.peer, user=self.user, connection=self.id)

    async def _beat(self) -> None:
        """Send a heartbeat when nothing else went out for half the interval; drop a peer
        that sent nothing for two intervals (not counting the time it was not read from for
        flow control)."""
        interval = self.heartbeat_s
        while self.state == OPEN:
            await asyncio.sleep(interval / 2)
            now = time.monotonic()
            if self._reading_paused and not self._backlogged:
                # Not read from while its messages wait to be stored (flow control): its
                # heartbeats wait in the socket, it is not silent (as RabbitMQ pauses the
                # monitor of a blocked connection).
                self.last_read = now
            if now - self.last_read > 2 * interval:
                log.info("amqp heartbeat missed: closing", peer=self.peer)
                self.abort()
                return
            if now - self.last_write >= interval / 2:
                self.write(framing.HEARTBEAT_FRAME)

    # ------------------------------------------------------------------ closing
    def fail(self, exc: AMQPError) -> None:
        """Close the connection for a hard error (or the channel, for a soft one on it)."""
        if self.state in (CLOSING, CLOSED):
            return
        log.info("amqp connection error", peer=self.peer, code=exc.code, text=exc.text)
        class_id, method_id = exc.method
        self.send(0, commands.Connection.Close(reply_code=exc.code, reply_text=exc.reply_text,
                                               class_id=class_id, method_id=method_id))
        self._closing()
        transport = self.transport
        if self.reader.broken and transport is not None and transport.can_write_eof():
            # No close-ok can be told apart in a stream without frame boundaries: say that
            # nothing more comes (what the client sends is still read, and discarded).
            transport.write_eof()
            self._eof_sent = True

    def close(self, code: int = CONNECTION_FORCED, text: str = "the gateway is shutting down"
              ) -> None:
        """Close from the server's side (shutdown)."""
        if self.state == OPEN:
            self.fail(AMQPError(code, text))
        elif self.state != CLOSED:
            self.abort()

    def _closing(self) -> None:
        self.state = CLOSING
        self.forget_room()
        for channel in self.channels.values():
            channel.stop()
        loop = asyncio.get_running_loop()
        self._timers.append(loop.call_later(self.limits.close_timeout_s, self.abort))

    def _closed_by_peer(self, method: Any) -> None:
        if isinstance(method, commands.Connection.Close) and self.state == OPEN:
            # What the client sent before its close is carried out first (messages published
            # without confirms and then the connection closed are stored, as RabbitMQ does);
            # nothing after it is read, nothing but the close-ok is sent.
            self.state = CLOSING
            self._finishing = asyncio.ensure_future(self._finish_then_close())
            return
        self._end(close_ok=isinstance(method, commands.Connection.Close))

    def _end(self, *, close_ok: bool) -> None:
        """The close handshake is over: answer it (when it was the client's), drop what is
        still queued, close the socket."""
        if close_ok:
            self.send(0, commands.Connection.CloseOk())
        self.state = CLOSED
        for channel in self.channels.values():
            channel.stop()
        if self.transport is not None:
            self.transport.close()

    async def _finish_then_close(self) -> None:
        """The client's close: its queued work done, its consumers stopped, its unacknowledged
        deliveries given back and its exclusive queues gone (at most `close_timeout_s`), then the
        close-ok: once a client's close returns, what it held is available to others."""
        deadline = time.monotonic() + self.limits.close_timeout_s
        for channel in self.channels.values():
            channel.unstored = ""  # failures before the close were told (nack, channel.close)
        for channel in list(self.channels.values()):
            await channel.finish(deadline - time.monotonic())
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._release(), max(deadline - time.monotonic(), 0.001))
        if self.state != CLOSING:
            return
        unstored = next((c.unstored for c in self.channels.values() if c.unstored), "")
        if unstored:
            # A close-ok says that everything published before the close is stored: not so.
            text = f"messages published before the close were not stored: {unstored}"
            log.warning("amqp close refused", peer=self.peer, text=text)
            error = AMQPError(INTERNAL_ERROR, text)
            self._put([framing.method_frame(0, commands.Connection.Close(
                reply_code=error.code, reply_text=error.reply_text, class_id=0, method_id=0))])
        self._end(close_ok=not unstored)

    def channel_closed(self, number: int) -> None:
        self.channels.pop(number, None)

    def consumer_count(self) -> int:
        return sum(len(channel.consumers) for channel in self.channels.values())

    async def wait_closed(self) -> None:
        await self.closed.wait()
        if self._teardown is not None:
            with contextlib.suppress(Exception):
                await self._teardown


_STATES = {AWAIT_HEADER: "header", AWAIT_START_OK: "start", AWAIT_TUNE_OK: "tune",
           AWAIT_OPEN: "open", OPEN: "running", CLOSING: "closing", CLOSED: "closed"}


def _ids(method: Any) -> tuple[int, int]:
    index = int(getattr(method, "index", 0))
    return index >> 16, index & 0xFFFF
