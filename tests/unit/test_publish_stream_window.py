"""PublishStream's window: at most WINDOW_REQUESTS requests (and WINDOW_BYTES of bodies) of one
stream are being published at a time; the next is read once an answer has gone out."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from typing import Any

from gateway.backend import OutMessage
from gateway.server import publish_stream
from gateway.server.publish_stream import WINDOW_BYTES, WINDOW_REQUESTS
from gateway.v1 import gateway_pb2


class HeldEngine:
    """Publishes wait until released; counts what was read and started."""

    def __init__(self) -> None:
        self.started = 0
        self.release = asyncio.Event()

    def now_ms(self) -> int:
        return 0

    async def publish(self, topic: str, messages: Sequence[OutMessage],
                      owner: str | None = "") -> list[str]:
        self.started += 1
        await self.release.wait()
        return [f"id{self.started}"] * len(messages)


class Context:
    def invocation_metadata(self) -> tuple[()]:
        return ()


def request(n: int, size: int) -> gateway_pb2.PublishStreamRequest:
    return gateway_pb2.PublishStreamRequest(request_id=n, publish=gateway_pb2.PublishRequest(
        topic="t", messages=[gateway_pb2.Message(body=b"x" * size)]))


async def run(requests: list[gateway_pb2.PublishStreamRequest]) -> tuple[HeldEngine, int, int]:
    """(engine, publishes started while none was answered, requests read by then)."""
    engine = HeldEngine()
    read = 0

    async def source() -> AsyncIterator[gateway_pb2.PublishStreamRequest]:
        nonlocal read
        for r in requests:
            read += 1
            yield r

    running: set[asyncio.Future[None]] = set()
    answers = publish_stream.serve(engine, source(), Context(), running)  # type: ignore[arg-type]
    first = asyncio.ensure_future(anext(answers))
    for _ in range(50):
        await asyncio.sleep(0)
    held, read_then = engine.started, read
    engine.release.set()
    got: list[Any] = [await first] + [a async for a in answers]
    assert [a.request_id for a in got] == [r.request_id for r in requests]
    return engine, held, read_then


async def test_at_most_window_requests_are_published_at_once() -> None:
    engine, held, read = await run([request(n, 10) for n in range(1, 101)])
    assert held == WINDOW_REQUESTS
    assert read == WINDOW_REQUESTS
    assert engine.started == 100


async def test_at_most_window_bytes_are_published_at_once() -> None:
    size = WINDOW_BYTES // 4
    engine, held, _ = await run([request(n, size) for n in range(1, 7)])
    assert held == 4  # the fourth reaches the bytes limit: the fifth waits
    assert engine.started == 6
