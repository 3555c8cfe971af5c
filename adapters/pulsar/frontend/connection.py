"""One client connection: handshake, command dispatch, keepalive and cleanup.

Commands are handled in arrival order on the read loop (SEND only queues, so producers never
hold it up). Every command's values are checked by `edge` first; a bad one gets the protocol's
error reply and the connection goes on. When the connection ends, every producer stops and every
consumer is closed, which gives back all deliveries it held. The consumer commands are in
`consuming` (the base class).

Limits: a client must send a valid CONNECT within `handshake_timeout_s` in a frame of at most
`HANDSHAKE_FRAME_SIZE` bytes; afterwards frames may be as large as the message limit plus
`FRAME_OVERHEAD`. A frame is read whole, then holds the listener's `ReadBudget` while it is
handled: when the budget is spent, the next complete frame waits (so the connection is not read
further). A connection that announces a frame and sends less holds no budget; its incomplete
frame counts against the listener's cap on those and must complete within twice the keepalive
interval (`framing`). A connection stops being read while its client does not read the
replies (TCP holds it back), and holds at most `max_producers` producers and `max_consumers`
consumers, and each consumer at most `max_unacked` unsettled deliveries.
"""

from __future__ import annotations

import asyncio
import functools
import uuid
from typing import Any

import structlog

from adapters.pulsar.frontend import (
    access,
    dedup_recovery,
    edge,
    framing,
    lookups,
    namespaces,
    replies,
    unserved,
)
from adapters.pulsar.frontend.budget import FRAME_COST
from adapters.pulsar.frontend.consumers import ConsumerSession
from adapters.pulsar.frontend.consuming import ConsumerCommands
from adapters.pulsar.frontend.producers import ProducerSession
from adapters.pulsar.frontend.shared import Shared
from adapters.pulsar.frontend.topics import engine_topic, topic_or_none
from adapters.pulsar.wire import wire_pb2 as pb
from adapters.pulsar.wire.frames import (
    FRAME_OVERHEAD,
    Frame,
    FrameError,
    decode_frame,
    frame_size,
)
from gateway.errors import GatewayError, Unauthenticated

log = structlog.get_logger(__name__)

SERVER_VERSION = "retry-gateway"
MAX_PROTOCOL_VERSION = 19
NO_REQUEST = replies.NO_REQUEST
HANDSHAKE_FRAME_SIZE = 64 * 1024
"""Largest frame accepted before CONNECT has been answered."""
AUTH_METHODS = ("", "token")
"""CONNECT's `auth_method_name`s served with a tokens file (none given: a token all the same)."""
CLOSE_FLUSH_S = 5.0
"""How long a closing connection may take to send what is buffered for its client."""
Cmd = pb.BaseCommand


class Connection(ConsumerCommands):
    """Serves one client connection until either side closes it."""

    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, shared: Shared
    ) -> None:
        self._reader = reader
        self._writer = writer
        self._shared = shared
        self.id = next(shared.connection_ids)
        self._producers: dict[int, ProducerSession] = {}
        self._consumers: dict[int, ConsumerSession] = {}
        self._received = asyncio.get_running_loop().time()
        self._closed = False
        self._topics: dict[int, tuple[str, str]] = {}
        self._principal: Any = None
        self._owner = ""
        """The principal's name ("" without authentication): whose shares it takes."""
        self._client_version = ""
        """CONNECT's `client_version`: which library the client is built on."""
        self._waiting = False
        """True while reading waits for the listener's budget (the client is not idle)."""

    def write(self, data: bytes) -> None:
        """Queue bytes for the client (dropped once the connection is closing)."""
        if not self._closed and not self._writer.is_closing():
            self._writer.write(data)

    async def drain(self) -> None:
        """Wait until the socket buffer has room again."""
        if self._writer.is_closing():
            raise ConnectionError("connection closed")
        await self._writer.drain()

    def close(self) -> None:
        """Close the socket; `serve` then cleans up. What is still buffered for the client gets
        `CLOSE_FLUSH_S` to be sent, then the socket is dropped (a client that does not read
        cannot hold the connection, and what it holds, open)."""
        self._closed = True
        self._writer.close()
        loop = asyncio.get_running_loop()
        loop.call_later(CLOSE_FLUSH_S, self._writer.transport.abort)

    async def serve(self) -> None:
        """Run the connection to its end and release everything it held."""
        keepalive: asyncio.Task[None] | None = None
        try:
            if not await self._handshake():
                return
            keepalive = asyncio.create_task(self._keepalive())
            limit = self._shared.max_message_size + FRAME_OVERHEAD
            budget = self._shared.budget
            while not self._closed:
                size = frame_size(await self._reader.readexactly(4), limit)
                # The body first: a client that announces a frame and sends less holds no
                # budget, only what `framing` counts and caps, until the frame's deadline.
                data = await framing.read_body(self._reader, size, self._shared.partial,
                                               2 * self._shared.keepalive_s, self.id)
                self._received = asyncio.get_running_loop().time()
                cost = size + FRAME_COST
                self._waiting = True
                await budget.take(cost)
                self._waiting = False
                kept = False
                try:
                    kept = await self._dispatch(decode_frame(data), cost)
                finally:
                    if not kept:
                        budget.give(cost)
                # A client that does not read its replies is not read from either.
                await self.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        except FrameError as exc:
            log.info("pulsar frame rejected", connection=self.id, error=str(exc))
        except Exception:
            log.exception("pulsar connection failed", connection=self.id)
        finally:
            if keepalive is not None:
                keepalive.cancel()
            await self._cleanup()

    async def _handshake(self) -> bool:
        """Read and answer CONNECT; False when the connection is to be closed."""
        try:
            async with asyncio.timeout(self._shared.handshake_timeout_s):
                size = frame_size(await self._reader.readexactly(4), HANDSHAKE_FRAME_SIZE)
                first = await self._frame(size)
        except TimeoutError:
            log.info("pulsar connection sent no CONNECT in time, closing", connection=self.id)
            return False
        if not first.command.HasField("type") or first.command.type != Cmd.CONNECT:
            log.info("pulsar connection did not start with CONNECT", type=first.command.type)
            return False
        try:
            edge.check_command(first.command)
        except GatewayError as exc:
            self.write(replies.error(NO_REQUEST, replies.server_error(exc), exc.message))
            log.info("pulsar CONNECT refused", connection=self.id, error=exc.message)
            return False
        return self._connected(first.command.connect)

    async def _frame(self, size: int) -> Frame:
        frame = decode_frame(await self._reader.readexactly(size))
        self._received = asyncio.get_running_loop().time()
        return frame

    async def _keepalive(self) -> None:
        interval = self._shared.keepalive_s
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(interval)
            if not self._waiting and loop.time() - self._received > 2 * interval:
                log.info("pulsar connection idle, closing", connection=self.id)
                self.close()
                return
            self.write(replies.ping())

    async def _cleanup(self) -> None:
        self._closed = True
        for producer in self._producers.values():
            await producer.close()
        for session in list(self._consumers.values()):
            await self._drop_consumer(session)
        self._producers.clear()
        self._consumers.clear()
        self._shared.readers.connection_closed(self.id)
        self._writer.close()
        try:
            await asyncio.wait_for(self._writer.wait_closed(), CLOSE_FLUSH_S)
        except TimeoutError:
            self._writer.transport.abort()
        except Exception:
            pass

    def _connected(self, connect: pb.CommandConnect) -> bool:
        """Answer CONNECT; False (after an ERROR) when the client may not connect."""
        self._client_version = connect.client_version
        authorizer = self._shared.authorizer
        if authorizer is not None:
            token = connect.auth_data.decode(errors="replace") if connect.auth_data else None
            try:
                if connect.auth_method_name not in AUTH_METHODS:  # a broker has no such provider
                    raise Unauthenticated(
                        f"connect.auth_method_name {edge.echo(connect.auth_method_name)!r} is "
                        "not served: token (pulsar.AuthenticationToken)")
                self._principal = authorizer.authenticate(token)
                self._owner = str(getattr(self._principal, "name", ""))
            except GatewayError as exc:
                self.write(replies.error(NO_REQUEST, replies.server_error(exc), exc.message))
                log.info("pulsar client not authenticated", connection=self.id)
                return False
        version = min(connect.protocol_version, MAX_PROTOCOL_VERSION)
        self.write(replies.connected(SERVER_VERSION, version, self._shared.max_message_size))
        return True

    def _check(self, topic: str, group: str | None) -> None:
        """Raise PermissionDenied unless the connection's principal may use the topic."""
        authorizer = self._shared.authorizer
        if authorizer is None:
            return
        if group is None:
            authorizer.check_publish(self._principal, topic)
        else:
            authorizer.check_consume(self._principal, topic, group)

    def _may_read(self, topic: str) -> bool:
        """Whether the connection's principal may produce to or consume from the topic."""
        authorizer = self._shared.authorizer
        if authorizer is None or authorizer.may_consume_topic(self._principal, topic):
            return True
        try:
            authorizer.check_publish(self._principal, topic)
        except GatewayError:
            return False
        return True

    async def _dispatch(self, frame: Frame, cost: int) -> bool:
        """Serve one command; True when a producer took the frame and its `cost` with it."""
        cmd = frame.command
        try:
            edge.check_command(cmd)
        except GatewayError as exc:
            code = replies.server_error(exc)
            if cmd.type == Cmd.SEND:
                code = replies.send_failure(code, self._client_version)
            reply = replies.refusal(cmd, code, exc.message)
            if reply is not None:
                self.write(reply)
            log.info("pulsar command refused", connection=self.id, error=exc.message)
            return False
        kind = cmd.type if cmd.HasField("type") else 0
        if kind == Cmd.SEND:
            return self._send(frame, cost)
        await self._command(cmd, kind)
        return False

    async def _command(self, cmd: pb.BaseCommand, kind: int) -> None:
        if kind == Cmd.PING:
            self.write(replies.pong())
        elif kind == Cmd.PONG:
            pass
        elif kind == Cmd.FLOW:
            session = self._consumers.get(cmd.flow.consumer_id)
            if session is not None:
                session.flow(cmd.flow.messagePermits)
        elif kind == Cmd.ACK:
            await self._ack(cmd.ack)
        elif kind == Cmd.REDELIVER_UNACKNOWLEDGED_MESSAGES:
            session = self._consumers.get(cmd.redeliverUnacknowledgedMessages.consumer_id)
            if session is not None:
                await session.redeliver(cmd.redeliverUnacknowledgedMessages)
        elif kind == Cmd.PRODUCER:
            await self._producer(cmd.producer)
        elif kind == Cmd.SUBSCRIBE:
            await self._subscribe(cmd.subscribe)
        elif kind == Cmd.CLOSE_PRODUCER:
            await self._close_producer(cmd.close_producer)
        elif kind == Cmd.CLOSE_CONSUMER:
            await self._close_consumer(
                cmd.close_consumer.consumer_id, cmd.close_consumer.request_id
            )
        elif kind == Cmd.UNSUBSCRIBE:
            await self._unsubscribe(cmd.unsubscribe)
        elif kind == Cmd.SEEK:
            await self._seek(cmd.seek)
        elif kind == Cmd.CONNECT:  # a broker closes the connection
            self.write(replies.error(NO_REQUEST, pb.NotAllowedError, "already connected"))
            log.info("pulsar CONNECT on a connected connection, closing", connection=self.id)
            self.close()
        else:
            await self._other(cmd)

    async def _other(self, cmd: pb.BaseCommand) -> None:
        kind = cmd.type
        if kind == Cmd.GET_LAST_MESSAGE_ID:
            await self._last_message_id(cmd.getLastMessageId)
        elif kind == Cmd.GET_TOPICS_OF_NAMESPACE:
            await self._topics_of_namespace(cmd.getTopicsOfNamespace)
        elif (reply := await lookups.answer(
                cmd, self._shared.service_url, self._shared.schemas,
                functools.partial(self._check, group=None),
                self._owner, self._may_read)) is not None:
            self.write(reply)
        elif (reply := unserved.refusal(cmd)) is not None:
            self.write(reply)
            log.info("pulsar command not supported, refused", type=kind, connection=self.id)
        else:
            log.info("pulsar command not supported, ignored", type=kind, connection=self.id)

    async def _topics_of_namespace(self, request: pb.CommandGetTopicsOfNamespace) -> None:
        authorizer = self._shared.authorizer

        def may_consume(topic: str) -> bool:
            return authorizer is None or authorizer.may_consume_topic(self._principal, topic)

        try:
            reply = await namespaces.answer(request, self._shared.listing, may_consume)
        except Exception as exc:
            self._refuse(request.request_id, exc, "GET_TOPICS_OF_NAMESPACE")
            return
        self.write(reply)

    async def _producer(self, request: pb.CommandProducer) -> None:
        existing = self._producers.get(request.producer_id)
        if existing is not None:  # a client's retry is answered again; another use refused
            name = request.producer_name or existing.name
            if (topic_or_none(request.topic), name) != (existing.topic, existing.name):
                text = (f"producer id {request.producer_id} is in use for producer "
                        f"{existing.name!r} on topic {existing.topic!r}")
                self._busy(request.request_id, pb.ProducerBusy, text, "PRODUCER")
                return
            last = self._shared.dedup.last(existing.topic, existing.name)
            self.write(replies.producer_success(request.request_id, existing.name, last,
                                                existing.schema_version))
            return
        initial = request.initial_subscription_name
        try:
            topic = engine_topic(request.topic)
            self._check(topic, None)
            if initial:
                self._check(topic, initial)
            version = await self._shared.schemas.admit_producer(
                topic, request.schema if request.HasField("schema") else None, "producer.schema",
                self._owner)
            if self._shared.dedup.in_doubt(topic):  # the last sequence id it is told is right
                await dedup_recovery.settle(self._shared.engine, self._shared.dedup, topic)
        except Exception as exc:
            self._refuse(request.request_id, exc, "PRODUCER")
            return
        name = request.producer_name or f"gateway-{uuid.uuid4().hex[:12]}"
        exclusive = access.mode(request) == access.EXCLUSIVE
        text = ""
        if len(self._producers) >= self._shared.max_producers:
            text = f"a connection may have {self._shared.max_producers} producers"
        elif not self._shared.dedup.attach(topic, name):
            text = f"producer name {name!r} is in use on topic {topic!r}"
        elif text := self._shared.access.attach(topic, name, exclusive):
            self._shared.dedup.detach(topic, name)
        if text:
            self._busy(request.request_id, pb.ProducerBusy, text, "PRODUCER")
            return
        if initial:  # accepted: the subscription keeps the topic's messages from now on
            try:
                await self._shared.engine.create_group(
                    topic, initial, owner=self._owner)
            except Exception as exc:
                self._shared.dedup.detach(topic, name)
                self._shared.access.detach(topic, exclusive)
                self._refuse(request.request_id, exc, "PRODUCER")
                return
        self._producers[request.producer_id] = ProducerSession(
            producer_id=request.producer_id,
            topic=topic,
            name=name,
            engine=self._shared.engine,
            write=self.write,
            ids=self._shared.ids,
            dedup=self._shared.dedup,
            limit=self._shared.max_message_size,
            budget=self._shared.budget,
            client_version=self._client_version,
            release=functools.partial(self._shared.access.detach, topic, exclusive),
            schema_version=version,
            owner=self._owner,
        )
        last = self._shared.dedup.last(topic, name)
        self.write(replies.producer_success(request.request_id, name, last, version))

    def _send(self, frame: Frame, cost: int) -> bool:
        send = frame.command.send
        producer = self._producers.get(send.producer_id)
        if producer is None:
            self.write(
                replies.send_error(
                    send.producer_id, send.sequence_id, pb.NotAllowedError, "unknown producer"
                )
            )
            return False
        producer.submit(frame, cost)
        return True

    async def _close_producer(self, request: pb.CommandCloseProducer) -> None:
        producer = self._producers.pop(request.producer_id, None)
        if producer is not None:
            await producer.close()
        self.write(replies.success(request.request_id))

    def _busy(self, request_id: int, code: int, text: str, command: str) -> None:
        """Refuse `command` with `code` (logged)."""
        log.info("pulsar command refused", connection=self.id, command=command, error=text)
        self.write(replies.error(request_id, code, text))

    def _refuse(self, request_id: int, exc: BaseException, command: str) -> None:
        """Answer `command` with the error for `exc` (logged); close if a retry needs it."""
        code = replies.server_error(exc)
        text = replies.error_text(exc)
        log.info("pulsar command refused", connection=self.id, command=command, error=text)
        self.write(replies.error(request_id, code, text))
        if code in replies.RETRYABLE:
            self.close()

