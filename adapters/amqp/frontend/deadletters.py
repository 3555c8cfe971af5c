"""Dead-letter exchanges: a queue's dead letters routed through its `x-dead-letter-exchange`.

The engine dead-letters a message of an AMQP queue (retries exhausted, `nack`/`reject` without
requeue, TTL passed) onto the queue's own dead-letter topic (`adapters.amqp.naming.
AMQP_FRONT_END`). For every queue with a dead-letter exchange, a router consumes that topic and
publishes each message through the exchange, with the queue's `x-dead-letter-routing-key` or
else the message's own routing key, to every queue bound there (RabbitMQ's rule); then acks it.
A message the exchange routes nowhere is dropped, as RabbitMQ drops it. The copy carries an
`x-death` header (queue, reason, count, time, exchange, routing keys) and `x-first-death-*`.

At least once: a copy is acknowledged only after it is stored in every target; a crash between
the two may route it twice. With authentication on, a copy only goes to topics the principal
that declared the queue may publish to.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime

import structlog

from adapters.amqp.dialect import FIRST_DEATH_QUEUE, FIRST_DEATH_REASON, REJECTED
from adapters.amqp.frontend import messages
from adapters.amqp.frontend.context import POLICY, Context
from adapters.amqp.frontend.topology import DEFAULT, Queue
from adapters.amqp.frontend.values import as_text, table_from_text, table_to_text
from adapters.amqp.naming import AMQP_FRONT_END
from gateway.backend.base import OutMessage
from gateway.engine.api import Delivery, SubscriptionSpec
from gateway.engine.port import ConsumerPort
from gateway.errors import GatewayError

log = structlog.get_logger(__name__)

GROUP = "amqp-dead-letter-router"
"""The group that takes dead letters off a queue's dead-letter topic."""
CREDIT = 256
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
                    SubscriptionSpec(topic=topic, group=GROUP, policy=POLICY), CREDIT)
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
        by_topic: dict[str, list[OutMessage]] = {}
        for delivery in batch:
            props = delivery.properties
            routing_key = queue.settings.dead_letter_routing_key
            if routing_key is None:
                routing_key = props.get(messages.ROUTING_KEY, name)
            message = self._dead_letter(delivery, queue, exchange.name, routing_key)
            headers = dict(message.properties)
            targets = ctx.topology.route(exchange, routing_key, headers)
            for target in sorted(targets):
                if exchange.name == DEFAULT and not await ctx.is_topic(target):
                    continue
                if ctx.authorizer is not None:
                    try:
                        ctx.authorizer.check_publish(principal, target)
                    except GatewayError as exc:
                        log.warning("amqp dead letter not routed", queue=name,
                                    target=target, error=exc.message)
                        continue
                by_topic.setdefault(target, []).append(message)
        for target, out in by_topic.items():
            await ctx.engine.publish(target, out)

    @staticmethod
    def _dead_letter(delivery: Delivery, queue: Queue, exchange: str,
                     routing_key: str) -> OutMessage:
        props = dict(delivery.properties)
        reason = props.get(FIRST_DEATH_REASON, REJECTED)
        original_key = props.get(messages.ROUTING_KEY, queue.name)
        typed = {}
        if messages.TYPED in props:
            with contextlib.suppress(ValueError, TypeError, KeyError):
                typed = table_from_text(props[messages.TYPED])
        deaths = typed.get("x-death")
        deaths = list(deaths) if isinstance(deaths, list) else []
        death: dict[str, object] = {
            "count": 1, "reason": reason, "queue": queue.name,
            "time": datetime.datetime.now(tz=datetime.UTC).replace(microsecond=0),
            "exchange": props.get(messages.EXCHANGE, ""), "routing-keys": [original_key],
        }
        # As RabbitMQ: a dead letter does not expire again; its TTL is kept in x-death.
        expiration = props.pop(messages.TEXT_PROPERTIES["expiration"], None)
        if expiration is not None:
            death["original-expiration"] = expiration
        deaths.insert(0, death)
        typed["x-death"] = deaths
        props["x-death"] = as_text(deaths)
        props.setdefault(FIRST_DEATH_REASON, reason)
        props.setdefault(FIRST_DEATH_QUEUE, queue.name)
        props.setdefault("x-first-death-exchange", props.get(messages.EXCHANGE, ""))
        props[messages.TYPED] = table_to_text(typed)
        props[messages.EXCHANGE] = exchange
        props[messages.ROUTING_KEY] = routing_key
        return OutMessage(delivery.body, props, delivery.key, delivery.tag)
