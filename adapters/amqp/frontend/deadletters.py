"""Dead-letter exchanges: a queue's dead letters routed through its `x-dead-letter-exchange`.

The engine dead-letters a message of an AMQP queue (retries exhausted, `nack`/`reject` without
requeue, TTL passed) onto the queue's own dead-letter topic (`adapters.amqp.naming.
AMQP_FRONT_END`). For every queue with a dead-letter exchange, a router consumes that topic and
publishes each message through the exchange, with the queue's `x-dead-letter-routing-key` or
else the message's own routing key, to every queue bound there (RabbitMQ's rule); then acks it.
A message the exchange routes nowhere is dropped, as RabbitMQ drops it. The copy carries an
`x-death` header (queue, reason, count, time, exchange, routing keys; one entry per queue and
reason, its count going up, as RabbitMQ keeps it) and `x-first-death-*`. A headers exchange
matches the headers with their types, as on publish. A copy that would close a cycle without a
rejection in it (a queue whose expired messages come back to it) is not routed to the queue that
closes it (`is_cycle`), as RabbitMQ drops it.

The size limit is for what clients publish: the bytes the headers written here add to a copy do
not count against it (`EnginePort.publish`'s `grown`), so a message taken at the limit is still
dead-lettered. A copy the engine refuses for good all the same is dropped with an error naming
the message; it never holds back the dead letters after it.

At least once: a copy is acknowledged only after it is stored in every target; a crash between
the two may route it twice. With authentication on, a copy only goes to topics the principal
that declared the queue may publish to.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
from collections.abc import Mapping

import structlog

from adapters.amqp.dialect import (
    FIRST_DEATH_QUEUE,
    FIRST_DEATH_REASON,
    LAST_DEATH_REASON,
    REJECTED,
)
from adapters.amqp.frontend import delayed, messages
from adapters.amqp.frontend.consumers import expires_at
from adapters.amqp.frontend.context import POLICY, Context
from adapters.amqp.frontend.routeturns import route
from adapters.amqp.frontend.routing import ROUTE_TURN
from adapters.amqp.frontend.topology import DEFAULT, Queue
from adapters.amqp.frontend.typed import decode as decode_typed
from adapters.amqp.frontend.values import FieldValue, as_text, table_to_text
from adapters.amqp.naming import AMQP_FRONT_END
from gateway.backend.base import OutMessage
from gateway.engine.api import Delivery, SubscriptionSpec
from gateway.engine.port import ConsumerPort
from gateway.errors import GatewayError, InvalidArgument, MessageTooLarge
from gateway.limits import utf8_len

log = structlog.get_logger(__name__)

GROUP = "amqp-dead-letter-router"
"""The group that takes dead letters off a queue's dead-letter topic."""
CREDIT = 256
REFUSED = (InvalidArgument, MessageTooLarge)
"""What the engine refuses a message for, whenever it is tried again."""
RETRY_S = (0.1, 5.0)
"""Back-off after a failed round (the back end away): first wait, longest wait."""


class DeadLetterRouter:
    """One routing task per queue that has a dead-letter exchange."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self._tasks: dict[str, asyncio.Task[None]] = {}

    def ensure(self, queue: Queue) -> None:
        """Route the queue's dead letters (when it has a dead-letter exchange)."""
        if queue.settings.dead_letter_exchange is None or queue.name in self._tasks:
            return
        self._tasks[queue.name] = asyncio.ensure_future(self._run(queue.name))

    def forget(self, name: str) -> None:
        task = self._tasks.pop(name, None)
        if task is not None:
            task.cancel()

    async def close(self) -> None:
        tasks = list(self._tasks.values())
        self._tasks.clear()
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def _run(self, name: str) -> None:
        wait = RETRY_S[0]
        while True:
            queue = self.ctx.topology.queues.get(name)
            if queue is None:
                return
            topic = AMQP_FRONT_END.dead_letter_topic(queue.name, queue.settings.group)
            consumer: ConsumerPort | None = None
            try:
                consumer = await self.ctx.engine.open_consumer(
                    SubscriptionSpec(topic=topic, group=GROUP, policy=POLICY, owner=None), CREDIT)
                while True:
                    batch = await consumer.next_batch(CREDIT)
                    await self._route(name, batch)
                    await self.ctx.engine.ack([d.receipt for d in batch])
                    consumer.add_credit(len(batch))
                    wait = RETRY_S[0]
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                level = log.warning if isinstance(exc, GatewayError) else log.error
                level("amqp dead-letter routing paused", queue=name, error=str(exc))
            finally:
                if consumer is not None:
                    with contextlib.suppress(Exception):
                        await consumer.close()  # what it held goes back, not lost
            await asyncio.sleep(wait)
            wait = min(wait * 2, RETRY_S[1])

    async def _route(self, name: str, batch: list[Delivery]) -> None:
        ctx = self.ctx
        queue = ctx.topology.queues.get(name)
        if queue is None or queue.settings.dead_letter_exchange is None:
            return
        exchange = ctx.topology.exchanges.get(queue.settings.dead_letter_exchange)
        if exchange is None:
            return  # RabbitMQ drops dead letters of a dead-letter exchange that is not there
        principal = None
        if ctx.authorizer is not None and queue.declared_by:
            principal = ctx.authorizer.principal(queue.declared_by)
        by_topic: dict[str, list[tuple[OutMessage, int, str]]] = {}
        tested = ctx.topology.bindings_tested
        for delivery in batch:
            if ctx.topology.bindings_tested - tested > ROUTE_TURN:  # others' turn
                await asyncio.sleep(0)
                tested = ctx.topology.bindings_tested
            props = delivery.properties
            routing_key = queue.settings.dead_letter_routing_key
            if routing_key is None:
                routing_key = props.get(messages.ROUTING_KEY, name)
            message, grown, deaths = self._dead_letter(delivery, queue, exchange.name,
                                                       routing_key)
            headers = headers_of(message.properties)
            if exchange.kind == delayed.DELAYED:  # held there for its x-delay, as published
                message = delayed.held(message, headers, ctx.engine.now_ms())
            targets = await route(ctx.topology, exchange, routing_key, headers)
            for target in sorted(targets):
                if exchange.name == DEFAULT and not await ctx.is_topic(target):
                    continue
                if is_cycle(target, deaths):
                    log.warning("amqp dead letter dropped: cycle", queue=name, target=target,
                                message_id=delivery.message_id)
                    continue
                if ctx.authorizer is not None:
                    try:
                        ctx.authorizer.check_publish(principal, target)
                    except GatewayError as exc:
                        log.warning("amqp dead letter not routed", queue=name,
                                    target=target, error=exc.message)
                        continue
                by_topic.setdefault(target, []).append((message, grown, delivery.message_id))
        for target, out in by_topic.items():
            await self._publish(name, target, out)
            queue = self.ctx.topology.queues.get(target)
            at = expires_at({}, self.ctx.engine.now_ms(), queue)  # dead letters lose their own
            if at is not None and self.ctx.sweeper is not None:  # a delay queue, say
                self.ctx.sweeper.touch(target, at)

    async def _publish(self, name: str, target: str,
                       out: list[tuple[OutMessage, int, str]]) -> None:
        """Store dead letters in `target`; one the engine refuses for good (not a passing
        failure) is dropped with an error, never holding back the others."""
        engine = self.ctx.engine
        if len(out) > 1:
            try:
                await engine.publish(target, [m for m, _, _ in out],
                                     grown=[g for _, g, _ in out], owner=None)
                return
            except REFUSED:
                pass  # which one: each on its own
        for message, grown, message_id in out:
            try:
                await engine.publish(target, [message], grown=[grown], owner=None)
            except REFUSED as exc:
                log.error("amqp dead letter dropped: refused", queue=name, target=target,
                          message_id=message_id, error=exc.message)

    @staticmethod
    def _dead_letter(delivery: Delivery, queue: Queue, exchange: str,
                     routing_key: str) -> tuple[OutMessage, int, list[object]]:
        """The copy to route, the bytes it grew by the headers written here, and its
        `x-death` (the latest death first)."""
        props = dict(delivery.properties)
        # Why it died this time (the dialect writes it on every death, where the first death's
        # reason stays as it was); the first death's only on a dead letter that does not say.
        reason = props.get(LAST_DEATH_REASON) or props.get(FIRST_DEATH_REASON, REJECTED)
        original_key = props.get(messages.ROUTING_KEY, queue.name)
        typed = decode_typed(props.get(messages.TYPED))
        deaths = typed.pop("x-death", None)
        deaths = list(deaths) if isinstance(deaths, list) else []
        before = utf8_len(table_to_text(typed)) if typed else 0
        death: dict[str, object] = {
            "count": 1, "reason": reason, "queue": queue.name,
            "time": datetime.datetime.now(tz=datetime.UTC).replace(microsecond=0),
            "exchange": props.get(messages.EXCHANGE, ""), "routing-keys": [original_key],
        }
        # As RabbitMQ: a dead letter does not expire again; its TTL is kept in x-death.
        expiration = props.pop(messages.TEXT_PROPERTIES["expiration"], None)
        if expiration is not None:
            death["original-expiration"] = expiration
        # As RabbitMQ: one entry per queue and reason, counting (a cycle does not grow it).
        for i, old in enumerate(deaths):
            if isinstance(old, dict) and old.get("queue") == queue.name and \
                    old.get("reason") == reason:
                count = old.get("count")
                death = {**old, "count": (count if isinstance(count, int) else 0) + 1}
                del deaths[i]
                break
        deaths.insert(0, death)
        typed["x-death"] = deaths
        props["x-death"] = as_text(deaths)
        props.setdefault(FIRST_DEATH_REASON, reason)
        props.setdefault(FIRST_DEATH_QUEUE, queue.name)
        props.setdefault("x-first-death-exchange", props.get(messages.EXCHANGE, ""))
        props[messages.TYPED] = table_to_text(typed)
        props[messages.EXCHANGE] = exchange
        props[messages.ROUTING_KEY] = routing_key
        own = [messages.EXCHANGE, messages.ROUTING_KEY, "x-death", FIRST_DEATH_REASON,
               FIRST_DEATH_QUEUE, "x-first-death-exchange", messages.TYPED]
        grown = sum(utf8_len(k) + utf8_len(props[k]) for k in own) - before
        return OutMessage(delivery.body, props, delivery.key, delivery.tag), grown, deaths


def is_cycle(target: str, deaths: list[object]) -> bool:
    """Whether dead-lettering into queue `target` closes a cycle no client took part in
    (RabbitMQ's rule): `target` already dead-lettered this message, and no death since then,
    that one included, was a rejection. Such a copy is dropped for `target` (it would expire or
    run out of retries and come back for ever); a cycle with a rejection in it goes on, as far
    as consumers keep rejecting."""
    for death in deaths:
        if not isinstance(death, dict):
            continue
        if death.get("reason") == REJECTED:
            return False
        if death.get("queue") == target:
            return True
    return False


def headers_of(props: Mapping[str, str]) -> dict[str, FieldValue]:
    """A message's headers as an AMQP consumer gets them (and a headers exchange matches them):
    its properties, the typed ones with their types."""
    headers: dict[str, FieldValue] = {k: v for k, v in props.items() if k not in messages.MAPPED}
    headers.update(decode_typed(props.get(messages.TYPED)))
    return headers
