"""The task that renews push deliveries and the lock that keeps settles from racing it."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence

import structlog

from gateway.engine.api import SettleAction, SettleGuard, Settlement, SettleResult
from gateway.engine.port import EnginePort
from gateway.errors import GatewayError, PermissionDenied

from . import codec
from .renewal import RenewalTable

log = structlog.get_logger(__name__)


class Renewer:
    """Tracks push deliveries, renews them in the background and settles client handles.

    A renewal gives a delivery a new engine receipt; settles go through `settle`, which maps
    the client's handle to the current receipt under the same lock as renewals.
    """

    def __init__(
        self, engine: EnginePort, extend_ms: int, consume_bound_ms: int, interval_ms: int
    ) -> None:
        self._engine = engine
        self._table = RenewalTable(extend_ms, consume_bound_ms, engine.time)
        self._interval_ms = interval_ms
        self._wake = asyncio.Event()
        self._lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None

    def track(self, receipt: str, client_id: str, deadline_ms: int) -> None:
        """Keep a push delivery invisible while the client works on it."""
        self._table.add(receipt, client_id, self._engine.now_ms(), deadline_ms)
        self._wake.set()
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run())

    def forget_client(self, client_id: str) -> None:
        self._table.discard_client(client_id)

    async def settle(
        self,
        handles: Sequence[str],
        make: Callable[[str, str], Settlement],
        guard: SettleGuard | None = None,
    ) -> list[SettleResult]:
        """Settle by client handles; `make(kind, engine_receipt)` builds each settlement.
        `guard` is the caller's access check; a refused push delivery is still renewed."""
        async with self._lock:
            settlements = []
            pushed = []
            for handle in handles:
                kind, receipt = codec.unwrap_receipt(handle)
                if kind == codec.PUSH:
                    pushed.append(receipt)
                    receipt = self._table.current(receipt)
                settlements.append(make(kind, receipt))
            try:
                results = await self._engine.settle(settlements, guard=guard)
            except GatewayError as error:
                results = [
                    SettleResult(s.receipt, False, error_code=error.code, error=error.message)
                    for s in settlements
                ]
            refused = {r.receipt for r in results if r.error_code == PermissionDenied.code}
            for handle in pushed:
                if self._table.current(handle) not in refused:
                    self._table.forget(handle)
            return results

    async def _run(self) -> None:
        """Runs while push deliveries are unsettled; ends when there is nothing to renew."""
        while (wait_ms := self._table.next_check_ms(self._engine.now_ms())) is not None:
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), min(wait_ms, self._interval_ms) / 1000)
            await self._renew()

    async def _renew(self) -> None:
        async with self._lock:
            due = self._table.due(self._engine.now_ms())
            if not due:
                return
            settlements = [
                Settlement(receipt, SettleAction.EXTEND, invisible_ms=ms, reason="renewed")
                for _, receipt, ms in due
            ]
            try:
                results = await self._engine.settle(settlements)
            except GatewayError as error:
                # The deliveries keep their deadlines and time out; nothing is lost.
                log.warning("rocketmq.renewal_failed", error=error.message)
                return
            now_ms = self._engine.now_ms()
            for (handle, _, _), result in zip(due, results, strict=True):
                if result.ok and result.new_receipt:
                    self._table.renewed(handle, result.new_receipt, result.deadline_ms, now_ms)
                else:
                    self._table.forget(handle)

    async def close(self) -> None:
        """Stop renewing (the deliveries then time out and come back)."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
