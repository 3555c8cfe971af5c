"""Flow control of one AMQP connection: when it is not read from, and when it is read again.

A connection is not read from while its published messages not yet stored pass
`Limits.pending_publish_bytes`, while a message of it waits for room among every connection's
(`admission.PublishRoom`), while its client does not read what it is sent (returns, confirms,
get-oks: `Limits.write_backlog_bytes`), and while frames already read wait for their turn.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from adapters.amqp.frontend.context import Context, Limits


class FlowControl:
    """What `connection.Connection` does for flow control (mixed into it)."""

    ctx: Context
    limits: Limits
    transport: asyncio.Transport | None
    writable: asyncio.Event
    pending_publish_bytes: int
    _backlogged: bool
    _unread: bool
    _reading_paused: bool
    _turn: asyncio.Handle | None
    _admission: Callable[[], None] | None
    """A message of this connection waits for room (`admit`): what to do once it has it."""

    def _read_on(self) -> None:
        raise NotImplementedError

    def pause_writing(self) -> None:
        self.writable.clear()

    def resume_writing(self) -> None:
        self.writable.set()
        if self._backlogged:
            self._backlogged = False
            self._flow_check()

    def _backlog_check(self, transport: asyncio.Transport) -> None:
        """Stop reading from a client that does not read what it is sent (returns, confirms,
        get-oks): nothing it sends is read until the backlog drains below the low-water
        mark (`resume_writing`)."""
        if not self._backlogged and not self.writable.is_set() and (
            transport.get_write_buffer_size() > self.limits.write_backlog_bytes
        ):
            self._backlogged = True
            self._flow_check()

    def _over(self) -> bool:
        return self._backlogged or self._admission is not None or (
            self.pending_publish_bytes > self.limits.pending_publish_bytes)

    def _flow_check(self) -> None:
        """Stop reading while too many published bytes wait to be stored, or while frames
        already read wait for their turn; read on after."""
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        over = self._over()
        if self._unread and not over and self._turn is None:
            self._turn = asyncio.get_running_loop().call_soon(self._read_on)
        paused = over or self._unread
        if paused and not self._reading_paused:
            transport.pause_reading()
            self._reading_paused = True
        elif not paused and self._reading_paused:
            transport.resume_reading()
            self._reading_paused = False

    def admit(self, size: int, then: Callable[[], None]) -> None:
        """A published message of `size` bytes arrived whole: `then` (it is counted and
        queued) once there is room for it among every connection's messages not yet stored;
        until then nothing more is read from this connection."""
        if self.ctx.room.take(self, size):
            then()
        else:
            self._admission = then

    def admitted(self) -> None:
        then, self._admission = self._admission, None
        if then is not None:
            then()
        self._flow_check()

    def forget_room(self) -> None:
        """The connection closes: a message of it waits for room no more."""
        self._admission = None
        self.ctx.room.cancel(self)

    def published(self, size: int) -> None:
        """`size` published bytes were stored (or given up): read on if reading was paused."""
        self.pending_publish_bytes = max(self.pending_publish_bytes - size, 0)
        self.ctx.room.give(size)
        self._flow_check()
