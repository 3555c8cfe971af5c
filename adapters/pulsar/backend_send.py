"""Publishing for the Pulsar back end: one cached producer per topic, sends awaited by receipt.

Also remembers the delayed messages it sent (until they are seen again or long overdue), the
only delayed count a client can know without an admin API.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import pulsar as pulsar_client

from adapters.pulsar.backend_codec import encode, pulsar_topic
from adapters.pulsar.backend_handoff import Handoff
from gateway.backend.base import OutMessage
from gateway.engine.clock import Clock
from gateway.errors import MessageTooLarge, Unavailable

pulsar: Any = pulsar_client
"""pulsar-client ships no type information: its classes are used untyped."""

DELAYED_GRACE_MS = 60_000
"""A delayed message not seen back this long after its time stops counting as delayed."""

Item = tuple[OutMessage, str, int]
"""A message to send with its id and first publish time."""


class Publisher:
    """Producers per topic on one client, and the delayed messages sent through them."""

    def __init__(
        self, send_timeout_ms: int, operation_timeout_s: int, clock: Clock
    ) -> None:
        self._send_timeout_ms = send_timeout_ms
        self._operation_timeout_s = operation_timeout_s
        self._clock = clock
        self.producers: dict[str, Any] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._delayed: dict[str, dict[tuple[str, int], int]] = {}
        """Per topic: (message id, deliver-at) -> how many such copies are on their way."""

    def clear(self) -> None:
        self.producers.clear()
        self._delayed.clear()

    async def producer(self, client: Callable[[], Any], topic: str) -> Any:
        """The producer of `topic`, created on first use (`client()` gives the client or raises
        `Unavailable`)."""
        found = self.producers.get(topic)
        if found is not None:
            return found
        async with self._locks.setdefault(topic, asyncio.Lock()):
            found = self.producers.get(topic)
            if found is not None:
                return found
            try:
                found = await asyncio.to_thread(
                    client().create_producer,
                    pulsar_topic(topic),
                    send_timeout_millis=self._send_timeout_ms,
                    batching_enabled=False,
                    block_if_queue_full=False,
                    max_pending_messages=10_000,
                )
            except pulsar.PulsarException as exc:
                raise Unavailable(f"cannot create a Pulsar producer on {topic!r}: {exc}") from exc
            self.producers[topic] = found
            return found

    async def send(
        self, client: Callable[[], Any], handoff: Handoff, topic: str, items: Sequence[Item]
    ) -> None:
        """Send every item to `topic`; return when Pulsar sent a receipt for each (`handoff`
        brings the receipts to this loop).

        A producer that is reconnecting refuses at once; receipts that fail or do not come within
        the send timeout raise `Unavailable` (a message too big for the broker:
        `MessageTooLarge`).
        """
        producer = await self.producer(client, topic)
        if not producer.is_connected():
            raise Unavailable(f"the Pulsar producer on {topic!r} is reconnecting")
        loop = asyncio.get_running_loop()
        now_ms = self._clock.now_ms()
        futures: list[asyncio.Future[Any]] = []
        for message, message_id, publish_ms in items:
            future: asyncio.Future[Any] = loop.create_future()
            futures.append(future)
            deliver_at = message.deliver_at_ms if message.deliver_at_ms > now_ms else None
            try:
                producer.send_async(
                    message.body,
                    partial(_receipt, handoff, future),
                    properties=encode(message, message_id, publish_ms),
                    partition_key=message.key or None,
                    ordering_key=message.key or None,
                    deliver_at=deliver_at,
                )
            except pulsar.PulsarException as exc:
                future.set_result(exc)
                continue
            if deliver_at is not None:
                pending = self._delayed.setdefault(topic, {})
                mark = (message_id, message.deliver_at_ms)
                pending[mark] = pending.get(mark, 0) + 1
        limit_s = self._send_timeout_ms / 1000 + self._operation_timeout_s
        try:
            async with asyncio.timeout(limit_s):
                results = await asyncio.gather(*futures)
        except TimeoutError as exc:
            raise Unavailable(f"Pulsar send receipts on {topic!r} did not arrive") from exc
        for result in results:
            if result == pulsar.Result.Ok:
                continue
            if result == pulsar.Result.MessageTooBig:
                size = max(len(m.body) for m, _, _ in items)
                raise MessageTooLarge(size, size - 1)
            raise Unavailable(f"Pulsar publish on {topic!r} failed: {result}")

    def seen(self, topic: str, message_id: str, deliver_at_ms: int) -> None:
        """A delayed message came back from the broker: no longer waiting."""
        pending = self._delayed.get(topic)
        if not pending or not deliver_at_ms:
            return
        mark = (message_id, deliver_at_ms)
        left = pending.get(mark, 0) - 1
        if left > 0:
            pending[mark] = left
        else:
            pending.pop(mark, None)

    def waiting(self, topic: str, now_ms: int) -> list[int]:
        """Deliver-at times of delayed messages sent to `topic` that are not due at `now_ms`."""
        pending = self._delayed.get(topic, {})
        due_times: list[int] = []
        for mark, times in list(pending.items()):
            due = mark[1]
            if due + DELAYED_GRACE_MS < now_ms:
                del pending[mark]
            elif due > now_ms:
                due_times.extend([due] * times)
        return due_times

    def forget(self, topic: str) -> None:
        """Stop counting the delayed messages of `topic` (purged)."""
        self._delayed.pop(topic, None)


def _receipt(handoff: Handoff, future: asyncio.Future[Any], result: Any, _message_id: Any) -> None:
    """Client thread: resolve a send future with the send result (on the loop)."""
    handoff.call(_settle, future, result)


def _settle(future: asyncio.Future[Any], result: Any) -> None:
    if not future.done():
        future.set_result(result)
