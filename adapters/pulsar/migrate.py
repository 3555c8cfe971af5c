"""A Pulsar topic as either side of `gateway migrate copy` (pulsar-client).

URL: `pulsar://HOST:PORT/TOPIC?subscription=S` (`pulsar+ssl://` with TLS; `token-file=PATH` for
token authentication). The topic is the rest of the path, so both
`pulsar://h:6650/persistent://public/default/orders` and `pulsar://h:6650/orders` work.

* As a source: the subscription's backlog, read with a Shared consumer (a new subscription starts
  at the earliest message); each message is acknowledged after the destination confirmed its
  copy. Its ledger key is a digest of its publish time, key, properties and body (two messages
  alike in all of these are one). The attempt count is its `RECONSUMETIMES` (a retry
  letter) or its redelivery count. The source counts as drained when nothing arrives for
  `IDLE_S`. Off a dead-letter topic (`...-DLQ`, `...-dlq`) each comes as a dead letter
  (`adapters.pulsar.migrate_dlq`).
* As a destination: messages are sent with their properties, key and, for a waiting retry, its
  due time (`deliver_at`), a dead letter with Pulsar's dead-letter properties; every batch is
  confirmed by the broker, then its keys are written to the ledger topic
  `TOPIC-migrate-ledger`, read back when a copy starts. Pulsar has no
  transaction here: a copy killed between the two may send that batch's copies again on the
  next run (at most one batch).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import math
import threading
import time
from collections.abc import Sequence

import pulsar

from adapters.pulsar.backend_codec import pulsar_topic
from adapters.pulsar.migrate_dlq import (
    as_dead_letter,
    count_of,
    is_dead_letter_topic,
    sent_properties,
)
from adapters.pulsar.product import MIGRATION_PORTS
from gateway.backend.base import OutMessage
from gateway.core.properties import DEAD_REASON
from gateway.errors import InvalidArgument
from gateway.limits import message_size
from gateway.migrate.endpoint import (
    DEAD_LETTER,
    READY,
    RETRY,
    DestinationRefused,
    DestinationUnavailable,
    Item,
    SourceUnavailable,
    Stored,
    Url,
    broker_ledgers,
    unrecorded,
)
from gateway.token_file import read_token_file

SCHEMES = ("pulsar", "pulsar+ssl")
IDLE_S = 2.0
"""Nothing received for this long: the source is drained."""
MORE_MS = 5
"""Once a batch has started, how long to wait for each further message."""
LEDGER_SUFFIX = "-migrate-ledger"
LEDGER_SUBSCRIPTION = "gateway-migrate-ledger"
OPERATION_TIMEOUT_S = 30
QUIET = pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)


def _client(url: Url, timeout_s: float) -> pulsar.Client:
    """A client whose connects and operations give up after `timeout_s` (`--timeout-s`)."""
    service = url.parts._replace(path="", query="", fragment="").geturl()
    token_file = url.option("token-file")
    auth = None
    if token_file:
        auth = pulsar.AuthenticationToken(read_token_file("token-file", token_file))
    return pulsar.Client(service, authentication=auth, logger=QUIET,
                         operation_timeout_seconds=max(1, math.ceil(timeout_s)),
                         connection_timeout_ms=max(1, int(timeout_s * 1000)))


def _topic(url: Url, field: str) -> str:
    topic = url.path
    if not topic:
        raise InvalidArgument(field, url.shown, "a topic: pulsar://HOST:PORT/TOPIC")
    return topic


class TopicSource:
    """A subscription's backlog on a Pulsar topic; see the module docstring."""

    def __init__(self, url: Url, timeout_s: float = OPERATION_TIMEOUT_S) -> None:
        self._timeout_s = timeout_s
        url.only("from", ("subscription", "token-file"))
        self._url = url
        self.topic = _topic(url, "from")
        self.subscription = url.option("subscription")
        if not self.subscription:
            raise InvalidArgument("from", url.shown, "?subscription=NAME")
        self._client: pulsar.Client | None = None
        self._consumer: pulsar.Consumer | None = None

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
        return broker_ledgers(self._url, MIGRATION_PORTS, "pulsar",
                              f"{pulsar_topic(self.topic)}?subscription={self.subscription}")

    @property
    def destinations(self) -> tuple[str, str]:
        return ("", "")

    async def open(self) -> None:
        client = self._client = _client(self._url, self._timeout_s)
        try:
            self._consumer = await asyncio.to_thread(
                client.subscribe, self.topic, self.subscription,
                consumer_type=pulsar.ConsumerType.Shared,
                initial_position=pulsar.InitialPosition.Earliest)
        except Exception as exc:  # pulsar-client raises its own exception classes
            await self.close()
            raise SourceUnavailable(f"source {self.name}: {exc}") from None

    async def count(self, exact: bool) -> dict[str, int] | None:
        return None  # a consumer cannot see the backlog's size (Pulsar's admin API can)

    def _receive(self, max_items: int) -> list[pulsar.Message]:
        consumer = self._consumer
        assert consumer is not None
        got: list[pulsar.Message] = []
        wait_ms = int(IDLE_S * 1000)
        while len(got) < max_items:
            try:
                got.append(consumer.receive(timeout_millis=wait_ms))
            except pulsar.Timeout:
                break
            wait_ms = MORE_MS
        return got

    async def take(self, max_items: int) -> list[Item]:
        try:
            messages = await asyncio.to_thread(self._receive, max_items)
        except pulsar.Timeout:
            return []
        except Exception as exc:
            raise SourceUnavailable(f"source {self.name}: {exc}") from None
        dead = is_dead_letter_topic(self.topic)
        return [_item(m, dead) for m in messages]

    async def ack(self, items: Sequence[Item]) -> None:
        consumer = self._consumer
        assert consumer is not None

        def acknowledge() -> None:
            for item in items:
                consumer.acknowledge(item.handle)

        try:
            await asyncio.to_thread(acknowledge)
        except Exception as exc:
            raise SourceUnavailable(f"source {self.name}: acknowledging failed ({exc}); the "
                                    "messages come again on the next run") from None

    async def close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            with contextlib.suppress(Exception):
                await asyncio.to_thread(client.close)


def _item(message: pulsar.Message, dead: bool) -> Item:
    """A received message as a copy item; off a dead-letter topic (`dead`) as a dead letter
    (`adapters.pulsar.migrate_dlq`)."""
    props = dict(message.properties())
    counted = count_of(props)
    attempt = max(counted, message.redelivery_count())
    out = OutMessage(message.data(), props, message.partition_key() or "", "", 0, "",
                     attempt, counted)
    key = _key(message, out)  # of the message as sent: the same on every run
    if dead:
        out = as_dead_letter(out, message.publish_timestamp())
    return Item(key, READY, out, message, message_size(out))


def _key(message: pulsar.Message, out: OutMessage) -> str:
    """A message's ledger key: a digest of its publish time, key, properties and body. Not its
    message id: a broker may hand a redelivered message out under another id (the gateway's
    Pulsar front end does), while these stay as the producer sent them."""
    h = hashlib.sha256(f"{message.publish_timestamp()}\0{out.key}".encode())
    for k in sorted(out.properties):
        h.update(f"\0{k}\0{out.properties[k]}".encode("utf-8", "replace"))
    h.update(b"\0" + out.body)
    return "sha256:" + h.hexdigest()


class TopicDestination:
    """Copies sent to a Pulsar topic; see the module docstring."""

    def __init__(self, url: Url, timeout_s: float = OPERATION_TIMEOUT_S) -> None:
        self._timeout_s = timeout_s
        url.only("to", ("token-file",))
        self._url = url
        self.topic = _topic(url, "to")
        self.ledger_topic = self.topic + LEDGER_SUFFIX
        self._client: pulsar.Client | None = None
        self._producer: pulsar.Producer | None = None
        self._ledger: pulsar.Producer | None = None
        self._known: set[tuple[str, str]] = set()

    @property
    def name(self) -> str:
        return self._url.shown

    @property
    def part(self) -> str:
        return ""

    async def check(self) -> str:
        return ("not checked: a Pulsar producer, the only way in, creates the topic where the "
                "broker allows that")

    async def open(self) -> None:
        client = self._client = _client(self._url, self._timeout_s)
        try:
            self._producer = await asyncio.to_thread(client.create_producer, self.topic,
                                                     batching_enabled=True,
                                                     block_if_queue_full=True)
            self._ledger = await asyncio.to_thread(client.create_producer, self.ledger_topic,
                                                   batching_enabled=False)
            await asyncio.to_thread(self._read_ledger, client)
        except Exception as exc:
            await self.close()
            raise DestinationUnavailable(f"destination {self.name}: {exc}") from None

    def _read_ledger(self, client: pulsar.Client) -> None:
        consumer = client.subscribe(self.ledger_topic, LEDGER_SUBSCRIPTION,
                                    consumer_type=pulsar.ConsumerType.Shared,
                                    initial_position=pulsar.InitialPosition.Earliest)
        try:
            while True:
                try:
                    message = consumer.receive(timeout_millis=int(IDLE_S * 1000))
                except pulsar.Timeout:
                    return
                with contextlib.suppress(ValueError, KeyError, TypeError):
                    entry = json.loads(message.data())
                    self._known.update((str(entry["ledger"]), str(k)) for k in entry["keys"])
        finally:
            consumer.close()  # nothing acknowledged: the next run reads it all again

    def _send(self, items: Sequence[Item]) -> list[str]:
        producer = self._producer
        assert producer is not None
        errors: list[str] = []
        left = [len(items)]
        done = threading.Event()
        now = int(time.time() * 1000)

        def sent(result: pulsar.Result, _: object) -> None:
            if result != pulsar.Result.Ok:
                errors.append(str(result))
            left[0] -= 1
            if left[0] == 0:
                done.set()

        for item in items:
            m = item.message
            props = sent_properties(m, item.part == DEAD_LETTER or DEAD_REASON in m.properties)
            due = m.deliver_at_ms if item.part == RETRY and m.deliver_at_ms > now else None
            producer.send_async(m.body, sent, properties=props, partition_key=m.key or None,
                                deliver_at=due)
        producer.flush()
        if not done.wait(OPERATION_TIMEOUT_S):
            errors.append("timed out")
        return errors

    async def put(self, ledger: str, items: Sequence[Item],
                  source_destinations: tuple[str, str], earlier: Sequence[str] = ()) -> Stored:
        fresh = unrecorded(self._known, (ledger, *earlier), items)
        if not fresh:
            return Stored(0, len(items))
        try:
            errors = await asyncio.to_thread(self._send, fresh)
        except Exception as exc:
            raise DestinationUnavailable(f"destination {self.name}: {exc}") from None
        if errors:
            raise DestinationRefused(f"destination {self.name}: {len(errors)} send(s) failed: "
                                     f"{errors[0]}")
        record = json.dumps({"ledger": ledger, "keys": [i.key for i in fresh]}).encode()
        assert self._ledger is not None
        try:
            await asyncio.to_thread(self._ledger.send, record)
        except Exception as exc:
            raise DestinationUnavailable(f"destination {self.name}: the ledger entry was not "
                                         f"written ({exc})") from None
        self._known.update((ledger, i.key) for i in fresh)
        return Stored(len(fresh), len(items) - len(fresh))

    async def close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            with contextlib.suppress(Exception):
                await asyncio.to_thread(client.close)


def side(url: Url, role: str, timeout_s: float = OPERATION_TIMEOUT_S
         ) -> TopicSource | TopicDestination:
    """The source or destination a `pulsar://` URL names."""
    if role == "source":
        return TopicSource(url, timeout_s)
    return TopicDestination(url, timeout_s)
