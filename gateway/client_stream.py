"""A push subscription of the Python client (`GatewayClient.consume`): deliveries in, batched
settlements and credit out, on one `Consume` stream.

When the stream ends without the consumer closing it (the gateway was killed or restarted, the
connection broke, the gateway refused the subscription), `async for` and `next()` raise
`StreamFailed`. With `reconnect=Reconnect(...)` they resubscribe instead, with back-off, and go
on with the new stream's deliveries; a failure the policy does not retry (or the last one after
`max_attempts`) is raised.

What happens to deliveries in flight when a stream is lost: their receipts die with it.
Deliveries received but not yet handed out are dropped. Settling a delivery of the lost stream
(also after a resubscription) answers at once, without reaching the gateway, with a not-ok
UNAVAILABLE result; so does every settlement that was sent and not answered yet, which the
gateway may or may not have applied. The gateway delivers each unsettled message again:

- the gateway lives on and sees the stream end (the client went away, the connection was
  reset): at once, to whichever consumer of the group has credit (this one once it has
  resubscribed), as the next attempt;
- the gateway lives on but never sees the end (a network that drops packets without a reset):
  once the delivery's deadline passes, i.e. the policy's delivery timeout counted from the
  delivery (RocketMQ push 15 min, the Pulsar ack timeout, ...; times `--time-scale`);
- the gateway was killed or restarted: as soon as the restarted gateway serves the group,
  counted one attempt more (the embedded store writes each delivery's count with its next
  commit, so one made in the last milliseconds before a crash may come with its earlier
  count); on the RabbitMQ and Pulsar back ends the broker gives back what the gateway had
  not acked.

Handling must therefore be idempotent: at least once, never lost.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc

from gateway.client_errors import typed
from gateway.client_message import STALE_GENERATION, Message, ended_result
from gateway.client_reconnect import Reconnect, StreamFailed
from gateway.v1 import gateway_pb2, gateway_pb2_grpc

CLOSE_WAIT_S = 5.0
"""How long leaving a consume stream waits for the answers to settlements already given."""
SEND_RACE_TRIES = 3
"""Attempts at a subscription that ended INTERNAL before subscribing (see `_subscribe`)."""


class ConsumeStream:
    """A push subscription: iterate deliveries; settlements and credit go out in batches."""

    def __init__(
        self,
        stub: gateway_pb2_grpc.GatewayStub,
        subscribe: gateway_pb2.Subscribe,
        *,
        metadata: Sequence[tuple[str, str]] = (),
        reconnect: Reconnect | None = None,
    ) -> None:
        self.stub = stub
        self.subscribe = subscribe
        self.metadata = tuple(metadata)
        self.reconnect = reconnect
        self.prefetch = subscribe.prefetch or 64
        self.settle_batch = max(64, min(self.prefetch // 4, 1024))
        """Settlements sent together (with as much credit); a timer sends a smaller batch."""
        self.failures: list[gateway_pb2.SettleResult] = []
        """Failed results of acks given with `ack_quietly`, in the order they were answered."""
        self.generation = 0
        """Subscriptions so far: 1 on the first, +1 on each resubscription."""
        self.resubscribed = 0
        """Resubscriptions after a failure (with `reconnect`)."""
        self.failure: StreamFailed | None = None
        """Why the current stream ended, once it has (None while it runs or after close)."""
        self.subscribed: gateway_pb2.Subscribed | None = None
        self._requests: asyncio.Queue[gateway_pb2.ConsumeRequest | None] = asyncio.Queue()
        self._pending: list[gateway_pb2.Settlement] = []
        self._waiters: dict[str, asyncio.Future[gateway_pb2.SettleResult]] = {}
        self._acks: list[str] = []
        self._ack_futures: list[asyncio.Future[gateway_pb2.SettleResult] | None] = []
        """One per queued ack, in order: its future, or None for a quiet ack."""
        self._fails: list[str] = []
        self._fail_futures: list[asyncio.Future[gateway_pb2.SettleResult]] = []
        """Compact fails queued (the policy's own wait), with their futures."""
        self._sent: collections.deque[_Sent] = collections.deque()
        """What each batch sent and not yet answered holds: answers come in the same order."""
        self._all_answered: asyncio.Future[None] | None = None
        self._closed = True
        self._leaving = False
        self._healing: asyncio.Task[None] | None = None
        """The resubscription under way (with `reconnect`)."""
        self._gave_up = False
        self._deliveries: collections.deque[gateway_pb2.Delivery | None] = collections.deque()
        self._arrived: asyncio.Future[None] | None = None
        """Set when deliveries arrive while the consumer waits for one."""
        self._call: Any = None
        self._reader: asyncio.Task[None] | None = None
        self._flusher: asyncio.Handle | None = None

    async def __aenter__(self) -> ConsumeStream:
        """Subscribe. A refusal raises the call's `grpc.aio.AioRpcError`; with `reconnect`, a
        failure it retries is retried first (StreamFailed once it gives up)."""
        try:
            await self._subscribe()
        except (grpc.aio.AioRpcError, StreamFailed) as exc:
            if self.reconnect is None:
                raise
            failure = StreamFailed.of(exc) if isinstance(exc, grpc.aio.AioRpcError) else exc
            if self.reconnect.gives_up(failure, 0):
                raise failure from exc
            await self._resubscribe(self.reconnect, failure, failed=1)
        return self

    async def _subscribe(self) -> None:
        """Open a stream and wait for its Subscribed; a refusal raises the call's AioRpcError,
        an end before it StreamFailed.

        A gateway that refuses the call outright (a bad token) may end it while the client is
        still sending the subscription; gRPC's client then reports INTERNAL ("Internal error
        from Core") instead of the gateway's status. Nothing was subscribed, so such an attempt
        is made again at once, up to SEND_RACE_TRIES times, to get the gateway's own answer."""
        for _ in range(SEND_RACE_TRIES - 1):
            try:
                return await self._subscribe_once()
            except grpc.aio.AioRpcError as exc:
                if exc.code() != grpc.StatusCode.INTERNAL:
                    raise
        await self._subscribe_once()

    async def _subscribe_once(self) -> None:
        requests: asyncio.Queue[gateway_pb2.ConsumeRequest | None] = asyncio.Queue()
        requests.put_nowait(gateway_pb2.ConsumeRequest(subscribe=self.subscribe))
        call = self.stub.Consume(_request_iter(requests), metadata=self.metadata or None)
        try:
            try:
                first = await call.read()
            except grpc.aio.AioRpcError as exc:
                raise typed(exc) from None
            if first is grpc.aio.EOF:
                code = await call.code()
                raise StreamFailed(code, (await call.details()) or
                                   "the stream ended before subscribing")
        except BaseException:
            requests.put_nowait(None)
            call.cancel()
            raise
        self._requests, self._call = requests, call
        self._deliveries.clear()
        self._closed = False
        self.failure = None
        self.generation += 1
        self.subscribed = first.subscribed
        self._reader = asyncio.ensure_future(self._read())

    async def __aexit__(self, *exc: object) -> None:
        """Send the settlements still queued and wait (up to CLOSE_WAIT_S) for their answers,
        then end the stream."""
        if not self._closed:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.drain(), CLOSE_WAIT_S)
        self._leaving = True
        if self._healing is not None:
            self._healing.cancel()
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

    async def _read(self) -> None:
        call = self._call
        failure: StreamFailed | None = None
        try:
            while True:
                response = await call.read()
                if response is grpc.aio.EOF:
                    failure = StreamFailed(await call.code(), (await call.details()) or
                                           "the gateway ended the stream")
                    break
                kind = response.WhichOneof("kind")
                if kind == "deliveries":
                    self._deliveries.extend(response.deliveries.deliveries)
                    self._wake()
                elif kind == "results":
                    self._answered(response.results)
        except grpc.aio.AioRpcError as exc:
            failure = StreamFailed.of(exc)
        except asyncio.CancelledError:
            pass
        finally:
            self._ended()
            if failure is not None and not self._leaving:
                self.failure = failure
                self._deliveries.clear()  # their receipts died with the stream
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
        unsent = _Sent(0, self._acks, self._ack_futures, self._fails, self._fail_futures)
        waiters, sent = self._waiters, [*self._sent, unsent]
        self._waiters, self._ack_futures, self._sent = {}, [], collections.deque()
        self._pending, self._acks, self._fails, self._fail_futures = [], [], [], []
        for waiter in waiters.values():
            if not waiter.done():
                waiter.set_result(ended_result())
        for batch in sent:
            for receipt, future in zip(batch.acks, batch.ack_futures, strict=True):
                if future is None:
                    self.failures.append(ended_result(receipt))
                elif not future.done():
                    future.set_result(ended_result())
            for fail_future in batch.fail_futures:
                if not fail_future.done():
                    fail_future.set_result(ended_result())
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
        """The next delivery. Raises StreamFailed when the stream failed (with `reconnect`:
        once resubscribing gave up), StopAsyncIteration once the consumer closed it."""
        deliveries = self._deliveries
        if not deliveries and (self._acks or self._pending or self._fails):
            # Everything received is handled: its settlements go now, as one batch.
            self._flush()
        while True:
            while not deliveries:
                arrived = self._arrived
                if arrived is None or arrived.done():  # done: cancelled by a timed-out `next`
                    arrived = self._arrived = asyncio.get_running_loop().create_future()
                await arrived
            delivery = deliveries[0]
            if delivery is not None:
                deliveries.popleft()
                return Message(delivery, self, self.generation)
            failure = self.failure  # the end: it stays, so later calls end too
            if failure is None:
                raise StopAsyncIteration
            if self.reconnect is None or self._gave_up:
                raise failure
            healing = self._healing
            if healing is None:  # a task of its own: a `next()` that times out leaves it be
                healing = self._healing = asyncio.ensure_future(
                    self._resubscribe(self.reconnect, failure))
                healing.add_done_callback(self._healed)
            await asyncio.shield(healing)

    def _healed(self, task: asyncio.Task[None]) -> None:
        self._healing = None
        if task.cancelled():
            return
        error = task.exception()
        if isinstance(error, StreamFailed):
            self._gave_up = True
            self.failure = error

    async def _resubscribe(self, policy: Reconnect, failure: StreamFailed,
                           failed: int = 0) -> None:
        """Subscribe again with back-off until it works; raise once the policy gives up
        (`failed`: attempts in a row that failed already)."""
        while not policy.gives_up(failure, failed):
            await asyncio.sleep(policy.backoff_s(failed))
            if self._leaving:
                raise failure
            try:
                await self._subscribe()
            except grpc.aio.AioRpcError as exc:
                failure = StreamFailed.of(exc)
            except StreamFailed as exc:
                failure = exc
            else:
                self.resubscribed += 1
                return
            failed += 1
            self.failure = failure
        raise failure

    async def next(self, timeout_s: float) -> Message | None:
        """The next delivery, or None after `timeout_s` without one (raises like `async
        for`)."""
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
            future.set_result(ended_result(settlement.receipt))
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

    def fail_nowait(self, receipt: str) -> asyncio.Future[gateway_pb2.SettleResult]:
        """Queue a fail with the policy's own wait for the next batch's compact `fails`; the
        future resolves with its result (a successful one does not echo the receipt)."""
        future: asyncio.Future[gateway_pb2.SettleResult] = (
            asyncio.get_running_loop().create_future()
        )
        if self._closed:
            future.set_result(ended_result(receipt))
            return future
        self._fails.append(receipt)
        self._fail_futures.append(future)
        self._queued(asyncio.get_running_loop())
        return future

    def ack_quietly(self, receipt: str, generation: int | None = None) -> None:
        """Queue an ack for the next batch's compact `acks` with no future: a failed result is
        appended to `failures` (at once for a delivery of an earlier `generation`)."""
        if generation is not None and generation != self.generation:
            self.failures.append(ended_result(receipt, STALE_GENERATION))
            return
        self._queue_ack(receipt, None)

    def _queue_ack(
        self, receipt: str, future: asyncio.Future[gateway_pb2.SettleResult] | None
    ) -> None:
        """Queue an ack with its future (None: quiet); once the stream has ended it fails at
        once, UNAVAILABLE."""
        if self._closed:
            if future is None:
                self.failures.append(ended_result(receipt))
            else:
                future.set_result(ended_result(receipt))
            return
        self._acks.append(receipt)
        self._ack_futures.append(future)
        self._queued(asyncio.get_running_loop())

    def _queued(self, loop: asyncio.AbstractEventLoop) -> None:
        if len(self._pending) + len(self._acks) + len(self._fails) >= self.settle_batch:
            self._flush()
        elif self._flusher is None:
            self._flusher = loop.call_later(0.002, self._flush)

    def _flush(self) -> None:
        if self._flusher is not None:
            self._flusher.cancel()
            self._flusher = None
        if not self._pending and not self._acks and not self._fails:
            return
        batch, self._pending = self._pending, []
        acks, self._acks = self._acks, []
        futures, self._ack_futures = self._ack_futures, []
        fails, self._fails = self._fails, []
        fail_futures, self._fail_futures = self._fail_futures, []
        self._sent.append(_Sent(len(batch), acks, futures, fails, fail_futures))
        self._requests.put_nowait(
            gateway_pb2.ConsumeRequest(
                settle=gateway_pb2.SettleBatch(settlements=batch, acks=acks, fails=fails,
                                               credit=len(batch) + len(acks) + len(fails))
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
            for receipt, fail_future in zip(sent.fails, sent.fail_futures, strict=True):
                if not fail_future.done():
                    fail_future.set_result(failed.get(receipt, ok))
        else:
            for future in sent.ack_futures:
                if future is not None and not future.done():
                    future.set_result(ok)
            for fail_future in sent.fail_futures:
                if not fail_future.done():
                    fail_future.set_result(ok)
        self._check_answered()


async def _request_iter(
    requests: asyncio.Queue[gateway_pb2.ConsumeRequest | None],
) -> AsyncIterator[gateway_pb2.ConsumeRequest]:
    while True:
        item = await requests.get()
        if item is None:
            return
        yield item


@dataclass(slots=True)
class _Sent:
    """A settle batch on its way: its explicit settlements' count, its compact acks with their
    futures (None for a quiet ack), and its compact fails with theirs."""

    explicit: int
    acks: list[str]
    ack_futures: list[asyncio.Future[gateway_pb2.SettleResult] | None]
    fails: list[str] = field(default_factory=list)
    fail_futures: list[asyncio.Future[gateway_pb2.SettleResult]] = field(default_factory=list)
