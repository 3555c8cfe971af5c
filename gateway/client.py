"""A small asyncio client for the gateway API: batched publishes and settle-once deliveries.

    async with GatewayClient("127.0.0.1:50051") as client:
        await client.publish("orders", [b"hello"])
        async with client.consume("orders", "billing", policy="rocketmq") as stream:
            async for msg in stream:
                try:
                    handle(msg.body)
                    await msg.ack()
                except Exception:
                    await msg.fail()

Other languages generate stubs from `protos/gateway/v1/`.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import grpc

from gateway.client_errors import interceptors, typed
from gateway.v1 import admin_pb2, admin_pb2_grpc, gateway_pb2, gateway_pb2_grpc

CLOSE_WAIT_S = 5.0
"""How long leaving a consume stream waits for the answers to settlements already given."""


class SettledTwice(RuntimeError):
    """A delivery was settled a second time from this client."""


@dataclass(slots=True)
class Message:
    """One delivery; settle it once with ack, fail, dead_letter (extend may come before)."""

    delivery: gateway_pb2.Delivery
    _stream: ConsumeStream | None = field(default=None, repr=False)
    _client: GatewayClient | None = field(default=None, repr=False)
    settled: bool = False

    @property
    def body(self) -> bytes:
        return bytes(self.delivery.body)

    @property
    def message_id(self) -> str:
        return str(self.delivery.message_id)

    @property
    def attempt(self) -> int:
        return int(self.delivery.attempt)

    @property
    def retries(self) -> int:
        return int(self.delivery.retries)

    @property
    def properties(self) -> dict[str, str]:
        return dict(self.delivery.properties)

    async def ack(self) -> gateway_pb2.SettleResult:
        """Ack and wait for the result. On a stream the ack goes in the next batch's compact
        `acks`; a successful result then does not echo the receipt."""
        return await self.ack_later()

    def ack_later(self) -> asyncio.Future[gateway_pb2.SettleResult]:
        """Ack without waiting: the ack joins the next batch; await the future (or not) for
        its result (on a stream, a successful one does not echo the receipt)."""
        self._claim()
        if self._stream is not None:
            return self._stream.ack_nowait(self.delivery.receipt)
        settlement = gateway_pb2.Settlement(receipt=self.delivery.receipt, ack=gateway_pb2.Ack())
        return asyncio.ensure_future(self._send(settlement))

    def ack_quietly(self) -> None:
        """Ack on a stream without a result to await: the ack joins the next batch, and if it
        fails its result goes to `ConsumeStream.failures` (`ConsumeStream.drain` waits for the
        answers). The cheapest way to ack at a high rate."""
        if self._stream is None:
            raise TypeError("ack_quietly needs a consume stream; use ack() after receive()")
        self._claim()
        self._stream.ack_quietly(self.delivery.receipt)

    async def fail(
        self, delay_ms: int | None = None, delay_level: int | None = None, reason: str = ""
    ) -> gateway_pb2.SettleResult:
        fail = gateway_pb2.Fail(reason=reason)
        if delay_ms is not None:
            fail.delay_ms = delay_ms
        if delay_level is not None:
            fail.delay_level = delay_level
        return await self._settle(gateway_pb2.Settlement(fail=fail))

    async def dead_letter(self, reason: str = "") -> gateway_pb2.SettleResult:
        return await self._settle(
            gateway_pb2.Settlement(dead_letter=gateway_pb2.DeadLetter(reason=reason))
        )

    async def extend(self, invisible_ms: int) -> gateway_pb2.SettleResult:
        if self.settled:
            raise SettledTwice(self.delivery.receipt)
        settlement = gateway_pb2.Settlement(
            change_invisible=gateway_pb2.ChangeInvisible(invisible_ms=invisible_ms)
        )
        result = await self._send(settlement)
        if result.ok and result.receipt_next:
            self.delivery.receipt = result.receipt_next
        return result

    async def _settle(self, settlement: gateway_pb2.Settlement) -> gateway_pb2.SettleResult:
        self._claim()
        return await self._send(settlement)

    def _claim(self) -> None:
        """Mark the delivery settled; a second settlement raises `SettledTwice`."""
        if self.settled:
            raise SettledTwice(self.delivery.receipt)
        self.settled = True

    async def _send(self, settlement: gateway_pb2.Settlement) -> gateway_pb2.SettleResult:
        settlement.receipt = self.delivery.receipt
        if self._stream is not None:
            return await self._stream.settle(settlement)
        assert self._client is not None
        response = await self._client.stub.Settle(
            gateway_pb2.SettleRequest(settlements=[settlement])
        )
        result: gateway_pb2.SettleResult = response.results[0]
        return result


class ConsumeStream:
    """A push subscription: iterate deliveries; settlements and credit go out in batches."""

    def __init__(self, client: GatewayClient, subscribe: gateway_pb2.Subscribe) -> None:
        self.client = client
        self.subscribe = subscribe
        self.prefetch = subscribe.prefetch or 64
        self.settle_batch = max(64, min(self.prefetch // 4, 1024))
        """Settlements sent together (with as much credit); a timer sends a smaller batch."""
        self.failures: list[gateway_pb2.SettleResult] = []
        """Failed results of acks given with `ack_quietly`, in the order they were answered."""
        self._requests: asyncio.Queue[gateway_pb2.ConsumeRequest | None] = asyncio.Queue()
        self._pending: list[gateway_pb2.Settlement] = []
        self._waiters: dict[str, asyncio.Future[gateway_pb2.SettleResult]] = {}
        self._acks: list[str] = []
        self._ack_futures: list[asyncio.Future[gateway_pb2.SettleResult] | None] = []
        """One per queued ack, in order: its future, or None for a quiet ack."""
        self._sent: collections.deque[_Sent] = collections.deque()
        """What each batch sent and not yet answered holds: answers come in the same order."""
        self._all_answered: asyncio.Future[None] | None = None
        self._closed = False
        self._deliveries: collections.deque[gateway_pb2.Delivery | None] = collections.deque()
        self._arrived: asyncio.Future[None] | None = None
        """Set when deliveries arrive while the consumer waits for one."""
        self._call: Any = None
        self._reader: asyncio.Task[None] | None = None
        self._flusher: asyncio.Handle | None = None
        self.subscribed: gateway_pb2.Subscribed | None = None

    async def __aenter__(self) -> ConsumeStream:
        await self._requests.put(gateway_pb2.ConsumeRequest(subscribe=self.subscribe))
        self._call = self.client.stub.Consume(self._request_iter())
        try:
            first = await self._call.read()
        except grpc.aio.AioRpcError as exc:
            raise typed(exc) from None
        if first is grpc.aio.EOF:
            raise RuntimeError("stream closed before subscribing")
        self.subscribed = first.subscribed
        self._reader = asyncio.ensure_future(self._read())
        return self

    async def __aexit__(self, *exc: object) -> None:
        """Send the settlements still queued and wait (up to CLOSE_WAIT_S) for their answers,
        then end the stream."""
        if not self._closed:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.drain(), CLOSE_WAIT_S)
        await self._requests.put(None)
        if self._reader is not None:
            self._reader.cancel()
        if self._call is not None:
            self._call.cancel()

    async def drain(self) -> None:
        """Send the settlements queued so far and wait until the gateway has answered every
        settlement sent (or the stream ended: the unanswered ones then fail UNAVAILABLE)."""
        self._flush()
        while self._sent and not self._closed:
            if self._all_answered is None:
                self._all_answered = asyncio.get_running_loop().create_future()
            await asyncio.shield(self._all_answered)

    async def _request_iter(self) -> AsyncIterator[gateway_pb2.ConsumeRequest]:
        while True:
            item = await self._requests.get()
            if item is None:
                return
            yield item

    async def _read(self) -> None:
        try:
            while True:
                response = await self._call.read()
                if response is grpc.aio.EOF:
                    break
                kind = response.WhichOneof("kind")
                if kind == "deliveries":
                    self._deliveries.extend(response.deliveries.deliveries)
                    self._wake()
                elif kind == "results":
                    self._answered(response.results)
        except (grpc.aio.AioRpcError, asyncio.CancelledError):
            pass
        finally:
            self._ended()
            self._deliveries.append(None)
            self._wake()

    def _wake(self) -> None:
        arrived = self._arrived
        if arrived is not None:
            self._arrived = None
            if not arrived.done():
                arrived.set_result(None)

    def _ended(self) -> None:
        """The stream is over: every settlement still unanswered (or not yet sent) gets an
        UNAVAILABLE result, and later ones get it at once."""
        self._closed = True
        if self._flusher is not None:
            self._flusher.cancel()
            self._flusher = None
        unsent = _Sent(0, self._acks, self._ack_futures)
        waiters, sent = self._waiters, [*self._sent, unsent]
        self._waiters, self._ack_futures, self._sent = {}, [], collections.deque()
        self._pending, self._acks = [], []
        for waiter in waiters.values():
            if not waiter.done():
                waiter.set_result(_unanswered())
        for batch in sent:
            for receipt, future in zip(batch.acks, batch.ack_futures, strict=True):
                if future is None:
                    self.failures.append(_unanswered(receipt))
                elif not future.done():
                    future.set_result(_unanswered())
        self._check_answered()

    def _check_answered(self) -> None:
        done = self._all_answered
        if done is not None and (not self._sent or self._closed):
            self._all_answered = None
            if not done.done():
                done.set_result(None)

    def __aiter__(self) -> ConsumeStream:
        return self

    async def __anext__(self) -> Message:
        deliveries = self._deliveries
        if not deliveries and (self._acks or self._pending):
            # Everything received is handled: its settlements go now, as one batch.
            self._flush()
        while not deliveries:
            arrived = self._arrived
            if arrived is None or arrived.done():  # done: cancelled by a `next` that timed out
                arrived = self._arrived = asyncio.get_running_loop().create_future()
            await arrived
        delivery = deliveries[0]
        if delivery is None:  # the end: it stays, so later calls end too
            raise StopAsyncIteration
        deliveries.popleft()
        return Message(delivery, self)

    async def next(self, timeout_s: float) -> Message | None:
        """The next delivery, or None after `timeout_s` without one."""
        if self._deliveries:
            return await self.__anext__()
        try:
            return await asyncio.wait_for(self.__anext__(), timeout_s)
        except TimeoutError:
            return None

    async def settle(self, settlement: gateway_pb2.Settlement) -> gateway_pb2.SettleResult:
        return await self.settle_nowait(settlement)

    def settle_nowait(
        self, settlement: gateway_pb2.Settlement
    ) -> asyncio.Future[gateway_pb2.SettleResult]:
        """Queue a settlement for the next batch; the future resolves with its result."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[gateway_pb2.SettleResult] = loop.create_future()
        if self._closed:
            future.set_result(_unanswered(settlement.receipt))
            return future
        self._waiters[settlement.receipt] = future
        self._pending.append(settlement)
        self._queued(loop)
        return future

    def ack_nowait(self, receipt: str) -> asyncio.Future[gateway_pb2.SettleResult]:
        """Queue an ack for the next batch's compact `acks`; the future resolves with its
        result (a successful one does not echo the receipt)."""
        future: asyncio.Future[gateway_pb2.SettleResult] = (
            asyncio.get_running_loop().create_future()
        )
        self._queue_ack(receipt, future)
        return future

    def ack_quietly(self, receipt: str) -> None:
        """Queue an ack for the next batch's compact `acks` with no future: a failed result is
        appended to `failures`."""
        self._queue_ack(receipt, None)

    def _queue_ack(
        self, receipt: str, future: asyncio.Future[gateway_pb2.SettleResult] | None
    ) -> None:
        """Queue an ack with its future (None: quiet); once the stream has ended it fails at
        once, UNAVAILABLE."""
        if self._closed:
            if future is None:
                self.failures.append(_unanswered(receipt))
            else:
                future.set_result(_unanswered(receipt))
            return
        self._acks.append(receipt)
        self._ack_futures.append(future)
        self._queued(asyncio.get_running_loop())

    def _queued(self, loop: asyncio.AbstractEventLoop) -> None:
        if len(self._pending) + len(self._acks) >= self.settle_batch:
            self._flush()
        elif self._flusher is None:
            self._flusher = loop.call_later(0.002, self._flush)

    def _flush(self) -> None:
        if self._flusher is not None:
            self._flusher.cancel()
            self._flusher = None
        if not self._pending and not self._acks:
            return
        batch, self._pending = self._pending, []
        acks, self._acks = self._acks, []
        futures, self._ack_futures = self._ack_futures, []
        self._sent.append(_Sent(len(batch), acks, futures))
        self._requests.put_nowait(
            gateway_pb2.ConsumeRequest(
                settle=gateway_pb2.SettleBatch(settlements=batch, acks=acks,
                                               credit=len(batch) + len(acks))
            )
        )

    def _answered(self, answer: gateway_pb2.SettleResults) -> None:
        """Resolve the futures of the oldest batch not yet answered."""
        sent = self._sent.popleft() if self._sent else _Sent(len(answer.results), [], [])
        results = answer.results
        for r in results[:sent.explicit]:
            waiter = self._waiters.pop(r.receipt, None)
            if waiter is not None and not waiter.done():
                waiter.set_result(r)
        ok = gateway_pb2.SettleResult(ok=True)  # an applied compact ack: no receipt echoed
        if len(results) > sent.explicit:
            failed = {r.receipt: r for r in results[sent.explicit:]}
            for receipt, future in zip(sent.acks, sent.ack_futures, strict=True):
                bad = failed.get(receipt)
                if future is None:
                    if bad is not None:
                        self.failures.append(bad)
                elif not future.done():
                    future.set_result(ok if bad is None else bad)
        else:
            for future in sent.ack_futures:
                if future is not None and not future.done():
                    future.set_result(ok)
        self._check_answered()


def _unanswered(receipt: str = "") -> gateway_pb2.SettleResult:
    return gateway_pb2.SettleResult(
        receipt=receipt, ok=False, error_code="UNAVAILABLE",
        error="the consume stream ended before the gateway answered this settlement",
    )


@dataclass(slots=True)
class _Sent:
    """A settle batch on its way: its explicit settlements' count, and its compact acks with
    their futures (None for a quiet ack)."""

    explicit: int
    acks: list[str]
    ack_futures: list[asyncio.Future[gateway_pb2.SettleResult] | None]


class GatewayClient:
    def __init__(self, target: str, *, max_message_bytes: int = 64 * 1024 * 1024) -> None:
        options = [
            ("grpc.max_receive_message_length", max_message_bytes),
            ("grpc.max_send_message_length", max_message_bytes),
        ]
        self.channel = grpc.aio.insecure_channel(target, options=options,
                                                interceptors=interceptors())
        self.stub = gateway_pb2_grpc.GatewayStub(self.channel)
        self.admin = admin_pb2_grpc.AdminStub(self.channel)

    async def __aenter__(self) -> GatewayClient:
        return self

    async def __aexit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def close(self) -> None:
        await self.channel.close()

    async def publish(
        self,
        topic: str,
        bodies: Sequence[bytes | gateway_pb2.Message],
        *,
        properties: Mapping[str, str] | None = None,
        key: str = "",
        tag: str = "",
        delay_ms: int = 0,
    ) -> list[str]:
        """Publish a batch; returns the ids once the gateway made them durable. Bytes get
        `properties`, `key`, `tag` and `delay_ms`; a `Message` is sent as it is."""
        request = gateway_pb2.PublishRequest(topic=topic)
        # Bytes: each message is merged from one template (the properties map is filled once,
        # not once per message, which costs several times more).
        template = gateway_pb2.Message(properties=properties or {}, key=key, tag=tag,
                                       delay_ms=delay_ms)
        messages = request.messages
        add = messages.add
        for b in bodies:
            if isinstance(b, gateway_pb2.Message):
                messages.append(b)
            else:
                message = add()
                message.MergeFrom(template)
                message.body = b
        response = await self.stub.Publish(request)
        return list(response.message_ids)

    def consume(
        self,
        topic: str,
        group: str,
        *,
        policy: str,
        options: Mapping[str, str] | None = None,
        prefetch: int = 64,
        consumer_type: gateway_pb2.ConsumerType = gateway_pb2.CONSUMER_TYPE_SHARED,
        broadcast: bool = False,
        naming: str = "",
        consumer_id: str = "",
        tag_filter: str = "",
    ) -> ConsumeStream:
        return ConsumeStream(
            self,
            gateway_pb2.Subscribe(
                topic=topic, group=group, policy=policy, policy_options=dict(options or {}),
                consumer_type=consumer_type, broadcast=broadcast, naming=naming,
                prefetch=prefetch, consumer_id=consumer_id, tag_filter=tag_filter,
            ),
        )

    async def receive(
        self,
        topic: str,
        group: str,
        *,
        policy: str,
        max_messages: int = 16,
        invisible_ms: int = 0,
        wait_ms: int = 0,
        options: Mapping[str, str] | None = None,
        consumer_type: gateway_pb2.ConsumerType = gateway_pb2.CONSUMER_TYPE_SHARED,
        naming: str = "",
    ) -> list[Message]:
        response = await self.stub.Receive(
            gateway_pb2.ReceiveRequest(
                topic=topic, group=group, policy=policy, policy_options=dict(options or {}),
                consumer_type=consumer_type, naming=naming, max_messages=max_messages,
                invisible_ms=invisible_ms, wait_ms=wait_ms,
            )
        )
        return [Message(d, None, self) for d in response.deliveries]

    async def describe(self, topic: str, group: str) -> admin_pb2.DescribeGroupResponse:
        response: admin_pb2.DescribeGroupResponse = await self.admin.DescribeGroup(
            admin_pb2.DescribeGroupRequest(topic=topic, group=group)
        )
        return response
