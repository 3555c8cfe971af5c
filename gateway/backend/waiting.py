"""Parking a `Backend.wait` caller until a publish wakes it, its timeout passes or the next
delayed message falls due: the one way the embedded store and the in-memory back end wait."""

from __future__ import annotations

import asyncio


async def park(
    waiters: list[asyncio.Future[None]], timeout_s: float, due_ms: int | None, now_ms: int
) -> None:
    """Wait until a future put in `waiters` is resolved by a waker, `timeout_s` passes, or
    `due_ms` (the next delayed message, by the caller's clock at `now_ms`) comes; return at
    once when it is already due. The future leaves `waiters` however the wait ends."""
    timeout = max(0.0, timeout_s)
    if due_ms is not None:
        if due_ms <= now_ms:
            return
        timeout = min(timeout, (due_ms - now_ms) / 1000)
    waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    waiters.append(waiter)
    try:
        await asyncio.wait({waiter}, timeout=timeout)
    finally:
        if waiter in waiters:
            waiters.remove(waiter)
        waiter.cancel()
