"""One AMQP channel: content assembly, the ordered work queue, acknowledgements, flow and
prefetch, and closing.

Methods run in the order they arrived, one at a time, on the channel's worker (a declare is
answered before the publish that follows it is routed); runs of publishes are stored as one
batch and confirmed together. Acknowledgements take a shorter way: the delivery tags are settled
at once (so prefetch frees up at once) and the engine is told in batches by a settler.
A channel error closes the channel (`Channel.Close`), whose frames are then discarded until the
client's `Close-Ok`; a hard error closes the connection. An error found as its frame arrives
(an unknown delivery tag, bad content, a refused method) waits behind the methods queued before
it, as RabbitMQ does them in order. As in RabbitMQ, a `channel.open` on a
channel that is open or closing is a connection error (504 CHANNEL_ERROR) in its turn: after
the answers to the methods before it, and after the channel's close while that awaits its
close-ok (the specification would discard it; RabbitMQ does not).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import structlog
from pamqp import commands

from adapters.amqp.frontend import framing, handlers, replyto, txn
from adapters.amqp.frontend.context import Context
from adapters.amqp.frontend.errors import (
    CHANNEL_ERROR,
    COMMAND_INVALID,
    INTERNAL_ERROR,
    NOT_IMPLEMENTED,
    PRECONDITION_FAILED,
    RESOURCE_ERROR,
    UNEXPECTED_FRAME,
    AMQPError,
    from_gateway,
)
from adapters.amqp.frontend.ports import ConnectionPort
from adapters.amqp.frontend.publishing import Publish, header_values, next_batch, publish_batch
from adapters.amqp.frontend.state import ChannelState, top_up_queue
from gateway.errors import GatewayError

log = structlog.get_logger(__name__)
HEADER_FACTOR = 8
HEADER_COST = 256
"""What a published message's properties count against the connection's pending publish bytes:
`HEADER_FACTOR` times their bytes on the wire, and `HEADER_COST` bytes per header value (nested
ones included), about what
they take in memory until the message is stored (decoded values, their text copies, the typed
copy: a byte array that is not UTF-8 grows threefold as text, an array of voids tenfold)."""

PUBLISH = (60, 40)
OPEN = (20, 10)
SECOND_OPEN = "second 'channel.open' seen"


def properties_cost(header_size: int, properties: commands.Basic.Properties) -> int:
    """What a content header's properties count as bytes held: `HEADER_FACTOR` times their
    bytes on the wire and `HEADER_COST` per header value."""
    return HEADER_FACTOR * header_size + HEADER_COST * header_values(properties)


CLIENT_METHODS = (
    commands.Channel.Flow, commands.Channel.FlowOk, commands.Channel.Close,
    commands.Channel.CloseOk, commands.Exchange.Declare, commands.Exchange.Delete,
    commands.Exchange.Bind, commands.Exchange.Unbind, commands.Queue.Declare,
    commands.Queue.Bind, commands.Queue.Unbind, commands.Queue.Purge, commands.Queue.Delete,
    commands.Basic.Qos, commands.Basic.Consume, commands.Basic.Cancel, commands.Basic.Publish,
    commands.Basic.Get, commands.Basic.Ack, commands.Basic.Reject, commands.Basic.Nack,
    commands.Basic.Recover, commands.Confirm.Select,
)


@dataclass(slots=True)
class _Content:
    method: commands.Basic.Publish
    body_size: int = -1
    properties: commands.Basic.Properties | None = None
    parts: list[bytes] = field(default_factory=list)
    received: int = 0
    header_size: int = 0
    held: int = 0
    """What its properties count against the connection's content still arriving."""


@dataclass(slots=True)
class _Failure:
    """A channel error found on arrival, raised in its turn in the work queue."""

    exc: AMQPError


class Channel(ChannelState):
    def __init__(self, conn: ConnectionPort, ctx: Context, number: int) -> None:
        super().__init__(conn, ctx, number)
        self._content: _Content | None = None
        self._work: deque[Any] = deque()
        self._worker: asyncio.Task[None] | None = None
        self._torn = False
        self._teardown_task: asyncio.Future[None] | None = None
        self._failing = False
        """A channel error waits in the work queue behind the methods before it."""

    # ------------------------------------------------------------------ frames
    def frame(self, incoming: framing.Incoming) -> None:
        if self._failing:
            # A channel error waits behind the methods before it: what follows is discarded,
            # but for the methods a closing channel still answers (handled in `close_with`).
            if isinstance(incoming, framing.Method) and isinstance(
                incoming.method, commands.Channel.Close | commands.Channel.Open
            ):
                self._work.append(incoming.method)
            return
        if self.closing:
            if isinstance(incoming, framing.Method):
                if isinstance(incoming.method, commands.Channel.CloseOk):
                    self.conn.channel_closed(self.number)
                elif isinstance(incoming.method, commands.Channel.Close):
                    self.conn.send(self.number, commands.Channel.CloseOk())
                elif isinstance(incoming.method, commands.Channel.Open):
                    self._reopen()
            return
        try:
            if self._content is not None:
                self._content_frame(incoming)
            elif isinstance(incoming, framing.Method):
                self._method(incoming.method)
            else:
                raise AMQPError(UNEXPECTED_FRAME, "expected method frame, got non method frame "
                                                  "instead")
        except AMQPError as exc:
            if isinstance(incoming, framing.Method):
                exc.at(_ids(incoming.method))
            if self._work or (self._worker is not None and not self._worker.done()):
                # As in RabbitMQ, the methods that came before it are done first (publishes
                # stored and confirmed); then the channel (or, for a hard error, the
                # connection) closes.
                self._failing = True
                self._enqueue(_Failure(exc))
                return
            if exc.hard:
                raise
            self.close_with(exc)

    def _reopen(self) -> None:
        """A `channel.open` while the channel closes: behind the client's close when that still
        waits its turn, else at once (the server's close awaits its close-ok)."""
        if self._work:
            self._work.append(commands.Channel.Open())
            return
        raise AMQPError(CHANNEL_ERROR, SECOND_OPEN, OPEN)

    def _content_frame(self, incoming: framing.Incoming) -> None:
        try:
            self._content_part(incoming)
        except AMQPError:
            self._drop_content()
            raise

    def _drop_content(self) -> None:
        """Forget a message still arriving (its channel or connection failed or closes)."""
        if self._content is not None:
            held = self._content.received + self._content.held
            self.conn.partial_content_bytes -= held
            self.ctx.partial_bytes -= held
            self._content = None

    def _content_part(self, incoming: framing.Incoming) -> None:
        content = self._content
        assert content is not None
        if content.body_size < 0:
            if not isinstance(incoming, framing.ContentHeader) or incoming.class_id != 60 or (
                incoming.weight  # RabbitMQ's answer to a weight other than 0 too
            ):
                raise AMQPError(UNEXPECTED_FRAME, "expected content header for class 60, got "
                                                  "non content header frame instead", PUBLISH)
            limit = self.ctx.limits.max_message_bytes
            if incoming.body_size > limit:
                raise AMQPError(PRECONDITION_FAILED, f"message size {incoming.body_size} is "
                                                     f"larger than configured max size {limit}",
                                PUBLISH)
            # Its properties are held from now on, decoded, until the body is complete: they
            # count against the content still arriving, at what they take in memory.
            held = properties_cost(incoming.size, incoming.properties)
            self._reserve(held, completes=incoming.body_size == 0)
            content.body_size = incoming.body_size
            content.properties = incoming.properties
            content.header_size = incoming.size
            content.held = held
        elif isinstance(incoming, framing.Body):
            size = len(incoming.payload)
            if content.received + size > content.body_size:
                raise AMQPError(UNEXPECTED_FRAME, f"content body larger than the declared "
                                                  f"{content.body_size} bytes", PUBLISH)
            self._reserve(size, completes=content.received + size == content.body_size)
            content.parts.append(incoming.payload)
            content.received += size
        else:
            raise AMQPError(UNEXPECTED_FRAME, "expected content body, got non content body "
                                              "frame instead", PUBLISH)
        if content.received == content.body_size:
            self._drop_content()
            body = content.parts[0] if len(content.parts) == 1 else b"".join(content.parts)
            properties = content.properties or commands.Basic.Properties()
            # Headers count too, at what they take in memory once decoded (far more than on the
            # wire): a flood of header-heavy messages is held back like one of large bodies.
            cost = len(body) + content.held
            publish = Publish(content.method, properties, body, cost, content.header_size)
            self.conn.admit(cost, lambda: self._admitted(publish))

    def _admitted(self, publish: Publish) -> None:
        """A message that arrived whole has room among those not yet stored: queue it."""
        self.conn.pending_publish_bytes += publish.cost
        if self.closing:  # closed while it waited for room: dropped, as what was queued
            self.conn.published(publish.cost)
            return
        self._enqueue(publish)

    def _reserve(self, size: int, *, completes: bool = False) -> None:
        """Count `size` bytes more of messages still arriving; past the connection's limit, or
        past the listener's (`Limits.total_partial_bytes`) with a frame that does not complete
        its message, RESOURCE_ERROR (the connection closes)."""
        conn, ctx = self.conn, self.ctx
        limit = ctx.limits.max_partial_bytes
        if conn.partial_content_bytes + size > limit:
            raise AMQPError(RESOURCE_ERROR, f"more than {limit} bytes of messages still "
                                            "arriving on this connection's channels (bodies, "
                                            "and their properties as held in memory)", PUBLISH)
        total = ctx.limits.total_partial_bytes
        if not completes and ctx.partial_bytes + size > total:
            raise AMQPError(RESOURCE_ERROR, f"more than {total} bytes of messages still "
                                            "arriving on every connection together: send each "
                                            "message whole", PUBLISH)
        conn.partial_content_bytes += size
        ctx.partial_bytes += size

    def _method(self, method: Any) -> None:
        if isinstance(method, commands.Basic.Publish):
            if method.immediate:
                raise AMQPError(NOT_IMPLEMENTED, "immediate=true", PUBLISH)
            self._content = _Content(method)
        elif isinstance(method, commands.Basic.Ack):
            self._settle(method.delivery_tag or 0, method.multiple, None, (60, 80))
        elif isinstance(method, commands.Basic.Nack):
            self._settle(method.delivery_tag or 0, method.multiple, method.requeue, (60, 120))
        elif isinstance(method, commands.Basic.Reject):
            self._settle(method.delivery_tag or 0, False, method.requeue, (60, 90))
        elif isinstance(method, commands.Channel.Flow):
            if method.active:
                self.flow.set()
                self.top_up()
            else:
                self.flow.clear()
                for session in list(self.consumers.values()):  # lower priorities may take
                    top_up_queue(self.ctx, session.queue.name)
            self.conn.send(self.number, commands.Channel.FlowOk(active=method.active))
        elif isinstance(method, commands.Channel.FlowOk):  # the server sends no flow
            raise AMQPError(COMMAND_INVALID, "unimplemented method", (20, 21))  # RabbitMQ's
        elif isinstance(method, commands.Basic.CancelOk):
            return  # the answer to a consumer cancel the server sent
        elif isinstance(method, commands.Channel.Close):
            self.closing = True
            self._enqueue(method)  # after what is queued: then tear down and answer
        elif isinstance(method, commands.Channel.CloseOk):
            return
        elif isinstance(method, commands.Channel.Open):
            self._enqueue(method)  # refused in its turn, after what came before it
        elif isinstance(method, commands.Tx.Select | commands.Tx.Commit | commands.Tx.Rollback):
            self.tx_selected = self.tx_selected or isinstance(method, commands.Tx.Select)
            self._enqueue(method)  # in its turn, after the publishes before it
        elif isinstance(method, commands.Basic.RecoverAsync):
            raise AMQPError(NOT_IMPLEMENTED, "basic.recover-async", (60, 100), hard=True)
        elif isinstance(method, CLIENT_METHODS):
            self._enqueue(method)
        else:
            raise AMQPError(COMMAND_INVALID, f"{method.name} is not sent by clients",
                            _ids(method), hard=True)

    def _settle(self, tag: int, multiple: bool, requeue: bool | None,
                method: tuple[int, int]) -> None:
        """An ack, nack or reject: at once, or after a `tx.select` in its turn (`txn`)."""
        if self.tx_selected:
            self._enqueue(txn.Settle(tag, multiple, requeue, method))
        else:
            self.settle_tags(tag, multiple, requeue, method)

    # ------------------------------------------------------------------ the worker
    def _enqueue(self, item: Any) -> None:
        self._work.append(item)
        if self._worker is None or self._worker.done():
            self._worker = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        work = self._work
        while work:
            item = work[0]
            try:
                if isinstance(item, Publish):
                    if self.tx is not None:
                        await txn.hold_publishes(self, next_batch(work))
                    else:
                        await publish_batch(self, next_batch(work))
                elif isinstance(item, txn.Settle):
                    work.popleft()
                    txn.hold_settle(self, item)
                elif isinstance(item, _Failure):
                    work.popleft()
                    self._failed(item.exc)
                    return
                else:
                    work.popleft()
                    await self._run_method(item)
            except asyncio.CancelledError:
                raise
            except AMQPError as exc:
                self._failed(exc.at(_ids(item)))
                return
            except GatewayError as exc:
                self._failed(from_gateway(exc, _ids(item)))
                return
            except Exception as exc:
                log.error("amqp channel method failed", method=type(item).__name__,
                          error=str(exc), exc_info=True)
                self._failed(AMQPError(INTERNAL_ERROR, type(exc).__name__, hard=False))
                return

    def _failed(self, exc: AMQPError) -> None:
        if exc.hard:
            self.conn.fail(exc)
        else:
            self.close_with(exc)

    async def _run_method(self, method: Any) -> None:
        if isinstance(method, commands.Channel.Open):
            raise AMQPError(CHANNEL_ERROR, SECOND_OPEN, OPEN)
        if isinstance(method, commands.Channel.Close):
            await self.tear_down()
            if any(isinstance(item, commands.Channel.Open) for item in self._work):
                raise AMQPError(CHANNEL_ERROR, SECOND_OPEN, OPEN)  # RabbitMQ: no close-ok
            self.conn.send(self.number, commands.Channel.CloseOk())
            self.conn.channel_closed(self.number)
            return
        if isinstance(method, commands.Tx.Select):
            reply = txn.select(self)
        elif isinstance(method, commands.Tx.Commit):
            reply = await txn.commit(self)
        elif isinstance(method, commands.Tx.Rollback):
            reply = txn.rollback(self)
        else:
            reply = await handlers.handle(self, method)
        if reply is not None and not getattr(method, "nowait", False):
            self.send(reply)

    # ------------------------------------------------------------------ closing
    def close_with(self, exc: AMQPError) -> None:
        """Close this channel for a soft error."""
        if self.closing and self._torn:
            return
        log.info("amqp channel error", channel=self.number, code=exc.code, text=exc.text)
        class_id, method_id = exc.method
        self.send(commands.Channel.Close(reply_code=exc.code, reply_text=exc.reply_text,
                                         class_id=class_id, method_id=method_id))
        dropped = list(self._work)
        self.closing = True
        self.stop()
        # What the client sent after the failed method is discarded, but for the close
        # methods (the specification) and, as RabbitMQ, a channel.open.
        for item in dropped:
            if isinstance(item, commands.Channel.Close):
                self.send(commands.Channel.CloseOk())  # its close crossed ours
            elif isinstance(item, commands.Channel.Open):
                self.conn.fail(AMQPError(CHANNEL_ERROR, SECOND_OPEN, OPEN))
                break
        self._teardown_task = asyncio.ensure_future(self.tear_down())

    async def finish(self, timeout: float) -> None:
        """Wait (at most `timeout` seconds) until the work queued so far is done; work still
        under way then counts as not stored (`unstored`)."""
        worker = self._worker
        if worker is not None and not worker.done() and timeout > 0:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(worker), timeout)
        if worker is not None and not worker.done():
            self.unstored = "not stored within the close timeout"

    def stop(self) -> None:
        """Drop queued work (the connection or channel is closing)."""
        self.closing = True
        self._drop_content()
        dropped = sum(item.cost for item in self._work if isinstance(item, Publish))
        self._work.clear()
        if self._worker is not None and self._worker is not asyncio.current_task():
            self._worker.cancel()
        self.conn.published(dropped)
        txn.discard(self)  # an open transaction's messages and settlements are dropped

    async def tear_down(self) -> None:
        """Stop every consumer (their unacked deliveries go back to their queues) and give back
        unacked `basic.get` deliveries."""
        if self._torn:
            return
        self._torn = True
        self.closing = True
        replyto.forget(self)
        sessions = [*self.consumers.values(), *self.retired]
        self.consumers.clear()
        self.retired.clear()
        for session in sessions:
            self.ctx.consumers.get(session.queue.name, set()).discard(session)
        for name in {session.queue.name for session in sessions}:
            top_up_queue(self.ctx, name)  # those of lower priority may take deliveries now
        for session in sessions:
            await session.close()
        pulled = [u.receipt for u in self.unacked.values() if u.session is None and u.receipt]
        self.unacked.clear()
        self.release_later(pulled)
        with contextlib.suppress(Exception):
            await self.settled()


def _ids(method: Any) -> tuple[int, int]:
    index = int(getattr(method, "index", 0))
    return index >> 16, index & 0xFFFF
