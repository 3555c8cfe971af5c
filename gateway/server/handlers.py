"""Rebuilding a gRPC method handler around new behaviour, keeping its kind and serializers.

The interceptors (errors, auth, timing) each wrap handlers; this is the one place that knows
grpc's four handler kinds.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc

Behaviour = Callable[[Any, Any], Any]


def inner_behaviour(handler: grpc.RpcMethodHandler) -> Behaviour:
    """The handler's own behaviour function, whatever its kind."""
    behaviour: Behaviour = (handler.unary_unary or handler.stream_unary or handler.unary_stream
                            or handler.stream_stream)
    return behaviour


async def responses(behaviour: Behaviour, request: Any, context: Any) -> AsyncIterator[Any]:
    """The responses of a streaming behaviour, whichever way it gives them: an async generator
    yields them; a coroutine (grpc's health `Watch`, say) writes them with `context.write` and
    yields nothing here."""
    result = behaviour(request, context)
    if inspect.isawaitable(result):
        await result
        return
    async for item in result:
        yield item


def rebuild(
    handler: grpc.RpcMethodHandler, unary: Behaviour, stream: Behaviour, *, raw: bool = False
) -> Any:
    """A handler of the same kind running `unary` (single response) or `stream` (responses);
    with `raw`, they get the request bytes undecoded."""
    des = None if raw else handler.request_deserializer
    ser = handler.response_serializer
    if handler.unary_unary:
        return grpc.unary_unary_rpc_method_handler(unary, des, ser)
    if handler.stream_unary:
        return grpc.stream_unary_rpc_method_handler(unary, des, ser)
    if handler.unary_stream:
        return grpc.unary_stream_rpc_method_handler(stream, des, ser)
    return grpc.stream_stream_rpc_method_handler(stream, des, ser)


Refuse = Callable[[Any, Exception], Awaitable[None]]
"""Ends a call whose request did not decode, given its context and the decoder's error: it
aborts the call (`await context.abort(...)`), so it never returns."""


def decoded(
    handler: grpc.RpcMethodHandler, refuse: Refuse,
    frame_error: Callable[[Exception], Exception] | None = None,
) -> Any:
    """A handler of the same kind that takes the raw request bytes and decodes them itself with
    the handler's deserializer, ending the call with `refuse` when they do not decode (grpc
    would answer UNKNOWN for a unary request, and raise into the servicer for a stream).

    On a client stream, a frame that does not decode is raised by the request iterator as
    `frame_error(decoder's error)`, so the handler ends the stream with it after what it owes
    (answers to the frames before it); one that escapes the handler is refused with `refuse`.
    Without `frame_error` the call is refused at once.

    It must be built outside every other wrapper that reads requests (the first interceptor),
    so they all see decoded ones."""
    decode = handler.request_deserializer
    inner = inner_behaviour(handler)
    streamed = bool(handler.stream_unary or handler.stream_stream)
    raise_frames = streamed and frame_error is not None

    async def one(raw: bytes, context: Any) -> Any:
        try:
            return decode(raw)
        except Exception as exc:  # whatever the decoder raises: the bytes are not a request
            await refuse(context, exc)
            raise

    async def each(raw: AsyncIterator[bytes], context: Any, raised: list[Exception]) -> Any:
        async for frame in raw:
            if not raise_frames:
                yield await one(frame, context)
                continue
            try:
                request = decode(frame)
            except Exception as exc:  # the bytes are not a request: the handler's error
                assert frame_error is not None
                error = frame_error(exc)
                raised.append(error)
                raise error from None
            yield request

    async def unary(raw: Any, context: Any) -> Any:
        if not streamed:
            return await inner(await one(raw, context), context)
        raised: list[Exception] = []
        try:
            return await inner(each(raw, context, raised), context)
        except Exception as exc:
            if any(exc is error for error in raised):  # nobody turned it into a status
                await refuse(context, exc)
            raise

    async def stream(raw: Any, context: Any) -> AsyncIterator[Any]:
        raised: list[Exception] = []
        request = each(raw, context, raised) if streamed else await one(raw, context)
        try:
            async for item in responses(inner, request, context):
                yield item
        except Exception as exc:
            if any(exc is error for error in raised):  # nobody turned it into a status
                await refuse(context, exc)
            raise

    return rebuild(handler, unary, stream, raw=True)
