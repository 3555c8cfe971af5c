"""One delivery of the Python client (`gateway.client`): settle it once with ack, fail or
dead_letter, or let `async with msg.process():` settle it by how the block ends."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Protocol

from gateway.limits import MAX_TEXT_BYTES
from gateway.v1 import gateway_pb2


class SettledTwice(RuntimeError):
    """A delivery was settled a second time from this client."""


class Settler(Protocol):
    """Where a delivery's settlements go: its consume stream, or unary `Settle` calls."""

    @property
    def generation(self) -> int:
        """Counts the stream's subscriptions: a delivery of an earlier one can no longer be
        settled (its receipt died with that stream)."""
        ...

    def settle_nowait(
        self, settlement: gateway_pb2.Settlement
    ) -> asyncio.Future[gateway_pb2.SettleResult]: ...

    def ack_nowait(self, receipt: str) -> asyncio.Future[gateway_pb2.SettleResult]: ...

    def fail_nowait(self, receipt: str) -> asyncio.Future[gateway_pb2.SettleResult]:
        """Fail with the policy's own wait and no reason."""
        ...

    def ack_quietly(self, receipt: str, generation: int) -> None:
        """Ack without a result to await; a failure is kept in the stream's `failures`."""
        ...


def ended_result(receipt: str = "", why: str = "") -> gateway_pb2.SettleResult:
    """The result of a settlement the gateway never answered: UNAVAILABLE (it may or may not
    have been applied; an unapplied one is delivered again)."""
    return gateway_pb2.SettleResult(
        receipt=receipt, ok=False, error_code="UNAVAILABLE",
        error=why or "the consume stream ended before the gateway answered this settlement",
    )


STALE_GENERATION = ("the consume stream this delivery came on has ended (the stream "
                    "resubscribed since): its receipt is void, and the gateway delivers the "
                    "message again")


def reason_of(exc: BaseException) -> str:
    """A failure reason from an exception: `Type: message`, cut to what the gateway keeps."""
    text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    data = text.encode()
    if len(data) <= MAX_TEXT_BYTES:
        return text
    return data[:MAX_TEXT_BYTES].decode(errors="ignore")


@dataclass(slots=True)
class Message:
    """One delivery; settle it once with ack, fail, dead_letter (extend may come before), or
    with `async with msg.process():`."""

    delivery: gateway_pb2.Delivery
    _settler: Settler = field(repr=False)
    generation: int = 0
    """The subscription of the stream it came on (see `Settler.generation`)."""
    settled: bool = False
    result: gateway_pb2.SettleResult | None = None
    """The answer to the settlement `process()` made (None before, or when the block settled
    the delivery itself)."""

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
        if self._stale():
            return _done(ended_result(self.delivery.receipt, STALE_GENERATION))
        return self._settler.ack_nowait(self.delivery.receipt)

    def ack_quietly(self) -> None:
        """Ack on a stream without a result to await: the ack joins the next batch, and if it
        fails its result goes to `ConsumeStream.failures` (`ConsumeStream.drain` waits for the
        answers). The cheapest way to ack at a high rate."""
        if self.settled:
            raise SettledTwice(self.delivery.receipt)
        self._settler.ack_quietly(self.delivery.receipt, self.generation)
        self.settled = True

    async def fail(
        self, delay_ms: int | None = None, delay_level: int | None = None, reason: str = ""
    ) -> gateway_pb2.SettleResult:
        """Fail: the message comes again after the policy's retry wait (or `delay_ms` /
        `delay_level`), or is dead-lettered once retries are exhausted."""
        return await self._fail(delay_ms, delay_level, reason, compact=False)

    def fail_later(
        self, delay_ms: int | None = None, delay_level: int | None = None, reason: str = ""
    ) -> asyncio.Future[gateway_pb2.SettleResult]:
        """`fail` without waiting: the failure joins the next settle batch; await the future
        (or not) for its result. On a stream, one with the policy's own wait and no reason
        goes in the batch's compact `fails`; a successful result then does not echo the
        receipt."""
        return self._fail(delay_ms, delay_level, reason, compact=True)

    def _fail(
        self, delay_ms: int | None, delay_level: int | None, reason: str, *, compact: bool
    ) -> asyncio.Future[gateway_pb2.SettleResult]:
        self._claim()
        if self._stale():
            return _done(ended_result(self.delivery.receipt, STALE_GENERATION))
        if compact and delay_ms is None and delay_level is None and not reason:
            # The policy's own wait: the next batch's compact `fails` (answered like acks).
            return self._settler.fail_nowait(self.delivery.receipt)
        fail = gateway_pb2.Fail(reason=reason)
        if delay_ms is not None:
            fail.delay_ms = delay_ms
        if delay_level is not None:
            fail.delay_level = delay_level
        settlement = gateway_pb2.Settlement(fail=fail, receipt=self.delivery.receipt)
        return self._settler.settle_nowait(settlement)

    async def dead_letter(self, reason: str = "") -> gateway_pb2.SettleResult:
        """Dead-letter now, whatever retries are left."""
        return await self._settle(
            gateway_pb2.Settlement(dead_letter=gateway_pb2.DeadLetter(reason=reason))
        )

    async def extend(self, invisible_ms: int) -> gateway_pb2.SettleResult:
        """Keep the delivery invisible for `invisible_ms` more (a new receipt replaces it)."""
        if self.settled:
            raise SettledTwice(self.delivery.receipt)
        settlement = gateway_pb2.Settlement(
            change_invisible=gateway_pb2.ChangeInvisible(invisible_ms=invisible_ms)
        )
        result = await self._send(settlement)
        if result.ok and result.receipt_next:
            self.delivery.receipt = result.receipt_next
        return result

    @contextlib.asynccontextmanager
    async def process(
        self, *, requeue: bool = True, delay_ms: int | None = None, reraise: bool = True
    ) -> AsyncIterator[Message]:
        """Settle the delivery by how the block ends:

        - it ends normally: ack;
        - it raises an Exception: fail with `Type: message` of the exception as the reason
          (the message comes again after the policy's retry wait, or `delay_ms`), or with
          `requeue=False` dead-letter it at once; then the exception propagates, unless
          `reraise=False` (a consume loop then goes on with the next delivery);
        - it settled the delivery itself (ack, fail, dead_letter): nothing more;
        - it is cancelled (or another BaseException): nothing, and it propagates; the delivery
          comes again after its timeout or when the stream ends.

        The settlement's answer is left in `result` (not ok: the gateway did not apply it, and
        the message is delivered again; see `ConsumeStream`).
        """
        try:
            yield self
        except Exception as exc:
            if not self.settled:
                reason = reason_of(exc)
                if requeue:
                    self.result = await self.fail(delay_ms=delay_ms, reason=reason)
                else:
                    self.result = await self.dead_letter(reason=reason)
            if reraise:
                raise
        else:
            if not self.settled:
                self.result = await self.ack()

    async def _settle(self, settlement: gateway_pb2.Settlement) -> gateway_pb2.SettleResult:
        self._claim()
        return await self._send(settlement)

    def _claim(self) -> None:
        """Mark the delivery settled; a second settlement raises `SettledTwice`."""
        if self.settled:
            raise SettledTwice(self.delivery.receipt)
        self.settled = True

    def _stale(self) -> bool:
        return self.generation != self._settler.generation

    async def _send(self, settlement: gateway_pb2.Settlement) -> gateway_pb2.SettleResult:
        settlement.receipt = self.delivery.receipt
        if self._stale():
            return ended_result(self.delivery.receipt, STALE_GENERATION)
        return await self._settler.settle_nowait(settlement)


def _done(result: gateway_pb2.SettleResult) -> asyncio.Future[gateway_pb2.SettleResult]:
    future: asyncio.Future[gateway_pb2.SettleResult] = asyncio.get_running_loop().create_future()
    future.set_result(result)
    return future
