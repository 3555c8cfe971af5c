"""Expiry of messages nobody takes: a queue's messages whose time to live passed (the queue's
`x-message-ttl`, or a message's own `expiration`) are dead-lettered with reason `expired` (or
dropped, without a dead-letter exchange) from the head of the queue while no consumer takes
them, as RabbitMQ does; this is what makes the classic delay queue work (a queue with a TTL and
a dead-letter exchange that nobody consumes, passing each message on once its time is up).

While the queue has consumers they expire messages on their way to them (`consumers`). Without
any, the sweeper looks at the queue's head when a message at it may have expired: a publish
tells it when (`touch`), and a queue with a TTL is looked at again every `RECHECK_MS` besides
(messages may come through other front ends or after a restart). It reads the head without
taking it (the engine's export, which also refuses while anyone holds a delivery of the group)
and takes only the leading messages whose time is up; one that turns out not to be expired when
taken (someone raced it to the head) is given back. As in RabbitMQ, a message whose own time is
up waits behind one at the head whose time is not.
"""

from __future__ import annotations

from collections.abc import Sequence

import structlog

from adapters.amqp.dialect import EXPIRED
from adapters.amqp.frontend.consumers import expired, expires_at
from adapters.amqp.frontend.context import Context, queue_spec
from adapters.amqp.frontend.periodic import Periodic
from adapters.amqp.frontend.topology import Queue
from gateway.backend.base import StoredMessage
from gateway.engine.api import SettleAction, Settlement
from gateway.errors import GatewayError

log = structlog.get_logger(__name__)

TICK_S = 0.05
"""How often due queues are looked at."""
RECHECK_MS = 5_000
"""How often a queue with a TTL is looked at without being told of a publish."""
PEEK = 64
"""Messages read at the head of a queue per look (and taken at most per look), once the first
of them is found expired."""
LOOKS_PER_TICK = 64
"""Queues looked at per tick at most (the others that are due wait for the next ones)."""
READY = "ready"


class Sweeper(Periodic):
    """Dead-letters expired messages at the head of queues without consumers."""

    TICK_S = TICK_S
    FAILED = "amqp expiry sweep failed"

    def __init__(self, ctx: Context) -> None:
        super().__init__()
        self._ctx = ctx
        self._due: dict[str, int] = {}

    def start(self) -> None:
        """Start sweeping; every queue is looked at once (its messages may have been stored
        before a restart). Not where looking at a queue marks its messages (a broker back end
        that redelivers what was looked at): there they expire on their way to a consumer."""
        if not self._ctx.engine.quiet_reads:
            return
        self._ctx.sweeper = self  # publishes tell it of expiring messages from now on
        now = self._ctx.engine.now_ms()
        for name in self._ctx.topology.queues:
            self._due[name] = now
        self.begin()

    def touch(self, queue: str, at_ms: int) -> None:
        """A message that may expire at `at_ms` went to `queue`: look at it then."""
        if not self.running:
            return
        due = self._due.get(queue)
        if due is None or at_ms < due:
            self._due[queue] = at_ms

    async def sweep(self) -> None:
        """Look at every queue that is due."""
        ctx = self._ctx
        now = ctx.engine.now_ms()
        looks = 0
        for name, due in list(self._due.items()):
            queue = ctx.topology.queues.get(name)
            if queue is None:
                del self._due[name]
                continue
            if due > now or looks == LOOKS_PER_TICK:
                continue
            looks += 1
            try:
                found = await self._look(queue, now)
            except GatewayError as exc:  # the back end is away, the group is in use: later
                log.debug("amqp expiry sweep deferred", queue=name, error=exc.message)
                found = now + RECHECK_MS
            except Exception as exc:  # a bug: said; this queue waits, the others go on
                log.error("amqp expiry sweep of a queue failed", queue=name, error=str(exc),
                          exc_info=True)
                found = now + RECHECK_MS
            if found is None and queue.settings.message_ttl_ms is not None:
                found = now + RECHECK_MS
            if found is None:
                self._due.pop(name, None)  # nothing will expire until a publish says so
            else:
                self._due[name] = found

    async def _look(self, queue: Queue, now: int) -> int | None:
        """Dead-letter the expired messages at the head of `queue`; when to look again (None:
        nothing at its head will expire)."""
        ctx = self._ctx
        if ctx.consumer_count(queue.name):
            return now + RECHECK_MS  # its consumers expire what they are given
        admin = ctx.queries.admin
        page = await admin.export(queue.name, queue.settings.group, READY, -1, 1)
        count, next_due = _expired_head(page.messages, queue, now)
        if next_due is None and page.next_after >= 0:  # expired or waiting: look further
            page = await admin.export(queue.name, queue.settings.group, READY, -1, PEEK)
            count, next_due = _expired_head(page.messages, queue, now)
        if count and ctx.topology.queues.get(queue.name) is queue:  # not deleted meanwhile
            await self._take(queue, count)
            if count == len(page.messages) and page.next_after >= 0:
                return now  # more may wait behind them
        return next_due

    async def _take(self, queue: Queue, count: int) -> None:
        ctx = self._ctx
        got = await ctx.engine.receive(queue_spec(queue, queue.declared_by), count, None, 0,
                                        counted=False)
        now = ctx.engine.now_ms()
        settlements = [
            Settlement(d.receipt, SettleAction.DEAD_LETTER, reason=EXPIRED)
            if expired(d, queue, now) else Settlement(d.receipt, SettleAction.RELEASE)
            for d in got
        ]
        if settlements:
            await ctx.engine.settle(settlements)


def _expired_head(found: Sequence[StoredMessage], queue: Queue, now: int) -> tuple[int, int | None]:
    """How many messages at the head are expired, and when the first that is not expires
    (None: it never does, or the head is all expired)."""
    count = 0
    for message in found:
        if message.deliver_at_ms > now:
            continue  # not ready yet (a retry waiting in place): not at the head
        at = expires_at(message.properties, message.publish_ms, queue)
        if at is None or at > now:
            return count, at
        count += 1
    return count, None
