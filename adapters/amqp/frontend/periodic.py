"""A front-end task run every few milliseconds until the server stops (queue expiry, message
expiry): its failures are logged and the next tick tries again."""

from __future__ import annotations

import asyncio
import contextlib

import structlog

log = structlog.get_logger(__name__)


class Periodic:
    """Calls `sweep` every `TICK_S` once `begin` is called, until `close`."""

    TICK_S = 0.05
    FAILED = "amqp periodic task failed"

    def __init__(self) -> None:
        self._task: asyncio.Task[None] | None = None

    def begin(self) -> None:
        self._task = asyncio.ensure_future(self._run())

    @property
    def running(self) -> bool:
        return self._task is not None

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task

    async def sweep(self) -> None:
        raise NotImplementedError

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.TICK_S)
            try:
                await self.sweep()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a bug: said, and the next tick tries again
                log.error(self.FAILED, error=str(exc), exc_info=True)
