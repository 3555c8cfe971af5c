"""The one place where gateway errors become gRPC status codes."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import Any

import grpc
import structlog

from gateway.errors import GatewayError, cut
from gateway.server.handlers import decoded, inner_behaviour, rebuild, responses

log = structlog.get_logger("gateway.server")

GUARDED = ("/gateway.v1.",)
"""Method-name prefixes whose requests `DecodeGuard` decodes by default: every method of every
gateway.v1 service (Gateway, Admin)."""

CODES: dict[str, grpc.StatusCode] = {
    "INVALID_ARGUMENT": grpc.StatusCode.INVALID_ARGUMENT,
    "FAILED_PRECONDITION": grpc.StatusCode.FAILED_PRECONDITION,
    "NOT_FOUND": grpc.StatusCode.NOT_FOUND,
    "ALREADY_EXISTS": grpc.StatusCode.ALREADY_EXISTS,
    "RESOURCE_EXHAUSTED": grpc.StatusCode.RESOURCE_EXHAUSTED,
    "UNAVAILABLE": grpc.StatusCode.UNAVAILABLE,
    "UNAUTHENTICATED": grpc.StatusCode.UNAUTHENTICATED,
    "PERMISSION_DENIED": grpc.StatusCode.PERMISSION_DENIED,
    "UNIMPLEMENTED": grpc.StatusCode.UNIMPLEMENTED,
    "INTERNAL": grpc.StatusCode.INTERNAL,
}


def status_of(error: GatewayError) -> grpc.StatusCode:
    return CODES.get(error.code, grpc.StatusCode.INTERNAL)


async def _abort(context: grpc.aio.ServicerContext[Any, Any], exc: Exception, method: str) -> None:
    if isinstance(exc, GatewayError):
        await context.abort(status_of(exc), exc.message)
    log.exception("unexpected error", method=method)
    await context.abort(grpc.StatusCode.INTERNAL, f"internal error: {type(exc).__name__}")


def _wrap_unary(fn: Callable[..., Awaitable[Any]], method: str) -> Callable[..., Awaitable[Any]]:
    async def handler(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        try:
            return await fn(request, context)
        except (GatewayError, Exception) as exc:
            if isinstance(exc, grpc.aio.AbortError):
                raise
            await _abort(context, exc, method)

    return handler


def _wrap_stream(fn: Callable[..., AsyncIterator[Any]], method: str) -> Callable[..., Any]:
    async def handler(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        try:
            async for item in responses(fn, request, context):
                yield item
        except (GatewayError, Exception) as exc:
            if isinstance(exc, grpc.aio.AbortError):
                raise
            await _abort(context, exc, method)

    return handler


class ErrorInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Maps every `GatewayError` raised by a handler to its status code and message."""

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        if handler is None:
            return handler
        method = handler_call_details.method
        inner = inner_behaviour(handler)
        return rebuild(handler, _wrap_unary(inner, method), _wrap_stream(inner, method))


async def refuse_undecodable(context: grpc.aio.ServicerContext[Any, Any], exc: Exception) -> None:
    """The status of a request whose bytes are not a valid message: INVALID_ARGUMENT."""
    reason = cut(str(exc).splitlines()[0] if str(exc) else type(exc).__name__, 120)
    await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                        f"request: not a valid protobuf message of the method's type ({reason})")


class DecodeGuard(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Decodes the requests of the methods under `prefixes` itself, so bytes that are not a
    valid request (garbage, truncated, invalid UTF-8 in a string) end the call with
    INVALID_ARGUMENT instead of grpc's UNKNOWN (unary) or an exception inside the servicer
    (streams). A Consume stream's bad frame after the subscribe ends the stream the same way.

    Must be the first interceptor of the server, so that every other one sees decoded
    requests. Another front end on the same server opts in with its prefix (e.g.
    `DecodeGuard(("/gateway.v1.", "/apache.rocketmq.v2."))`), or wraps its own handlers with
    `gateway.server.handlers.decoded(handler, refuse)` for another status."""

    def __init__(self, prefixes: Iterable[str] = GUARDED) -> None:
        self.prefixes = tuple(prefixes)

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        if (handler is None or handler.request_deserializer is None
                or not handler_call_details.method.startswith(self.prefixes)):
            return handler
        guarded: grpc.RpcMethodHandler = decoded(handler, refuse_undecodable)
        return guarded
