"""A RabbitMQ queue as either side of `gateway migrate copy` (aio-pika).

URL: `amqp://USER:PASSWORD@HOST:PORT/VHOST?queue=NAME` (`amqps://` with TLS; the virtual host
is the path, `/` when empty, `%2F` spelled out otherwise, as in RabbitMQ's URI spec).

* As a source: every message in the queue, consumed with manual acks; a batch is acknowledged
  (`basic.ack` multiple) only after the destination confirmed its copies. Its key in the
  destination's ledger is its `message_id` property, or, without one, a digest of its body and
  properties. A message RabbitMQ hands out for the first time (`redelivered` false) cannot have
  been copied by an earlier run and is stored whatever the ledger says, so identical messages
  without ids are all copied; only a redelivered one whose key the ledger knows is taken for
  copied (after a kill, a message identical to one copied before may be taken for it). A
  message written by a gateway's
  RabbitMQ back end keeps its key, tag, due time and counters (its `x-gateway-*` headers); any
  other message is a ready message whose basic properties travel as `amqp.*` properties and its
  headers as properties, as the gateway's AMQP front end carries them; a RabbitMQ dead letter
  (`x-death`) keeps its reason, time and refused deliveries (`adapters.amqp.migrate_item`).
* As a destination: the queue must exist. Copies are published persistent, in AMQP
  transactions: each batch and the ledger entry naming its keys commit together (`tx.commit`),
  so a copy killed at any point stores nothing twice. The ledger is the durable queue
  `NAME.migrate-ledger`, read (and given back) when the copy starts. Every copy is a ready
  message there (a queue holds no due times); its retry count goes in `x-delivery-count`.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import uuid
from collections import deque
from collections.abc import Sequence

import aio_pika
from aio_pika.abc import AbstractChannel, AbstractConnection, AbstractQueue
from aio_pika.exceptions import AMQPError, ChannelClosed, ProbableAuthenticationError
from aiormq.abc import DeliveredMessage
from aiormq.exceptions import ChannelInvalidStateError, InvalidFrameError
from pamqp.constants import DOMAIN_REGEX

from adapters.amqp.backend_reconnect import quiet_library_logs
from adapters.amqp.frontend.messages import delivery_properties
from adapters.amqp.migrate_item import item_of, published_properties
from adapters.amqp.product import MIGRATION_PORTS, vhost
from gateway.engine.api import Delivery
from gateway.errors import FailedPrecondition, GatewayError, InvalidArgument
from gateway.migrate.endpoint import (
    READY,
    DestinationRefused,
    DestinationUnavailable,
    Item,
    NotAllowed,
    SourceUnavailable,
    Stored,
    Url,
    broker_ledgers,
    unrecorded,
)

SCHEMES = ("amqp", "amqps")
CONNECT_TIMEOUT_S = 10.0
IDLE_CHECK_S = 0.05
"""With nothing buffered, how long to wait for a delivery before asking whether the queue is
drained (a passive declare on a channel of its own)."""
FILL_S = 0.02
"""How long a short batch waits for more deliveries already on their way."""
LEDGER_SUFFIX = ".migrate-ledger"
LOCK_SUFFIX = ".migrate-lock"
CLOSE_WAIT_S = 2.0
"""How long a failed batch waits for its channel's close reason (a refusal or not)."""
BROKER_ERRORS = (AMQPError, ChannelInvalidStateError, ConnectionError, OSError, TimeoutError)
"""What a broker call may raise; `ChannelInvalidStateError` (a RuntimeError) is aiormq's for a
call on a channel the broker closed meanwhile."""


class SourceRefused(GatewayError):
    code = "FAILED_PRECONDITION"


def _broker_url(url: Url) -> str:
    """The URL aio-pika connects to: ours without the `queue` option."""
    return url.parts._replace(query="", fragment="").geturl()


def _queue(url: Url, field: str) -> str:
    url.only(field, ("queue",))
    name = url.option("queue")
    # The characters the client library (pamqp) declares: another one (`?queue=ö`) failed
    # the declare with a ValueError traceback.
    if (not name or len(name.encode()) > 255
            or not DOMAIN_REGEX["queue-name"].fullmatch(name)):
        raise InvalidArgument(field, url.shown, "?queue=NAME (1..255 bytes of letters A-Z a-z, "
                                                "digits and - _ . : @ # , / + space)")
    return name


async def _connect(url: Url, side: str, timeout_s: float) -> AbstractConnection:
    quiet_library_logs()  # the error below says it in one line; aiormq said it first
    try:
        return await aio_pika.connect(_broker_url(url), timeout=timeout_s)
    except ProbableAuthenticationError as exc:
        raise NotAllowed(f"{side} {url.shown}: RabbitMQ refused the credentials: {exc}") from None
    except InvalidFrameError as exc:
        if "Connection.Close" not in str(exc):
            raise _unavailable(url, side, exc) from None
        # RabbitMQ answers connection.open with a close (530 NOT_ALLOWED) for a virtual host
        # that does not exist or that the user may not use; aiormq keeps only this text.
        raise NotAllowed(f"{side} {url.shown}: RabbitMQ refused the virtual host "
                         f"{vhost(url)!r}: it does not exist, or the user may not use "
                         "it") from None
    except BROKER_ERRORS as exc:
        raise _unavailable(url, side, exc) from None


def _unavailable(url: Url, side: str, exc: BaseException) -> GatewayError:
    error = SourceUnavailable if side == "source" else DestinationUnavailable
    return error(f"{side} {url.shown}: cannot connect to RabbitMQ: {exc!r}")


class QueueSource:
    """The messages of one RabbitMQ queue; see the module docstring."""

    def __init__(self, url: Url, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
        self._url = url
        self._timeout_s = timeout_s
        self.queue_name = _queue(url, "from")
        self._connection: AbstractConnection | None = None
        self._channel: AbstractChannel | None = None
        self._queue: AbstractQueue | None = None
        self._buffer: deque[DeliveredMessage] = deque()
        self._arrived = asyncio.Event()
        self._consuming = False
        self._drained = False
        self._tag = ""
        self._probe: AbstractChannel | None = None

    @property
    def name(self) -> str:
        return self._url.shown

    @property
    def ledger(self) -> str:
        return self._ledgers()[0]

    @property
    def earlier_ledgers(self) -> tuple[str, ...]:
        return self._ledgers()[1:]

    def _ledgers(self) -> tuple[str, ...]:
        return broker_ledgers(self._url, MIGRATION_PORTS, "amqp",
                              f"{vhost(self._url)}?queue={self.queue_name}")

    @property
    def destinations(self) -> tuple[str, str]:
        return ("", "")

    async def open(self) -> None:
        self._connection = await _connect(self._url, "source", self._timeout_s)
        try:
            self._channel = await self._connection.channel(publisher_confirms=False)
            self._queue = await self._channel.declare_queue(self.queue_name, passive=True)
        except ChannelClosed as exc:
            await self.close()
            raise SourceRefused(f"source {self.name}: no queue {self.queue_name!r} "
                                f"({exc})") from None
        except BROKER_ERRORS as exc:
            await self.close()
            raise SourceUnavailable(f"source {self.name}: {exc!r}") from None

    async def _ready_count(self) -> int:
        """Messages ready in the queue (not those delivered and unacknowledged), asked on a
        channel of its own."""
        assert self._connection is not None
        try:
            if self._probe is None or self._probe.is_closed:
                self._probe = await self._connection.channel(publisher_confirms=False)
            queue = await self._probe.declare_queue(self.queue_name, passive=True)
            return int(queue.declaration_result.message_count or 0)
        except BROKER_ERRORS as exc:
            raise SourceUnavailable(f"source {self.name}: {exc!r}") from None

    async def count(self, exact: bool) -> dict[str, int] | None:
        return {READY: await self._ready_count()}

    async def _on_message(self, message: DeliveredMessage) -> None:
        self._buffer.append(message)
        self._arrived.set()

    async def _consume(self, max_items: int) -> None:
        assert self._channel is not None and self._queue is not None
        try:
            # Two batches may be out at once (one being stored, the next taken): room for three.
            await self._channel.set_qos(prefetch_count=min(65535, 3 * max_items))
            # aiormq's deliveries as they are: no message object per delivery.
            raw = await self._channel.get_underlay_channel()
            ok = await raw.basic_consume(self._queue.name, self._on_message, no_ack=False)
            self._tag = ok.consumer_tag or ""
        except BROKER_ERRORS as exc:
            raise SourceUnavailable(f"source {self.name}: {exc!r}") from None
        self._consuming = True

    async def _cancel(self) -> None:
        """Stop the consumer: RabbitMQ sends every delivery before its cancel-ok, so what it
        delivered is in the buffer once this returns."""
        assert self._channel is not None
        try:
            raw = await self._channel.get_underlay_channel()
            await raw.basic_cancel(self._tag)
        except BROKER_ERRORS as exc:
            raise SourceUnavailable(f"source {self.name}: {exc!r}") from None
        self._drained = True

    async def take(self, max_items: int) -> list[Item]:
        if not self._consuming:
            await self._consume(max_items)
        while not self._buffer:
            if self._drained:
                return []
            self._check_alive()
            self._arrived.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._arrived.wait(), IDLE_CHECK_S)
            if not self._buffer and await self._ready_count() == 0:
                await self._cancel()
        if len(self._buffer) < max_items and not self._drained:
            await asyncio.sleep(FILL_S)
        taken = [self._buffer.popleft() for _ in range(min(max_items, len(self._buffer)))]
        return [item_of(m) for m in taken]

    def _check_alive(self) -> None:
        if self._channel is None or self._channel.is_closed:
            raise SourceUnavailable(f"source {self.name}: the channel closed")

    async def ack(self, items: Sequence[Item]) -> None:
        if not items:
            return
        assert self._channel is not None
        last = max(int(getattr(i.handle, "delivery_tag", 0) or 0) for i in items)
        try:
            raw = await self._channel.get_underlay_channel()
            await raw.basic_ack(last, multiple=True)
        except BROKER_ERRORS as exc:
            raise SourceUnavailable(f"source {self.name}: acknowledging failed ({exc!r}); the "
                                    "messages come again on the next run") from None

    async def close(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            with contextlib.suppress(*BROKER_ERRORS):
                await connection.close()


class QueueDestination:
    """Copies published into one RabbitMQ queue, once each; see the module docstring."""

    def __init__(self, url: Url, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
        self._url = url
        self._timeout_s = timeout_s
        self.queue_name = _queue(url, "to")
        # Within 255 bytes: a queue name over 240 bytes made `Q.migrate-ledger` one that
        # RabbitMQ cannot have (a ValueError traceback before anything was copied).
        self.ledger_queue = _suffixed(self.queue_name, LEDGER_SUFFIX)
        self.lock_queue = _suffixed(self.queue_name, LOCK_SUFFIX)
        self._connection: AbstractConnection | None = None
        self._channel: AbstractChannel | None = None
        self._known: set[tuple[str, str]] = set()
        self._probe: AbstractChannel | None = None

    @property
    def name(self) -> str:
        return self._url.shown

    @property
    def part(self) -> str:
        return ""  # each counted as the source hands it out (all are ready messages here)

    async def open(self) -> None:
        self._connection = await _connect(self._url, "destination", self._timeout_s)
        try:
            await self._exists()
            await self._lock()
            channel = await self._connection.channel(publisher_confirms=False)
            await channel.declare_queue(self.ledger_queue, durable=True)
            await self._read_ledger(channel)
            await channel.close()  # gives the ledger's messages back
            self._channel = await self._connection.channel(publisher_confirms=False)
            await self._channel.transaction().select()
        except BROKER_ERRORS as exc:
            await self.close()
            raise DestinationUnavailable(f"destination {self.name}: {exc!r}") from None
        except GatewayError:
            await self.close()
            raise

    async def _exists(self) -> None:
        """Refuse a queue that does not exist (a passive declare on a channel of its own, which
        RabbitMQ closes for it)."""
        assert self._connection is not None
        channel = await self._connection.channel(publisher_confirms=False)
        try:
            await channel.declare_queue(self.queue_name, passive=True)
        except ChannelClosed as exc:
            # Bad usage (exit 2), as a missing source queue is: nothing was refused.
            raise InvalidArgument("to", self.name, _no_queue(self.queue_name, exc)) from None
        await channel.close()

    async def check(self) -> str:
        """A dry run's check, changing nothing: the connection (credentials, virtual host) and
        the queue (a passive declare); no ledger queue, no lock."""
        self._connection = await _connect(self._url, "destination", self._timeout_s)
        try:
            await self._exists()
        except BROKER_ERRORS as exc:
            raise DestinationUnavailable(f"destination {self.name}: {exc!r}") from None
        finally:
            await self.close()
        return ""

    async def _lock(self) -> None:
        """One copy into a queue at a time: the ledger is read once, when a copy starts, so two
        at once each stored what the other had (a gateway group copied twice at once doubled
        the queue). The lock is an exclusive queue of this connection: RabbitMQ refuses it to
        another connection while this one is open and deletes it when it closes (`kill -9`
        included)."""
        assert self._connection is not None
        channel = await self._connection.channel(publisher_confirms=False)
        try:
            await channel.declare_queue(self.lock_queue, exclusive=True)
        except ChannelClosed as exc:
            raise FailedPrecondition(
                f"destination {self.name}: another gateway migrate copy into queue "
                f"{self.queue_name!r} is running (it holds {self.lock_queue!r}): run one at a "
                f"time ({exc})") from None
        await channel.close()

    async def _read_ledger(self, channel: AbstractChannel) -> None:
        queue = await channel.declare_queue(self.ledger_queue, passive=True)
        batches: list[tuple[str, str, list[str]]] = []
        void: set[str] = set()
        while True:
            message = await queue.get(no_ack=False, fail=False)
            if message is None:
                break
            try:
                entry = json.loads(message.body)
                if "void" in entry:
                    void.add(str(entry["void"]))
                    continue
                batches.append((str(entry.get("batch", "")), str(entry["ledger"]),
                                [str(key) for key in entry["keys"]]))
            except (ValueError, KeyError, TypeError, AttributeError):
                continue  # not one of ours: left alone
        for batch, ledger, keys in batches:
            if not batch or batch not in void:
                self._known.update((ledger, key) for key in keys)

    async def _void(self, batch: str) -> None:
        """Record that batch `batch` was refused: its ledger entry may have been committed
        without all its copies (RabbitMQ's transactions are not atomic across queues: a queue
        with `x-overflow: reject-publish` refuses some copies, commit fails with 406 'partial tx
        completion', and the ledger queue has taken the entry). Its keys then count as not
        copied: a second run stores them (again, for those the queue took), and none is taken
        for copied and removed at the source uncopied."""
        assert self._connection is not None
        record = json.dumps({"void": batch}).encode()
        try:
            channel = await self._connection.channel(publisher_confirms=True)
            await channel.default_exchange.publish(
                aio_pika.Message(record, delivery_mode=aio_pika.DeliveryMode.PERSISTENT),
                self.ledger_queue)
            await channel.close()
        except BROKER_ERRORS as exc:
            raise DestinationUnavailable(
                f"destination {self.name}: RabbitMQ refused a batch in part, and its ledger "
                f"entry (batch {batch}) could not be voided ({exc!r}): before running again, "
                f"remove that entry from {self.ledger_queue!r}") from None

    async def put(self, ledger: str, items: Sequence[Item],
                  source_destinations: tuple[str, str], earlier: Sequence[str] = ()) -> Stored:
        assert self._channel is not None
        fresh = unrecorded(self._known, (ledger, *earlier), items)
        if not fresh:
            return Stored(0, len(items))
        exchange = self._channel.default_exchange
        batch = uuid.uuid4().hex
        try:
            for item in fresh:
                # Not mandatory: a return is not seen without publisher confirms (aiormq logs
                # each); a queue gone is found below.
                await exchange.publish(_amqp_message(item), self.queue_name, mandatory=False)
            record = json.dumps({"ledger": ledger, "keys": [i.key for i in fresh],
                                 "batch": batch}).encode()
            await exchange.publish(
                aio_pika.Message(record, delivery_mode=aio_pika.DeliveryMode.PERSISTENT),
                self.ledger_queue)
            await self._channel.transaction().commit()
        except BROKER_ERRORS as exc:
            refused = await self._refusal(exc)
            if refused is not None:
                await self._void(batch)
                raise DestinationRefused(
                    f"destination {self.name}: RabbitMQ refused the batch ({refused}); it stays "
                    "at the source (copies the queue took before refusing may be stored again "
                    "by a second run)") from None
            raise DestinationUnavailable(f"destination {self.name}: the batch was not "
                                         f"committed ({exc!r})") from None
        if not await self._queue_exists():
            await self._void(batch)
            raise DestinationRefused(
                f"destination {self.name}: queue {self.queue_name!r} no longer exists (deleted "
                "during the copy): RabbitMQ dropped the last batch, which stays at the source; "
                "declare the queue again and run the copy again")
        self._known.update((ledger, i.key) for i in fresh)
        return Stored(len(fresh), len(items) - len(fresh))

    async def _queue_exists(self) -> bool:
        """Whether the queue is still there after a commit: the default exchange drops a copy
        for a queue deleted meanwhile, and the transaction commits without it (with the
        ledger entry)."""
        assert self._connection is not None
        try:
            if self._probe is None or self._probe.is_closed:
                self._probe = await self._connection.channel(publisher_confirms=False)
            await self._probe.declare_queue(self.queue_name, passive=True)
        except ChannelClosed:
            return False
        except BROKER_ERRORS as exc:
            raise DestinationUnavailable(f"destination {self.name}: {exc!r}") from None
        return True

    async def _refusal(self, exc: BaseException) -> ChannelClosed | None:
        """The broker's channel error that failed the batch, if it was one (a copy whose
        `user_id` is not the connection's user, a queue deleted meanwhile): the copy is
        refused, the broker is not away. aiormq raises it, or a `ChannelInvalidStateError` for
        the call after it, with the error on the channel's `closing`."""
        if isinstance(exc, ChannelClosed):
            return exc
        if self._channel is None:
            return None
        try:
            underlay = await self._channel.get_underlay_channel()
        except BROKER_ERRORS:
            return None
        closing = underlay.closing
        # The broker's close frame may have been read and this call refused before the channel
        # finished closing: its reason is on `closing` a moment later.
        await asyncio.wait([closing], timeout=CLOSE_WAIT_S)
        if closing.done() and not closing.cancelled():
            reason = closing.exception()
            if isinstance(reason, ChannelClosed):
                return reason
        return None

    async def close(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            with contextlib.suppress(*BROKER_ERRORS):
                await connection.close()


def _no_queue(name: str, exc: BaseException) -> str:
    return (f"a queue that exists: RabbitMQ has no queue {name!r} there: declare it first, "
            f"with its arguments ({exc})")


def _suffixed(name: str, suffix: str) -> str:
    """`name` + `suffix`, within RabbitMQ's 255 bytes (a long name is cut and a digest added)."""
    if len((name + suffix).encode()) <= 255:
        return name + suffix
    digest = hashlib.sha256(name.encode()).hexdigest()[:16]
    return name.encode()[:200].decode("utf-8", "ignore") + "." + digest + suffix


def _amqp_message(item: Item) -> aio_pika.Message:
    m = item.message
    delivery = Delivery("", m.message_id, "", "", m.body, published_properties(m.properties),
                        m.key, m.tag, m.attempt, m.retries, 0, 0, m.deliver_at_ms)
    props = delivery_properties(delivery)
    return aio_pika.Message(
        m.body, headers=props.get("headers") or None, content_type=props.get("content_type"),
        content_encoding=props.get("content_encoding"),
        delivery_mode=aio_pika.DeliveryMode.PERSISTENT, priority=props.get("priority"),
        correlation_id=props.get("correlation_id"), reply_to=props.get("reply_to"),
        message_id=props.get("message_id") or m.message_id or None,
        timestamp=props.get("timestamp"), type=props.get("message_type"),
        user_id=props.get("user_id"), app_id=props.get("app_id"),
    )


def side(url: Url, role: str, timeout_s: float = CONNECT_TIMEOUT_S
         ) -> QueueSource | QueueDestination:
    """The source or destination an `amqp://` URL names (`timeout_s`: its connect's)."""
    if role == "source":
        return QueueSource(url, timeout_s)
    return QueueDestination(url, timeout_s)
