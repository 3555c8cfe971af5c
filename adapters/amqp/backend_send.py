"""Publishing for the RabbitMQ back end: the queues and routes a publish needs, declared once
each, and batches sent with publisher confirms.

A message visible now goes to its topic queue through the default exchange; one visible later goes
to a delay queue (`delays`) that dead-letters it into the topic queue on time; a dead-letter copy
from the RabbitMQ dialect (marked with the original queue as routing key) goes through that queue's
dead-letter exchange, to which the dead-letter queue is bound with binding key = the original
queue.

A batch's messages are routed and written CHUNK at a time (`pipeline`), each chunk in a turn of
the event loop of its own; the batches of one topic are written one after another, in the order
their publishes came (`Turns`), while other topics' chunks go between theirs.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from functools import partial

import aio_pika
from aio_pika.abc import AbstractRobustChannel

from adapters.amqp.backend_link import Link, guard
from adapters.amqp.codec import encode
from adapters.amqp.delays import DelayQueue, delay_queue
from adapters.amqp.naming import dead_letter_exchange
from adapters.amqp.pipeline import CHUNK, Item, write_batch
from adapters.amqp.queues import queue_name
from gateway.backend.base import OutMessage
from gateway.core.naming import NamingScheme
from gateway.core.properties import DEAD_LETTER_ROUTE as HEADER_DLX_ROUTING_KEY
from gateway.engine.clock import Clock
from gateway.errors import InvalidArgument, Unavailable

Send = tuple[OutMessage, str, int]
"""A message to publish with its id and first publish time (ms)."""


class Turns:
    """The batches of one topic written in the order their publishes started: a batch writes
    once every earlier batch of its topic has written (not: been confirmed)."""

    def __init__(self) -> None:
        self._last: dict[str, asyncio.Future[None]] = {}

    @contextlib.asynccontextmanager
    async def turn(self, topic: str) -> AsyncIterator[None]:
        before = self._last.get(topic)
        mine: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._last[topic] = mine
        try:
            if before is not None and not before.done():
                await asyncio.shield(before)
            yield
        finally:
            if before is not None and not before.done():
                # Given up while waiting: the next batch still waits for the one before.
                before.add_done_callback(partial(self._done, topic, mine))
            else:
                self._done(topic, mine)

    def _done(self, topic: str, mine: asyncio.Future[None], _: object = None) -> None:
        if not mine.done():
            mine.set_result(None)
        if self._last.get(topic) is mine:
            del self._last[topic]


class Publisher:
    """Declares what publishes need and sends them on the link's publishing channel."""

    def __init__(
        self,
        link: Link,
        clock: Clock,
        *,
        quorum: bool,
        delay_queue_template: str,
        naming: NamingScheme,
        confirm_timeout_s: float,
    ) -> None:
        self._link = link
        self._clock = clock
        self._quorum = quorum
        self._template = delay_queue_template
        self._naming = naming
        self._confirm_timeout_s = confirm_timeout_s
        self.declared: set[str] = set()
        """Topics whose queue was declared while open."""
        self.delay_declared: dict[str, tuple[DelayQueue, int]] = {}
        """Delay queues declared while open, by name: (queue, when it was last declared)."""
        self._routes: set[tuple[str, str, str]] = set()
        """Dead-letter routes declared while open: (exchange, queue, routing key)."""
        self._turns = Turns()

    def clear(self) -> None:
        """Forget every declaration (the back end closes)."""
        self.declared.clear()
        self.delay_declared.clear()
        self._routes.clear()

    def queue_arguments(self) -> dict[str, object]:
        """Declare arguments of a topic queue."""
        return {"x-queue-type": "quorum"} if self._quorum else {}

    def delay_queues(self, topic: str) -> list[str]:
        """The delay queues declared for `topic` while open."""
        target = queue_name(topic)
        return [name for name, (queue, _) in self.delay_declared.items() if queue.target == target]

    async def _declare_topic(self, channel: AbstractRobustChannel, topic: str) -> None:
        if topic in self.declared:
            return
        await channel.declare_queue(
            queue_name(topic),
            durable=True,
            arguments=self.queue_arguments(),
            robust=False,
        )
        self.declared.add(topic)

    async def _declare_delay(
        self, channel: AbstractRobustChannel, queue: DelayQueue, now_ms: int
    ) -> None:
        """Declare a delay queue unless declared lately (a declare also renews `x-expires`)."""
        seen = self.delay_declared.get(queue.name)
        if seen is not None and now_ms - seen[1] < queue.expires_ms // 4:
            return
        await channel.declare_queue(
            queue.name,
            durable=True,
            arguments=queue.arguments(),
            robust=False,
        )
        self.delay_declared[queue.name] = (queue, now_ms)

    async def _declare_dead_letter_route(
        self, channel: AbstractRobustChannel, topic: str, origin: str
    ) -> tuple[str, str]:
        """Declare the dead-letter exchange of the queue `origin` (a durable direct exchange named
        by the naming scheme) and bind the dead-letter queue `topic` to it with binding key = the
        origin queue; once per (exchange, queue, key) while open. Returns the exchange name and
        the routing key to publish with."""
        name = queue_name(dead_letter_exchange(self._naming, origin))
        queue, routing_key = queue_name(topic), queue_name(origin)
        if (name, queue, routing_key) in self._routes:
            return name, routing_key
        exchange = await channel.declare_exchange(
            name, aio_pika.ExchangeType.DIRECT, durable=True, robust=False
        )
        declared = await channel.declare_queue(
            queue, durable=True, arguments=self.queue_arguments(), robust=False
        )
        await declared.bind(exchange, routing_key=routing_key, robust=False)
        self._routes.add((name, queue, routing_key))
        return name, routing_key

    async def route(self, topic: str, items: Sequence[Send]) -> list[Item]:
        """Declare what publishing `items` to `topic` needs (its queue, delay queues, dead-letter
        routes; each once while open) and return them as publishes: (exchange, routing key,
        body, properties)."""
        channel = self._link.channel(self._link.publisher)
        now_ms = self._clock.now_ms()
        try:
            async with guard("publish", topic), asyncio.timeout(self._confirm_timeout_s):
                await self._declare_topic(channel, topic)
                routed: list[Item] = []
                for message, message_id, publish_ms in items:
                    exchange = ""
                    route = queue_name(topic)
                    dead_letter_key = message.properties.get(HEADER_DLX_ROUTING_KEY, "")
                    if message.deliver_at_ms > now_ms:
                        delay_ms = message.deliver_at_ms - now_ms
                        queue = delay_queue(self._template, queue_name(topic), delay_ms)
                        await self._declare_delay(channel, queue, now_ms)
                        route = queue.name
                    elif dead_letter_key:
                        exchange, route = await self._declare_dead_letter_route(
                            channel, topic, dead_letter_key
                        )
                    properties = encode(message, message_id, publish_ms)
                    routed.append((exchange, route, message.body, properties))
                return routed
        except (Unavailable, InvalidArgument):
            self.forget(topic)
            raise

    def forget(self, topic: str) -> None:
        """Declare `topic`'s queues and routes again on next use: a queue deleted behind our back
        makes publishes unroutable."""
        self.declared.discard(topic)
        for name in self.delay_queues(topic):
            del self.delay_declared[name]
        self._routes = {k for k in self._routes if k[1] != queue_name(topic)}

    async def send(self, topic: str, items: Sequence[Send]) -> None:
        """Publish (message, id, publish_ms) to `topic`, its delay queues or, for dead-letter
        copies, through the dead-letter exchange bound to `topic` (`route`); await all
        confirms. Routed and written CHUNK at a time, after the earlier batches of `topic`."""
        deadline = asyncio.get_running_loop().time() + self._confirm_timeout_s
        async with self._turns.turn(topic):
            routed: list[Item] = []
            for start in range(0, len(items), CHUNK):
                if start:
                    await asyncio.sleep(0)  # others' work between two chunks
                routed.extend(await self.route(topic, items[start : start + CHUNK]))
            channel = self._link.publishing(topic)
            try:
                async with guard("publish", topic), asyncio.timeout_at(deadline):
                    raw = await channel.get_underlay_channel()
                    confirmed = await write_batch(raw, routed)
            except (Unavailable, InvalidArgument):
                self.forget(topic)
                raise
        try:
            async with guard("publish", topic), asyncio.timeout_at(deadline):
                await confirmed()
        except (Unavailable, InvalidArgument):
            self.forget(topic)
            raise
