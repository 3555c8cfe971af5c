"""The gateway.v1 Gateway service over the engine (the Admin service: `admin_api`)."""

from __future__ import annotations

import asyncio
import collections
import contextlib
from collections.abc import AsyncIterator, Awaitable
from dataclasses import replace
from typing import Any, TypeAlias

from gateway.engine.api import Delivery, SettleAction, Settlement, SettleResult
from gateway.engine.port import ConsumerPort, EnginePort
from gateway.errors import FailedPrecondition, InvalidArgument, Unavailable
from gateway.limits import MAX_CREDIT, properties_size, utf8_len
from gateway.server import convert, publish_stream, validate
from gateway.server.auth import current_owner, current_settle_guard
from gateway.tracing.context import from_metadata, with_carrier
from gateway.v1 import gateway_pb2, gateway_pb2_grpc

SETTLE_WINDOW = 32
"""Settle batches of one Consume stream read and not yet answered at most: the next frame is
read once an answer has gone out, so a client that does not read its answers stops being read
(gRPC's flow control holds it back) instead of having the gateway keep every answer."""
SETTLE_WINDOW_ENTRIES = 50_000
"""Settlements, acks and fails of those batches at most (one batch may pass it alone): an
answer holds up to one result of about 1 KiB (a receipt echoed, an error) for each."""
DELIVERIES_AHEAD = 2
"""Responses of deliveries a Consume stream builds ahead of its writer: the rest wait as the
engine's deliveries (bodies held once, shared with their records). Built without a bound, a
client that does not read had every delivery its prefetch allows copied into a response as well
(10 such streams of 1 MiB messages grew the gateway by 2.1 GB)."""
RESPONSE_BYTES = 4 * 1024 * 1024
"""Deliveries one response carries at most, in bytes (at least one delivery): gRPC clients
receive at most 4 MiB per message by default, and the server sends at most 64 MiB."""
DELIVERY_OVERHEAD = 128
"""Bytes of a Delivery on the wire besides its strings, bytes and properties, at most: the
field tags and lengths, the numbers (attempt, retries, times), the message's own length."""
PROPERTY_OVERHEAD = 12
"""Bytes of one property on the wire besides its key and value, at most (a map entry's tag
and length, its key's and value's tags and lengths)."""

Ctx: TypeAlias = Any  # grpc.aio.ServicerContext
Outbox: TypeAlias = asyncio.Queue[gateway_pb2.ConsumeResponse | Exception | None]
"""What a Consume stream sends, in order: a response, an error that ends the stream with its
status, or None that ends it."""


class GatewayService(gateway_pb2_grpc.GatewayServicer):
    def __init__(self, engine: EnginePort) -> None:
        self.engine = engine
        self._settling: set[asyncio.Future[None]] = set()
        """Settle batches under way (kept referenced until done)."""
        self._publishing: set[asyncio.Future[None]] = set()
        """Publishes of PublishStream calls under way (kept referenced until done)."""

    async def Publish(self, request: gateway_pb2.PublishRequest, context: Ctx) -> Any:
        now = self.engine.now_ms()
        messages = validate.publish(request, now)
        traceparent, tracestate = from_metadata(context.invocation_metadata())
        if traceparent:  # the call's trace context, for messages without one of their own
            messages = [replace(m, properties=with_carrier(m.properties, traceparent, tracestate))
                        for m in messages]
        ids = await self.engine.publish(request.topic, messages, owner=current_owner())
        return gateway_pb2.PublishResponse(message_ids=ids)

    def PublishStream(
        self, request_iterator: AsyncIterator[gateway_pb2.PublishStreamRequest], context: Ctx
    ) -> AsyncIterator[gateway_pb2.PublishResult]:
        return publish_stream.serve(self.engine, request_iterator, context, self._publishing)

    async def Receive(self, request: gateway_pb2.ReceiveRequest, context: Ctx) -> Any:
        validate.receive(request)
        spec = convert.subscription(request, current_owner())
        invisible = request.invisible_ms if request.invisible_ms else None
        try:
            deliveries = await self.engine.receive(spec, request.max_messages, invisible,
                                                   request.wait_ms)
        except InvalidArgument as exc:  # the policy's checks: name the request's field
            raise convert.subscription_error(request, exc) from None
        deliveries, rest = fitting(deliveries)
        if rest:  # more than one response holds: give them back untouched, for the next call
            await self.engine.settle([Settlement(d.receipt, SettleAction.RELEASE) for d in rest])
        response = gateway_pb2.ReceiveResponse()
        convert.add_deliveries(response.deliveries, deliveries)
        return response

    async def Settle(self, request: gateway_pb2.SettleRequest, context: Ctx) -> Any:
        validate.settle(request)
        items = [convert.settlement(s) for s in request.settlements]
        try:
            results = await self.engine.settle(items, atomic=True, guard=current_settle_guard())
        except InvalidArgument as exc:  # the policy's checks: name the settlement's field
            raise convert.settle_error(request, exc) from None
        failed = [r for r in results if not r.ok]
        if failed and failed[0].error_code == "UNAVAILABLE":
            raise Unavailable(failed[0].error)
        response = gateway_pb2.SettleResponse()
        convert.add_results(response.results, results)
        return response

    async def Consume(
        self, request_iterator: AsyncIterator[gateway_pb2.ConsumeRequest], context: Ctx
    ) -> AsyncIterator[gateway_pb2.ConsumeResponse]:
        first = await anext(aiter(request_iterator), None)
        if first is None or first.WhichOneof("kind") != "subscribe":
            raise InvalidArgument("subscribe", None, "the first message of the stream")
        sub = first.subscribe
        validate.subscribe(sub)
        spec = convert.subscription(sub, current_owner())
        try:
            consumer = await self.engine.open_consumer(spec, sub.prefetch)
        except InvalidArgument as exc:  # the policy's checks: name the request's field
            raise convert.subscription_error(sub, exc) from None
        policy = consumer.policy
        outbox: Outbox = asyncio.Queue()
        await outbox.put(
            gateway_pb2.ConsumeResponse(
                subscribed=gateway_pb2.Subscribed(
                    consumer_id=consumer.id,
                    policy=policy.name,
                    naming=policy.naming.name,
                    retry_topic=policy.retry_topic(spec.topic, consumer.group),
                    dead_letter_topic=policy.dead_letter_topic(spec.topic, consumer.group),
                    max_retries=-1 if policy.max_retries is None else policy.max_retries,
                )
            )
        )
        room = _Owed()
        ahead = asyncio.Semaphore(DELIVERIES_AHEAD)
        reader = asyncio.ensure_future(self._read(request_iterator, consumer, outbox, room))
        pump = asyncio.ensure_future(self._pump(consumer, outbox, ahead))
        try:
            while True:
                item = await outbox.get()
                if item is None:
                    break
                if isinstance(item, Exception):
                    raise item
                yield item
                if item.HasField("results"):
                    room.give()
                elif item.HasField("deliveries"):
                    ahead.release()
        finally:
            reader.cancel()
            pump.cancel()
            await consumer.close()

    async def _read(
        self,
        requests: AsyncIterator[gateway_pb2.ConsumeRequest],
        consumer: ConsumerPort,
        outbox: Outbox,
        room: _Owed,
    ) -> None:
        """Apply credit at once; settle batches run concurrently (so the store commits many in
        one transaction) while their answers go out in the order the batches came in, at most
        SETTLE_WINDOW of them (and SETTLE_WINDOW_ENTRIES of their entries) unanswered:
        `room`, given back as the answers go out.

        A settle batch already read is carried out even if the stream ends meanwhile. A bad
        frame (a second subscribe, zero credit, too many settlements) ends the stream with its
        error, as does a frame that does not decode (the request iterator raises `Undecodable`):
        whatever ends the stream, the answers to the settle batches read before go out first."""
        previous: asyncio.Future[None] | None = None
        ending: Exception | None = None
        try:
            async for req in requests:
                kind = req.WhichOneof("kind")
                if kind == "credit":
                    validate.credit(req.credit)
                    _add_credit(consumer, req.credit.messages, "credit.messages")
                elif kind == "settle":
                    settle = req.settle
                    validate.settle_batch(settle)
                    await room.take(len(settle.settlements) + len(settle.acks)
                                    + len(settle.fails))
                    previous = asyncio.ensure_future(self._settle_batch(settle, outbox, previous))
                    self._settling.add(previous)
                    previous.add_done_callback(self._settling.discard)
                    if settle.credit:
                        _add_credit(consumer, settle.credit, "settle.credit")
                elif kind == "subscribe":
                    raise FailedPrecondition("subscribe: the stream has subscribed already; "
                                             "open another stream for another subscription")
                else:
                    raise InvalidArgument("kind", None, "one of subscribe, settle, credit")
            if previous is not None:
                await asyncio.shield(previous)
        except Exception as exc:  # ends the stream with this error's status
            ending = exc
            if previous is not None:  # after the answers owed (their acks were applied)
                with contextlib.suppress(Exception):
                    await asyncio.shield(previous)
        finally:
            await outbox.put(ending)

    async def _settle_batch(
        self,
        batch: gateway_pb2.SettleBatch,
        outbox: Outbox,
        previous: asyncio.Future[None] | None,
    ) -> None:
        items: list[Settlement] = []
        positions: list[int] = []  # the place in the batch of each of `items`
        refused: dict[int, SettleResult] = {}
        response = gateway_pb2.ConsumeResponse()
        answer = response.results
        answer.SetInParent()  # the answer even to an empty batch
        results = answer.results
        for i, s in enumerate(batch.settlements):
            try:
                validate.settlement(s, i)
                items.append(convert.settlement(s))
                positions.append(i)
            except InvalidArgument as exc:
                refused[i] = SettleResult(s.receipt, False, exc.code, exc.message)
        receipts = list(batch.acks)
        fails = list(batch.fails)
        try:
            done, fails_failed, acks_failed = await self._carry_out(items, fails, receipts)
        except Exception:
            outbox.put_nowait(None)  # an unexpected failure ends the stream, as a read error does
            raise
        answered = convert.batch_results(batch.settlements, positions, done)
        if refused:
            answered = convert.in_order(len(batch.settlements), refused, answered)
        convert.add_results(results, answered)
        if receipts:
            answer.acked = len(receipts) - len(acks_failed)
            convert.add_results(results, convert.failed_acks(receipts, acks_failed))
        if fails:
            answer.fails_applied = len(fails) - len(fails_failed)
            convert.add_results(results, convert.failed_acks(fails, fails_failed, "fails"))
        if previous is not None:
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await previous
        outbox.put_nowait(response)

    async def _carry_out(
        self, items: list[Settlement], fails: list[str], acks: list[str]
    ) -> tuple[list[SettleResult], dict[int, SettleResult], dict[int, SettleResult]]:
        """A settle batch in the engine: the explicit settlements, then the compact fails, then
        the compact acks, started in that order (their store writes share a commit); the
        settlements' results, and the fails' and acks' failures by position."""
        engine = self.engine
        guard = current_settle_guard()
        work: list[Awaitable[Any]] = []
        if items:
            work.append(engine.settle(items, guard=guard))
        if fails:
            work.append(engine.fail(fails, guard=guard))
        if acks:
            work.append(engine.ack(acks, guard=guard))
        outcomes = [await work[0]] if len(work) == 1 else list(await asyncio.gather(*work))
        done: list[SettleResult] = outcomes.pop(0) if items else []
        fails_failed: dict[int, SettleResult] = outcomes.pop(0) if fails else {}
        acks_failed: dict[int, SettleResult] = outcomes.pop(0) if acks else {}
        return done, fails_failed, acks_failed

    async def _pump(self, consumer: ConsumerPort, outbox: Outbox,
                    ahead: asyncio.Semaphore) -> None:
        try:
            while True:
                await ahead.acquire()  # taken from the engine once the writer has room
                batch = await consumer.next_batch(256)
                if not batch:
                    ahead.release()
                while batch:
                    part, batch = fitting(batch)
                    response = gateway_pb2.ConsumeResponse()
                    response.deliveries.SetInParent()
                    convert.add_deliveries(response.deliveries.deliveries, part)
                    await outbox.put(response)
                    if batch:
                        await ahead.acquire()
        except Unavailable:
            await outbox.put(None)


class _Owed:
    """The settle batches of a stream read and not yet answered, and their entries; answers go
    out in the order the batches were read."""

    def __init__(self) -> None:
        self.batches = 0
        self.entries = 0
        self._sizes: collections.deque[int] = collections.deque()
        self._room = asyncio.Event()
        self._room.set()

    async def take(self, entries: int) -> None:
        """Wait for room, then count a batch of `entries` read."""
        await self._room.wait()
        self.batches += 1
        self.entries += entries
        self._sizes.append(entries)
        if self.batches >= SETTLE_WINDOW or self.entries >= SETTLE_WINDOW_ENTRIES:
            self._room.clear()

    def give(self) -> None:
        """The oldest batch's answer went out."""
        self.batches -= 1
        self.entries -= self._sizes.popleft()
        if self.batches < SETTLE_WINDOW and self.entries < SETTLE_WINDOW_ENTRIES:
            self._room.set()


def fitting(deliveries: list[Delivery]) -> tuple[list[Delivery], list[Delivery]]:
    """The longest prefix of `deliveries` within RESPONSE_BYTES (at least one), and the rest.
    A delivery counts as it goes on the wire: its message, and its receipt, id and names
    (a topic, group and original topic of 255 bytes each made deliveries of 300-byte bodies
    about 1.2 KB, and a response of 4096 of them passed the clients' 4 MiB limit), with
    protobuf's own bytes (`DELIVERY_OVERHEAD`, `PROPERTY_OVERHEAD`)."""
    total = 0
    for n, d in enumerate(deliveries):
        total += (len(d.body) + utf8_len(d.key) + utf8_len(d.tag) + utf8_len(d.receipt)
                  + utf8_len(d.message_id) + utf8_len(d.topic) + utf8_len(d.original_topic)
                  + utf8_len(d.group) + DELIVERY_OVERHEAD)
        if d.properties:
            total += properties_size(d.properties) + PROPERTY_OVERHEAD * len(d.properties)
        if total > RESPONSE_BYTES and n > 0:
            return deliveries[:n], deliveries[n:]
    return deliveries, []


def _add_credit(consumer: ConsumerPort, n: int, field: str) -> None:
    """Credit on top of the unused credit, which stays at most MAX_CREDIT."""
    if consumer.credit + n > MAX_CREDIT:
        raise InvalidArgument(field, n, f"at most {MAX_CREDIT} unused credit in all "
                                        f"({max(consumer.credit, 0)} unused now)")
    consumer.add_credit(n)
