"""One AMQP channel: content assembly, the ordered work queue, acknowledgements, flow and
prefetch, and closing.

Methods run in the order they arrived, one at a time, on the channel's worker (a declare is
answered before the publish that follows it is routed); runs of publishes are stored as one
batch and confirmed together. Acknowledgements take a shorter way: the delivery tags are settled
at once (so prefetch frees up at once) and the engine is told in batches by a settler.
A channel error closes the channel (`Channel.Close`), whose frames are then discarded until the
client's `Close-Ok`; a hard error closes the connection.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import structlog
from pamqp import commands

from adapters.amqp.frontend import framing, handlers
from adapters.amqp.frontend.consumers import ConsumerSession, Unacked
from adapters.amqp.frontend.errors import (
    COMMAND_INVALID,
    INTERNAL_ERROR,
    NOT_IMPLEMENTED,
    PRECONDITION_FAILED,
    UNEXPECTED_FRAME,
    AMQPError,
    from_gateway,
)
from adapters.amqp.frontend.publishing import Publish, publish_batch
from gateway.engine.api import SettleAction, Settlement
from gateway.errors import GatewayError
from gateway.limits import MAX_BATCH

if TYPE_CHECKING:
    from adapters.amqp.frontend.connection import Connection

log = structlog.get_logger(__name__)

PUBLISH = (60, 40)
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


class Channel:
    def __init__(self, conn: Connection, number: int) -> None:
        self.conn = conn
        self.number = number
        self.ctx = conn.ctx
        self.closing = False
        """A Channel.Close was sent or received: frames are discarded until the handshake ends."""
        self._content: _Content | None = None
        self._work: deque[Any] = deque()
        self._worker: asyncio.Task[None] | None = None
        self.confirming = False
        self.publish_seq = 0
        self._tag = 0
        self.unacked: dict[int, Unacked] = {}
        self.consumers: dict[str, ConsumerSession] = {}
        self.retired: list[ConsumerSession] = []
        """Cancelled consumers whose deliveries may still be acknowledged (closed with the
        channel)."""
        self.prefetch = 0
        """Per-consumer prefetch for consumers started from now on (basic.qos global=false)."""
        self.channel_prefetch = 0
        """Unacknowledged deliveries on the whole channel (basic.qos global=true); 0: none."""
        self.flow = asyncio.Event()
        self.flow.set()
        self.last_queue = ""
        self._acks: list[str] = []
        self._settles: list[Settlement] = []
        self._settler: asyncio.Task[None] | None = None
        self._rr = 0
        self._torn = False
        self._teardown_task: asyncio.Future[None] | None = None

    # ------------------------------------------------------------------ frames
    def frame(self, incoming: framing.Incoming) -> None:
        if self.closing:
            if isinstance(incoming, framing.Method):
                if isinstance(incoming.method, commands.Channel.CloseOk):
                    self.conn.channel_closed(self.number)
                elif isinstance(incoming.method, commands.Channel.Close):
                    self.conn.send(self.number, commands.Channel.CloseOk())
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
            if exc.hard:
                raise
            self.close_with(exc)

    def _content_frame(self, incoming: framing.Incoming) -> None:
        content = self._content
        assert content is not None
        if content.body_size < 0:
            if not isinstance(incoming, framing.ContentHeader) or incoming.class_id != 60:
                raise AMQPError(UNEXPECTED_FRAME, "expected content header for class 60, got "
                                                  "non content header frame instead", PUBLISH)
            limit = self.ctx.limits.max_message_bytes
            if incoming.body_size > limit:
                self._content = None
                raise AMQPError(PRECONDITION_FAILED, f"message size {incoming.body_size} is "
                                                     f"larger than configured max size {limit}",
                                PUBLISH)
            content.body_size = incoming.body_size
            content.properties = incoming.properties
        elif isinstance(incoming, framing.Body):
            content.parts.append(incoming.payload)
            content.received += len(incoming.payload)
            if content.received > content.body_size:
                raise AMQPError(UNEXPECTED_FRAME, f"content body larger than the declared "
                                                  f"{content.body_size} bytes", PUBLISH)
        else:
            raise AMQPError(UNEXPECTED_FRAME, "expected content body, got non content body "
                                              "frame instead", PUBLISH)
        if content.received == content.body_size:
            self._content = None
            body = content.parts[0] if len(content.parts) == 1 else b"".join(content.parts)
            properties = content.properties or commands.Basic.Properties()
            self.conn.pending_publish_bytes += len(body)
            self._enqueue(Publish(content.method, properties, body))

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
            self.conn.send(self.number, commands.Channel.FlowOk(active=method.active))
        elif isinstance(method, commands.Channel.FlowOk | commands.Basic.CancelOk):
            return  # answers to a flow or a consumer cancel the server sent
        elif isinstance(method, commands.Channel.Close):
            self.closing = True
            self._enqueue(method)  # after what is queued: then tear down and answer
        elif isinstance(method, commands.Channel.CloseOk):
            return
        elif isinstance(method, commands.Tx.Select | commands.Tx.Commit | commands.Tx.Rollback):
            raise AMQPError(NOT_IMPLEMENTED, "transactions (tx.*) are not supported; use "
                                             "publisher confirms", _ids(method), hard=True)
        elif isinstance(method, commands.Basic.RecoverAsync):
            raise AMQPError(NOT_IMPLEMENTED, "basic.recover-async", (60, 100), hard=True)
        elif isinstance(method, CLIENT_METHODS):
            self._enqueue(method)
        else:
            raise AMQPError(COMMAND_INVALID, f"{method.name} is not sent by clients",
                            _ids(method), hard=True)

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
                    batch: list[Publish] = []
                    while work and isinstance(work[0], Publish) and len(batch) < MAX_BATCH:
                        batch.append(work.popleft())
                    await publish_batch(self, batch)
                else:
                    work.popleft()
                    await self._run_method(item)
            except asyncio.CancelledError:
                raise
            except AMQPError as exc:
                self._failed(exc)
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
        if isinstance(method, commands.Channel.Close):
            await self.tear_down()
            self.conn.send(self.number, commands.Channel.CloseOk())
            self.conn.channel_closed(self.number)
            return
        reply = await handlers.handle(self, method)
        if reply is not None and not getattr(method, "nowait", False):
            self.send(reply)

    def send(self, method: Any) -> None:
        self.conn.send(self.number, method)

    # ------------------------------------------------------------------ deliveries
    def next_tag(self) -> int:
        self._tag += 1
        return self._tag

    def _settle(self, tag: int, multiple: bool, requeue: bool | None,
                method: tuple[int, int]) -> None:
        """Ack (`requeue` None), or nack / reject: requeue=true is a failure retried after the
        queue's interval (document 001); requeue=false dead-letters at once."""
        taken = self._take(tag, multiple, method)
        for unacked in taken:
            if unacked.session is not None:
                unacked.session.held -= 1
            if not unacked.receipt:
                continue  # a no-ack delivery: nothing to settle
            if requeue is None:
                self._acks.append(unacked.receipt)
            elif requeue:
                self._settles.append(Settlement(unacked.receipt, SettleAction.FAIL))
            else:
                self._settles.append(Settlement(unacked.receipt, SettleAction.DEAD_LETTER,
                                                reason="rejected"))
        if self._settler is None or self._settler.done():
            self._settler = asyncio.ensure_future(self._settle_pending())
        self.top_up()

    def _take(self, tag: int, multiple: bool, method: tuple[int, int]) -> list[Unacked]:
        unacked = self.unacked
        if multiple:
            tags = [t for t in unacked if t <= tag] if tag else list(unacked)
            if not tags and tag:
                raise AMQPError(PRECONDITION_FAILED, f"unknown delivery tag {tag}", method)
            return [unacked.pop(t) for t in tags]
        found = unacked.pop(tag, None)
        if found is None:
            raise AMQPError(PRECONDITION_FAILED, f"unknown delivery tag {tag}", method)
        return [found]

    async def _settle_pending(self) -> None:
        engine = self.ctx.engine
        guard = self.conn.settle_guard
        while self._acks or self._settles:
            acks, self._acks = self._acks, []
            settles, self._settles = self._settles, []
            try:
                if acks:
                    failed = await engine.ack(acks, guard=guard)
                    for result in failed.values():
                        log.debug("amqp ack not applied", error=result.error)
                if settles:
                    for result in await engine.settle(settles, guard=guard):
                        if not result.ok:
                            log.debug("amqp settle not applied", error=result.error)
            except GatewayError as exc:
                # Not settled: the deliveries time out and come again (at least once).
                log.warning("amqp settle failed", error=exc.message)

    def release_later(self, receipts: list[str]) -> None:
        """Give deliveries back unprocessed (no failure counted)."""
        self.settle_later([], [Settlement(r, SettleAction.RELEASE) for r in receipts])

    def settle_later(self, acks: list[str], settlements: list[Settlement]) -> None:
        """Acks and settlements for the settler (no-ack deliveries, expired messages)."""
        if not acks and not settlements:
            return
        self._acks.extend(acks)
        self._settles.extend(settlements)
        if self._settler is None or self._settler.done():
            self._settler = asyncio.ensure_future(self._settle_pending())

    def top_up(self) -> None:
        """Give consumers engine credit as far as their prefetch and the channel's allow."""
        if self.closing or not self.flow.is_set() or not self.consumers:
            return
        sessions = list(self.consumers.values())
        room = None
        if self.channel_prefetch:
            room = self.channel_prefetch - len(self.unacked) - sum(s.credit for s in sessions)
        start = self._rr = (self._rr + 1) % len(sessions)
        for session in sessions[start:] + sessions[:start]:
            want = session.want()
            grant = want if room is None else min(want, room)
            if grant > 0:
                session.grant(grant)
                if room is not None:
                    room -= grant

    # ------------------------------------------------------------------ closing
    def close_with(self, exc: AMQPError) -> None:
        """Close this channel for a soft error."""
        if self.closing and self._torn:
            return
        log.info("amqp channel error", channel=self.number, code=exc.code, text=exc.text)
        class_id, method_id = exc.method
        self.send(commands.Channel.Close(reply_code=exc.code, reply_text=exc.reply_text,
                                         class_id=class_id, method_id=method_id))
        self.closing = True
        self.stop()
        self._teardown_task = asyncio.ensure_future(self.tear_down())

    def stop(self) -> None:
        """Drop queued work (the connection or channel is closing)."""
        self.closing = True
        dropped = sum(len(item.body) for item in self._work if isinstance(item, Publish))
        self._work.clear()
        if self._worker is not None and self._worker is not asyncio.current_task():
            self._worker.cancel()
        self.conn.published(dropped)

    async def tear_down(self) -> None:
        """Stop every consumer (their unacked deliveries go back to their queues) and give back
        unacked `basic.get` deliveries."""
        if self._torn:
            return
        self._torn = True
        self.closing = True
        sessions = [*self.consumers.values(), *self.retired]
        self.consumers.clear()
        self.retired.clear()
        for session in sessions:
            self.ctx.consumers.get(session.queue.name, set()).discard(session)
            await session.close()
        pulled = [u.receipt for u in self.unacked.values() if u.session is None and u.receipt]
        self.unacked.clear()
        self.release_later(pulled)
        if self._settler is not None:
            with contextlib.suppress(Exception):
                await self._settler


def _ids(method: Any) -> tuple[int, int]:
    index = int(getattr(method, "index", 0))
    return index >> 16, index & 0xFFFF
