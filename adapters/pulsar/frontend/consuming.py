"""The consumer side of one client connection: SUBSCRIBE, ACK, CLOSE_CONSUMER, UNSUBSCRIBE,
SEEK, and closing a consumer (by the client, by a seek, or when the connection ends).

`ConsumerCommands` is a part of `Connection` (its base class): it keeps the connection's
consumers (`_consumers`) and the (topic, subscription) each is attached to (`_topics`). Commands
that change a subscription run under its name's lock (`names`); see `moves` for UNSUBSCRIBE and
SEEK.
"""

from __future__ import annotations

import functools
from typing import Any

import structlog

from adapters.pulsar.frontend import edge, moves, replies, starts, subscribing
from adapters.pulsar.frontend.consumers import SUB_TYPES, ConsumerSession
from adapters.pulsar.frontend.shared import Shared
from adapters.pulsar.frontend.topics import engine_topic, topic_or_none
from adapters.pulsar.wire import wire_pb2 as pb
from gateway.engine.api import ConsumerType

log = structlog.get_logger(__name__)


class ConsumerCommands:
    """The consumer commands of a `Connection`."""

    id: int
    _shared: Shared
    _consumers: dict[int, ConsumerSession]
    _topics: dict[int, tuple[str, str]]
    _principal: Any
    """The connection's authenticated principal (None without authentication)."""
    _owner: str
    """Its name ("" without authentication)."""

    def write(self, data: bytes) -> None:
        raise NotImplementedError

    async def drain(self) -> None:
        raise NotImplementedError

    def _check(self, topic: str, group: str | None) -> None:
        raise NotImplementedError

    def _busy(self, request_id: int, code: int, text: str, command: str) -> None:
        raise NotImplementedError

    def _refuse(self, request_id: int, exc: BaseException, command: str) -> None:
        raise NotImplementedError

    async def _subscribe(self, request: pb.CommandSubscribe) -> None:
        if request.consumer_id in self._consumers:  # a client's retry is answered again
            used = self._topics[request.consumer_id]
            if (topic_or_none(request.topic), request.subscription) == used:
                self.write(replies.success(request.request_id))
            else:
                text = (f"consumer id {request.consumer_id} is in use for subscription "
                        f"{used[1]!r} on topic {used[0]!r}")
                self._busy(request.request_id, pb.ConsumerBusy, text, "SUBSCRIBE")
            return
        if len(self._consumers) >= self._shared.max_consumers:
            text = f"a connection may have {self._shared.max_consumers} consumers"
            self._busy(request.request_id, pb.ConsumerBusy, text, "SUBSCRIBE")
            return
        consumer_type = SUB_TYPES[request.subType]
        member = self.key(request.consumer_id)
        try:
            topic = engine_topic(request.topic)
            self._check(topic, request.subscription)
            self._shared.schemas.check_consumer(
                topic, request.schema if request.HasField("schema") else None, "subscribe.schema")
            async with self._shared.names.hold(topic, request.subscription):
                consumer = await subscribing.attach(
                    self._shared, request, topic, member,
                    functools.partial(self._kick, request.consumer_id),
                    f"pulsar-{self.id}-{request.consumer_id}",
                    self._owner,
                )
        except Exception as exc:
            self._refuse(request.request_id, exc, "SUBSCRIBE")
            return
        self._consumers[request.consumer_id] = ConsumerSession(
            consumer_id=request.consumer_id,
            consumer_type=consumer_type,
            engine=self._shared.engine,
            consumer=consumer,
            write=self.write,
            drain=self.drain,
            ids=self._shared.ids,
            epoch=request.consumer_epoch if request.HasField("consumer_epoch") else None,
            max_unacked=self._shared.max_unacked,
            durable=request.durable,
            start=starts.start_key(request),
        )
        self._topics[request.consumer_id] = (topic, request.subscription)
        self._shared.subscriptions.hold(topic, request.subscription, member,
                                        self._consumers[request.consumer_id])
        self.write(replies.success(request.request_id))
        if consumer_type is ConsumerType.FAILOVER:
            session = self._consumers[request.consumer_id]
            session.watch(consumer.active)
            consumer.watch_active(session.watch)

    def _known(self, consumer_id: int, request_id: int) -> ConsumerSession | None:
        """The consumer a command names, or None (answered ConsumerNotFound)."""
        session = self._consumers.get(consumer_id)
        if session is None:
            self.write(replies.error(request_id, pb.ConsumerNotFound,
                                     f"unknown consumer {consumer_id}"))
        return session

    async def _last_message_id(self, request: pb.CommandGetLastMessageId) -> None:
        """GET_LAST_MESSAGE_ID (`ConsumerSession.last_ids`)."""
        session = self._known(request.consumer_id, request.request_id)
        if session is None:
            return
        topic, subscription = self._topics[request.consumer_id]
        engine = self._shared.engine
        try:
            # The newest message first: one published meanwhile is in the backlog then.
            found = await engine.last_id(topic) if session.sent_nothing else None
            backlog = await engine.backlog(topic, subscription)
        except Exception as exc:
            self._refuse(request.request_id, exc, "GET_LAST_MESSAGE_ID")
            return
        last, mark = session.last_ids(backlog, self._shared.ids.key(found) if found else None)
        self.write(replies.last_message_id(request.request_id, last, mark))

    def key(self, consumer_id: int) -> str:
        """A name for one consumer of this connection, unique within the front end."""
        return f"{self.id}/{consumer_id}"

    async def _ack(self, request: pb.CommandAck) -> None:
        session = self._consumers.get(request.consumer_id)
        problem = None
        if session is not None:
            topic, subscription = self._topics[request.consumer_id]
            peers = self._shared.subscriptions.holders(topic, subscription)
            problem = await session.ack(request, peers)
        if request.HasField("request_id"):
            code, text = problem if problem is not None else (None, "")
            self.write(replies.ack_response(request.consumer_id, request.request_id, code, text))

    async def _close_consumer(self, consumer_id: int, request_id: int) -> None:
        session = self._consumers.pop(consumer_id, None)
        if session is not None:
            await self._drop_consumer(session)
        self.write(replies.success(request_id))

    async def _unsubscribe(self, request: pb.CommandUnsubscribe) -> None:
        """`moves.unsubscribe` of the consumer's subscription."""
        session = self._known(request.consumer_id, request.request_id)
        if session is None:
            return
        topic, subscription = self._topics[request.consumer_id]

        async def close() -> None:
            if self._consumers.pop(request.consumer_id, None) is session:
                await self._drop_consumer(session, locked=True)

        try:
            await moves.unsubscribe(
                self._shared, topic, subscription, session.durable, close,
                lambda: self.write(replies.close_consumer(request.consumer_id)),
                force=request.force, member=self.key(request.consumer_id),
            )
        except Exception as exc:
            self._refuse(request.request_id, exc, "UNSUBSCRIBE")
            return
        log.info("pulsar subscription deleted", topic=topic, subscription=subscription)
        self.write(replies.success(request.request_id))

    async def _kick(self, consumer_id: int) -> None:
        """Close a consumer from the server's side: the client subscribes it again (at the
        subscription's position, with fresh permits), as after a broker-side disconnect."""
        session = self._consumers.pop(consumer_id, None)
        if session is not None:  # called by a seek, which holds the name's lock
            if not session.durable:
                topic, subscription = self._topics[consumer_id]
                self._shared.readers.kicked(topic, subscription, self.id)
            self.write(replies.close_consumer(consumer_id))
            await self._drop_consumer(session, locked=True)

    async def _seek(self, request: pb.CommandSeek) -> None:
        """`moves.seek` (the seeking client completes its seek once it has subscribed again)."""
        if request.consumer_id not in self._topics:
            self.write(replies.error(request.request_id, pb.ConsumerNotFound, "unknown consumer"))
            return
        topic, subscription = self._topics[request.consumer_id]
        try:
            await moves.seek(self._shared, topic, subscription, edge.seek_target(request))
        except Exception as exc:
            self._refuse(request.request_id, exc, "SEEK")
            return
        self.write(replies.success(request.request_id))


    async def _drop_consumer(self, session: ConsumerSession, *, locked: bool = False) -> None:
        """Close the consumer; under its subscription name's lock unless `locked` (held)."""
        topic, subscription = self._topics.get(session.consumer_id, ("", ""))
        if not locked and topic:
            async with self._shared.names.hold(topic, subscription):
                await self._drop_consumer(session, locked=True)
            return
        self._topics.pop(session.consumer_id, None)
        registry = self._shared.subscriptions
        registry.leave(topic, subscription, self.key(session.consumer_id))
        await session.close()
        if not session.durable and topic and not registry.count(topic, subscription):
            await self._shared.readers.release(self._shared.engine, topic, subscription)
