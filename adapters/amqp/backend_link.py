"""The RabbitMQ back end's connection: one robust connection with a publishing and a consuming
channel, and the one place broker failures become gateway errors.

The connection (`backend_reconnect.BackoffConnection`, aio-pika's robust connection) brings
itself, its channels, the consuming channel's prefetch and its consumers back after broker
trouble, waiting 0.5 s doubling to 15 s with jitter between attempts (`link_rules.RECONNECT`),
with one warning per attempt; while it is down `healthy()` is False and `up()` raises
`Unavailable`. Credentials refused on a reconnect (ACCESS_REFUSED), or a broker TLS certificate
the gateway does not trust (unknown CA, wrong host name, expired), make `fatal` say so: no
attempt with them can work, and the gateway exits for its supervisor to start it again (with
the credentials or CA bundle of now, a rotated Secret say).

At start (`open`) a broker that refuses the gateway (credentials, virtual host, TLS certificate)
raises `BackendUnreachable` at once; one that cannot be reached raises it too with `start_wait_s`
0, and otherwise `open` returns not connected and the link keeps trying in the background as
after an outage: `fatal` is set if it has not connected within `start_wait_s`.

A broker that stops answering (hung, stopped) keeps the connection open until heartbeats time
out, three minutes by default, while every publish times out: a probe (a channel opened and
closed every PROBE_INTERVAL_S) makes `healthy()` False once one takes longer than
PROBE_TIMEOUT_S, and True again once one works.
"""

from __future__ import annotations

import asyncio
import logging
import random
import zlib
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress
from typing import Any

from aio_pika.abc import AbstractRobustChannel, AbstractRobustConnection
from aio_pika.exceptions import AMQPError, ChannelInvalidStateError, ChannelPreconditionFailed

from adapters.amqp import receiver
from adapters.amqp.backend_reconnect import BackoffConnection, quiet_library_logs
from adapters.amqp.link_rules import (
    RECONNECT,
    Backoff,
    reason,
    refusal,
    refused_always,
)
from gateway.errors import BackendUnreachable, InvalidArgument, Unavailable, masked

BROKER_ERRORS = (AMQPError, ChannelInvalidStateError, ConnectionError, OSError, TimeoutError)
"""What a broker, a channel or a timeout raises."""
PROBE_INTERVAL_S = 5.0
"""How often the link checks that the broker answers."""
PROBE_TIMEOUT_S = 10.0
"""A broker that takes longer to open a channel counts as down (publishes wait as long for
their confirms)."""
log = logging.getLogger(__name__)


PUBLISH_CHANNELS = 4
"""Channels publishes go through, a topic always on the same one (`Link.publishing`): the
broker confirms a channel's publishes in order, so one topic's flood holds back only the topics
that share its channel."""


class Link:
    """The connection and its channels: publishing (with confirms) and consuming."""

    def __init__(
        self, url: str, *, prefetch: int, connect_timeout_s: float,
        reconnect: Backoff = RECONNECT, start_wait_s: float = 0.0,
        draw: Callable[[], float] = random.random,
    ) -> None:
        self._url = url
        self._shown = masked(url)
        self._prefetch = prefetch
        self._connect_timeout_s = connect_timeout_s
        self._reconnect = reconnect
        self._start_wait_s = start_wait_s
        self._draw = draw
        self.connection: AbstractRobustConnection | None = None
        """The connection once it was made and its channels opened (None before)."""
        self.publisher: AbstractRobustChannel | None = None
        """The first publishing channel (with publisher confirms): declarations go through it."""
        self.publishers: tuple[AbstractRobustChannel, ...] = ()
        """Every publishing channel (the first is `publisher`)."""
        self.consumer: AbstractRobustChannel | None = None
        """The channel every topic queue is consumed on, with the prefetch."""
        self.stalled: str | None = None
        """Why the broker counts as not answering (the last probe failed), or None."""
        self.fatal: str | None = None
        """Why no further attempt can connect (`Backend.fatal`), or None."""
        self._pending: BackoffConnection | None = None
        self._first: asyncio.Future[BaseException | None] | None = None
        """While `open` makes its first attempt: resolved with that attempt's failure."""
        self._ended = asyncio.Event()
        self._last = ""
        self._probe: asyncio.Task[None] | None = None
        self._starting: asyncio.Task[None] | None = None

    async def open(self) -> None:
        """Connect (robustly) and open the publishing and consuming channels; see the module
        docstring for a broker that cannot be reached or refuses the gateway."""
        if self._pending is not None:
            return
        self.fatal = None
        self._ended.clear()
        receiver.install()
        quiet_library_logs()
        connection = BackoffConnection(self._url, backoff=self._reconnect, watcher=self,
                                       draw=self._draw)
        self._pending = connection
        self._first = first = asyncio.get_running_loop().create_future()
        # Cancelled while it connects (SIGTERM during start-up), the connection must be closed,
        # else its reconnection task swallows the cancellation and retries for ever, and the
        # process never ends.
        attempt = asyncio.ensure_future(connection.connect(timeout=self._connect_timeout_s))
        try:
            await asyncio.wait([attempt, first], return_when=asyncio.FIRST_COMPLETED)
            self._first = None
            if attempt.done():
                attempt.result()
                await self._open_channels(connection)
                return
        except BaseException:
            self._first = None
            attempt.cancel()
            await self._discard()
            raise
        exc = first.result()
        refused = refusal(exc, self._url) if exc is not None else None
        if refused is not None or self._start_wait_s <= 0:
            attempt.cancel()
            await self._discard()
            raise BackendUnreachable(
                f"cannot connect to RabbitMQ at {self._shown}: {refused or self._last}")
        log.warning("RabbitMQ connection attempt 1 failed: %s; not serving until one works, "
                    "trying again with back-off for up to %g s (start_wait_s)", self._last,
                    self._start_wait_s, extra={"url": self._shown})
        self._starting = asyncio.ensure_future(self._open_late(connection, attempt))

    async def _open_late(self, connection: BackoffConnection,
                         attempt: asyncio.Future[Any]) -> None:
        """Wait for the connection `open` could not make at once, then open the channels;
        give up (`fatal`) after `start_wait_s`."""
        ended: asyncio.Future[Any] = asyncio.ensure_future(self._ended.wait())
        try:
            async with asyncio.timeout(self._start_wait_s):
                while True:
                    await asyncio.wait([attempt, ended], return_when=asyncio.FIRST_COMPLETED)
                    if self.fatal is not None:
                        return
                    try:
                        await self._open_channels(connection)
                        return
                    except Unavailable as exc:  # lost again at once: wait for the next one
                        log.warning("%s", exc.message)
                        await asyncio.sleep(self._reconnect.first_s)
                        attempt = asyncio.ensure_future(connection.connected.wait())
        except TimeoutError:
            self.fatal = (f"cannot connect to RabbitMQ at {self._shown} within "
                          f"{self._start_wait_s:g} s (start_wait_s): {self._last}")
        finally:
            ended.cancel()
            attempt.cancel()

    async def _open_channels(self, connection: BackoffConnection) -> None:
        try:
            async with asyncio.timeout(self._connect_timeout_s):
                publishers = tuple([await connection.channel(publisher_confirms=True,
                                                             on_return_raises=True)
                                    for _ in range(PUBLISH_CHANNELS)])
                consumer = await connection.channel(publisher_confirms=False)
                await consumer.set_qos(prefetch_count=self._prefetch)
        except BROKER_ERRORS as exc:
            raise BackendUnreachable(
                f"cannot open RabbitMQ channels at {self._shown}: {reason(exc)}") from exc
        self.connection = connection
        self.publisher = publishers[0]
        self.publishers = publishers
        self.consumer = consumer
        self._probe = asyncio.ensure_future(self._probing())

    # -- what the connection tells (`backend_reconnect.Watcher`) -----------------------------

    def lost(self, exc: BaseException | None) -> None:
        self._last = reason(exc) if exc is not None else "closed"
        log.warning("RabbitMQ connection lost: reconnecting",
                    extra={"url": self._shown, "error": self._last})

    def failed(self, exc: BaseException | None, failures: int, delay_s: float) -> None:
        self._last = reason(exc) if exc is not None else "closed"
        refused = refusal(exc, self._url) if exc is not None else None
        if self._first is not None:  # `open` decides what to say
            if not self._first.done():
                self._first.set_result(exc)
            return
        # Refused before the link ever served (a late start), or credentials or the broker's
        # TLS certificate refused at any time: no attempt with these settings can work. A
        # virtual host refused to a link that served is tried again: RabbitMQ refuses one that
        # is restarting ("vhost is down").
        if refused is not None and self.fatal is None and (
                self.connection is None or (exc is not None and refused_always(exc))):
            self.fatal = f"cannot connect to RabbitMQ at {self._shown}: {refused}"
            self._ended.set()
            return
        if self.fatal is None:
            log.warning("RabbitMQ connection attempt %d failed: %s; next in %.1f s", failures,
                        refused or self._last, delay_s, extra={"url": self._shown})

    def connected(self, failures: int) -> None:
        if self.connection is not None or self._starting is not None:  # not `open`'s at once
            log.warning("RabbitMQ connected after %d failed attempts", failures,
                        extra={"url": self._shown})

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

    async def _discard(self) -> None:
        connection, self._pending = self._pending, None
        if connection is not None:
            with suppress(*BROKER_ERRORS, RuntimeError):
                await connection.close()

    async def close(self) -> None:
        for task in (self._starting, self._probe):
            if task is not None:
                task.cancel()
                with suppress(asyncio.CancelledError):
                    await task
        self._starting = self._probe = None
        self.connection = None
        self.publisher = self.consumer = None
        self.publishers = ()
        await self._discard()

    def healthy(self) -> bool:
        """Connected, answering, and every channel open again after a reconnect (the
        connection is up a moment before its channels are restored: a publish then found its
        channel closed)."""
        connection = self.connection
        return (connection is not None and not connection.is_closed
                and connection.connected.is_set() and self.stalled is None
                and not any(channel.is_closed for channel in self.publishers)
                and (self.consumer is None or not self.consumer.is_closed))

    def up(self) -> AbstractRobustConnection:
        """The connection, or `Unavailable` while it is closed or reconnecting."""
        if self.connection is not None and self.stalled is not None:
            raise Unavailable(f"RabbitMQ does not answer: {self.stalled}")
        if self.connection is None or not self.healthy():
            raise Unavailable("RabbitMQ is not connected" if self.connection is None
                              else "RabbitMQ connection is down")
        return self.connection

    def publishing(self, topic: str) -> AbstractRobustChannel:
        """The publishing channel of `topic` (always the same one while open)."""
        publishers = self.publishers
        if not publishers:
            return self.channel(None)
        return self.channel(publishers[zlib.crc32(topic.encode("utf-8", "surrogatepass"))
                                       % len(publishers)])

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
