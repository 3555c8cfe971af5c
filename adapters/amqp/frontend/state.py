"""A channel's state and the bookkeeping its methods share: delivery tags and what is
unacknowledged, acknowledgements on their way to the engine, consumers' credit under prefetch.

`channel.Channel` adds the protocol (frames, the ordered worker, closing) on top; the method
modules (`handlers`, `queues`, `publishing`, `consumers`) work on this state.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import structlog

from adapters.amqp.frontend.context import Context
from adapters.amqp.frontend.errors import PRECONDITION_FAILED, AMQPError
from adapters.amqp.frontend.ports import ConnectionPort, ConsumerPort
from gateway.engine.api import SettleAction, Settlement
from gateway.errors import GatewayError

log = structlog.get_logger(__name__)

UNSIGNED_64 = (1 << 64) - 1
"""A delivery tag's bits (`basic.ack` and the others carry it as an unsigned longlong)."""


@dataclass(slots=True)
class Unacked:
    receipt: str
    """"" for a no-ack delivery (nothing to settle)."""
    session: ConsumerPort | None
    """The consumer it went to; None for a `basic.get`."""


class ChannelState:
    def __init__(self, conn: ConnectionPort, ctx: Context, number: int) -> None:
        self.conn = conn
        self.ctx = ctx
        self.number = number
        self.closing = False
        """A Channel.Close was sent or received: frames are discarded until the handshake ends."""
        self.confirming = False
        self.tx: Any = None
        """The channel's transaction (`txn.Transaction`) once `tx.select` was applied."""
        self.tx_selected = False
        """A `tx.select` came (settlements from then on go through the worker, in order)."""
        self.publish_seq = 0
        self.unstored = ""
        """Why messages published on the channel were not stored (the latest store failure):
        one while the client's `connection.close` waits is answered instead of a close-ok."""
        self._tag = 0
        self.unacked: dict[int, Unacked] = {}
        self.consumers: dict[str, ConsumerPort] = {}
        self.retired: list[ConsumerPort] = []
        self.reply_consumer: Any = None
        """The channel's direct reply-to consumer (`replyto.ReplyConsumer`), if any."""
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

    def send(self, method: Any) -> None:
        self.conn.send(self.number, method)

    def close_with(self, exc: AMQPError) -> None:
        """Close the channel for a soft error (the protocol's part: `channel.Channel`)."""
        raise NotImplementedError

    # ------------------------------------------------------------------ deliveries
    def next_tag(self) -> int:
        self._tag += 1
        return self._tag

    def settle_tags(self, tag: int, multiple: bool, requeue: bool | None,
                    method: tuple[int, int]) -> None:
        """Ack (`requeue` None), or nack / reject: requeue=true is a failure retried after the
        queue's interval (document 001); requeue=false dead-letters at once."""
        taken = self._take(tag, multiple, method)
        acks: list[str] = []
        settles: list[Settlement] = []
        full = {u.session for u in taken if u.session is not None
                and not u.session.has_room()} if self.ctx.prioritised else ()
        for unacked in taken:
            if unacked.session is not None:
                unacked.session.held -= 1
            if not unacked.receipt:
                continue  # a no-ack delivery: nothing to settle
            if requeue is None:
                acks.append(unacked.receipt)
            elif requeue:
                settles.append(Settlement(unacked.receipt, SettleAction.FAIL))
            else:
                settles.append(Settlement(unacked.receipt, SettleAction.DEAD_LETTER,
                                          reason="rejected"))
        self.settle_later(acks, settles)
        self.top_up()
        for session in full:  # it has room again: those of lower priority give way
            top_up_queue(self.ctx, session.queue.name)

    def _take(self, tag: int, multiple: bool, method: tuple[int, int]) -> list[Unacked]:
        tag &= UNSIGNED_64  # an unsigned 64-bit field that the frame decoder reads signed
        unacked = self.unacked
        if multiple and not tag:
            taken = list(unacked.values())  # tag 0 with multiple: everything outstanding
            unacked.clear()
            return taken
        if tag not in unacked:
            # RabbitMQ: the tag itself must be outstanding, with multiple=true too (the earlier
            # tags still outstanding do not make an unknown one acceptable).
            raise AMQPError(PRECONDITION_FAILED, f"unknown delivery tag {tag}", method)
        if multiple:
            return [unacked.pop(t) for t in [t for t in unacked if t <= tag]]
        return [unacked.pop(tag)]

    def release_later(self, receipts: list[str]) -> None:
        """Give deliveries back unprocessed (no failure counted)."""
        self.settle_later([], [Settlement(r, SettleAction.RELEASE) for r in receipts])

    def settle_later(self, acks: list[str], settlements: list[Settlement]) -> None:
        """Acks and settlements for the engine, sent by the channel's settler in batches."""
        if not acks and not settlements:
            return
        self._acks.extend(acks)
        self._settles.extend(settlements)
        if self._settler is None or self._settler.done():
            self._settler = asyncio.ensure_future(self._settle_pending())

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

    async def settled(self) -> None:
        """Wait until the settler has sent everything queued."""
        if self._settler is not None:
            await self._settler

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
            if outranked(self.ctx, session):
                session.withdraw()
                continue
            want = session.want()
            grant = want if room is None else min(want, room)
            if grant > 0:
                session.grant(grant)
                if room is not None:
                    room -= grant


def outranked(ctx: Context, session: ConsumerPort) -> bool:
    """Whether a consumer of higher priority on the same queue could take a delivery now
    (RabbitMQ's consumer priorities: a consumer gets messages only while every one of higher
    priority is blocked, its prefetch full)."""
    return ctx.prioritised and any(other.priority > session.priority and other.has_room()
                                   for other in ctx.consumers.get(session.queue.name, ()))


def top_up_queue(ctx: Context, queue: str) -> None:
    """Give credit on every channel with a consumer on `queue`, when their priorities differ
    (a consumer of higher priority became blocked or left: those below it may take
    deliveries now)."""
    if not ctx.prioritised:
        return
    sessions = ctx.consumers.get(queue, ())
    if len({session.priority for session in sessions}) < 2:
        return
    for channel in {session.channel for session in sessions}:
        channel.top_up()


def principal_of(channel: ChannelState) -> str:
    """The name of the channel's principal ("" without authentication): whose shares what it
    declares or makes takes."""
    return str(getattr(channel.conn.principal, "name", ""))
