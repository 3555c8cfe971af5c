"""The Gateway service's PublishStream: publishes pipelined on one stream, answered in order.

Each request is checked and published as a `Publish` call is (`validate.publish`, then
`EnginePort.publish`), in a task of its own started in arrival order, so several requests share
the store's commits. Answers leave in request order: a request's answer waits for the one
before it. At most WINDOW_REQUESTS requests (and WINDOW_BYTES of bodies) are unanswered; the
next request is read once an answer has gone out, so a client that does not read its answers
stops being read (gRPC's flow control holds it back).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

from gateway.backend import OutMessage
from gateway.engine.port import EnginePort
from gateway.errors import GatewayError
from gateway.server import validate
from gateway.server.auth import current_owner
from gateway.server.errors import rich_status
from gateway.tracing.context import from_metadata, with_carrier
from gateway.v1 import gateway_pb2 as pb

WINDOW_REQUESTS = 32
"""Requests of one stream unanswered at most."""
WINDOW_BYTES = 64 << 20
"""Bytes of message bodies of one stream unanswered at most (one request may pass it alone)."""

Answers = asyncio.Queue[tuple[pb.PublishResult, int] | Exception | None]
"""What a stream sends, in order: an answer with its requests's body bytes, an error that ends
the stream with its status, or None that ends it."""


class _Window:
    """What a stream has read and not yet answered: requests and their body bytes."""

    def __init__(self) -> None:
        self.requests = 0
        self.bytes = 0
        self._room = asyncio.Event()
        self._room.set()

    def take(self, size: int) -> None:
        self.requests += 1
        self.bytes += size
        if self.requests >= WINDOW_REQUESTS or self.bytes >= WINDOW_BYTES:
            self._room.clear()

    def give(self, size: int) -> None:
        self.requests -= 1
        self.bytes -= size
        if self.requests < WINDOW_REQUESTS and self.bytes < WINDOW_BYTES:
            self._room.set()

    async def room(self) -> None:
        await self._room.wait()


async def serve(
    engine: EnginePort, requests: AsyncIterator[pb.PublishStreamRequest], context: Any,
    running: set[asyncio.Future[None]],
) -> AsyncIterator[pb.PublishResult]:
    """The answers of one PublishStream call. Publishes under way when the stream ends carry
    on (kept in `running`): what they store is stored, only its answer is lost."""
    traceparent, tracestate = from_metadata(context.invocation_metadata())
    owner = current_owner()
    answers: Answers = asyncio.Queue()
    window = _Window()

    def carrier(messages: list[OutMessage]) -> list[OutMessage]:
        return [replace(m, properties=with_carrier(m.properties, traceparent, tracestate))
                for m in messages]

    async def read() -> None:
        previous: asyncio.Future[None] | None = None
        ending: Exception | None = None
        try:
            async for request in aiter_with_room(requests, window):
                size = 0
                try:
                    messages = validate.publish(request.publish, engine.now_ms())
                    for m in messages:
                        size += len(m.body)
                    if traceparent:
                        messages = carrier(messages)
                    work = engine.publish(request.publish.topic, messages, owner=owner)
                except GatewayError as exc:
                    work = _refused(exc)
                window.take(size)
                task = asyncio.ensure_future(
                    _answer(request.request_id, work, previous, answers, size))
                running.add(task)
                task.add_done_callback(running.discard)
                previous = task
            if previous is not None:
                await asyncio.shield(previous)
        except Exception as exc:  # ends the stream with this error's status, after the answers
            ending = exc
            if previous is not None:
                await asyncio.shield(previous)
        finally:
            answers.put_nowait(ending)

    reader = asyncio.ensure_future(read())
    try:
        while True:
            item = await answers.get()
            if item is None:
                break
            if isinstance(item, Exception):
                raise item
            result, size = item
            yield result
            window.give(size)
    finally:
        reader.cancel()


async def aiter_with_room(
    requests: AsyncIterator[pb.PublishStreamRequest], window: _Window
) -> AsyncIterator[pb.PublishStreamRequest]:
    """The stream's requests, each read only once the window has room."""
    iterator = aiter(requests)
    while True:
        await window.room()
        try:
            request = await anext(iterator)
        except StopAsyncIteration:
            return
        yield request


async def _refused(error: GatewayError) -> list[str]:
    raise error


async def _answer(
    request_id: int, work: Any, previous: asyncio.Future[None] | None, answers: Answers,
    size: int,
) -> None:
    """Publish one request (`work`) and queue its answer after the previous request's. An
    unexpected failure is queued instead: it ends the stream."""
    result = pb.PublishResult(request_id=request_id)
    failure: Exception | None = None
    try:
        ids = await work
    except GatewayError as exc:
        result.error_code = exc.code
        result.error = exc.message
        result.status = rich_status(exc).SerializeToString()
    except Exception as exc:  # not a refusal: the stream ends with it (INTERNAL, logged)
        failure = exc
    else:
        result.message_ids.extend(ids)
    if previous is not None:
        await previous
    answers.put_nowait((result, size) if failure is None else failure)
