"""The RabbitMQ back end's connection: one robust connection with a publishing and a consuming
channel, and the one place broker failures become gateway errors.

`connect_robust` brings the connection, its channels, the consuming channel's prefetch and its
consumers back by themselves after broker trouble; while it is down `healthy()` is False and
`up()` raises `Unavailable`. A broker that stops answering (hung, stopped) keeps the connection
open until heartbeats time out, three minutes by default, while every publish times out: a probe
(a channel opened and closed every PROBE_INTERVAL_S) makes `healthy()` False once one takes
longer than PROBE_TIMEOUT_S, and True again once one works.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress

import aio_pika
from aio_pika.abc import AbstractRobustChannel, AbstractRobustConnection
from aio_pika.connection import make_url
from aio_pika.exceptions import AMQPError, ChannelInvalidStateError, ChannelPreconditionFailed

from adapters.amqp import receiver
from gateway.errors import InvalidArgument, Unavailable

BROKER_ERRORS = (AMQPError, ChannelInvalidStateError, ConnectionError, OSError, TimeoutError)
"""What a broker, a channel or a timeout raises."""
PROBE_INTERVAL_S = 5.0
"""How often the link checks that the broker answers."""
PROBE_TIMEOUT_S = 10.0
"""A broker that takes longer to open a channel counts as down (publishes wait as long for
their confirms)."""
log = logging.getLogger(__name__)


class Link:
    """The connection and its two channels: publishing (with confirms) and consuming."""

    def __init__(
        self, url: str, *, prefetch: int, connect_timeout_s: float, reconnect_interval_s: float
    ) -> None:
        self._url = url
        self._prefetch = prefetch
        self._connect_timeout_s = connect_timeout_s
        self._reconnect_interval_s = reconnect_interval_s
        self.connection: AbstractRobustConnection | None = None
        self.publisher: AbstractRobustChannel | None = None
        """The channel publishes go through, with publisher confirms."""
        self.consumer: AbstractRobustChannel | None = None
        """The channel every topic queue is consumed on, with the prefetch."""
        self.stalled: str | None = None
        """Why the broker counts as not answering (the last probe failed), or None."""
        self._probe: asyncio.Task[None] | None = None

    async def open(self) -> None:
        """Connect (robustly) and open the publishing and consuming channels."""
        if self.connection is not None:
            return
        receiver.install()
        # What `aio_pika.connect_robust` does, holding on to the connection: cancelled while it
        # connects (SIGTERM during start-up), it must be closed, else its reconnection task
        # swallows the cancellation and retries for ever, and the process never ends.
        interval = self._reconnect_interval_s
        connection = aio_pika.RobustConnection(
            make_url(self._url, reconnect_interval=interval), reconnect_interval=interval)
        try:
            await connection.connect(timeout=self._connect_timeout_s)
        except BaseException as exc:
            with suppress(*BROKER_ERRORS, RuntimeError):
                await connection.close()
            if isinstance(exc, BROKER_ERRORS):
                raise Unavailable(f"cannot connect to RabbitMQ: {exc!r}") from exc
            raise
        try:
            publisher = await connection.channel(publisher_confirms=True, on_return_raises=True)
            consumer = await connection.channel(publisher_confirms=False)
            await consumer.set_qos(prefetch_count=self._prefetch)
        except BROKER_ERRORS as exc:
            with suppress(*BROKER_ERRORS):
                await connection.close()
            raise Unavailable(f"cannot open RabbitMQ channels: {exc!r}") from exc
        self.connection = connection
        self.publisher = publisher
        self.consumer = consumer
        self._probe = asyncio.ensure_future(self._probing())

    async def _probing(self) -> None:
        while True:
            await asyncio.sleep(PROBE_INTERVAL_S)
            connection = self.connection
            if connection is None or not connection.connected.is_set():
                self.stalled = None  # down already, and said so; a reconnect starts afresh
                continue
            try:
                async with asyncio.timeout(PROBE_TIMEOUT_S):
                    channel = await connection.channel(publisher_confirms=False)
                    await channel.close()
            except BROKER_ERRORS as exc:
                if self.stalled is None:
                    log.warning("RabbitMQ does not answer: %r", exc)
                self.stalled = repr(exc)
                continue
            if self.stalled is not None:
                log.warning("RabbitMQ answers again")
            self.stalled = None

    async def close(self) -> None:
        if self._probe is not None:
            self._probe.cancel()
            with suppress(asyncio.CancelledError):
                await self._probe
            self._probe = None
        connection, self.connection = self.connection, None
        self.publisher = self.consumer = None
        if connection is not None:
            with suppress(*BROKER_ERRORS):
                await connection.close()

    def healthy(self) -> bool:
        connection = self.connection
        return (connection is not None and not connection.is_closed
                and connection.connected.is_set() and self.stalled is None)

    def up(self) -> AbstractRobustConnection:
        """The connection, or `Unavailable` while it is closed or reconnecting."""
        if self.connection is not None and self.stalled is not None:
            raise Unavailable(f"RabbitMQ does not answer: {self.stalled}")
        if self.connection is None or not self.healthy():
            raise Unavailable("RabbitMQ connection is down")
        return self.connection

    def channel(self, which: AbstractRobustChannel | None) -> AbstractRobustChannel:
        """`which` of the two channels once the connection is up, else `Unavailable`."""
        self.up()
        if which is None:
            raise Unavailable("RabbitMQ back end is not open")
        return which


@asynccontextmanager
async def guard(what: str, queue: str = "") -> AsyncIterator[None]:
    """Turn broker, channel and timeout failures into `Unavailable`; a queue that exists with
    other arguments (queue type, TTL) is a configuration error: `InvalidArgument`."""
    try:
        yield
    except ChannelPreconditionFailed as exc:
        raise InvalidArgument(
            "topic", queue, f"a queue whose declare arguments match the back end ({exc})"
        ) from exc
    except BROKER_ERRORS as exc:
        raise Unavailable(f"RabbitMQ {what} failed: {exc!r}") from exc
