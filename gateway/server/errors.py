"""The one place where gateway errors become gRPC status codes, with `google.rpc.Status`
details: an `ErrorInfo` (a stable reason, domain `retry-gateway`) on every error, a `BadRequest`
field violation for INVALID_ARGUMENT, a `RetryInfo` on UNAVAILABLE. Clients read them with
grpcio-status (`rpc_status.from_call`), the Python client as typed exceptions
(`gateway.client_errors`)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import Any

import grpc
import structlog
from google.protobuf import any_pb2, duration_pb2
from google.rpc import error_details_pb2, status_pb2

from gateway.errors import (
    ECHO_CHARS,
    ERROR_DOMAIN,
    GatewayError,
    InvalidArgument,
    MessageTooLarge,
    Unavailable,
    Undecodable,
    cut,
    shorten,
)
from gateway.server.handlers import decoded, inner_behaviour, rebuild, responses

log = structlog.get_logger("gateway.server")

GUARDED = ("/gateway.v1.", "/grpc.health.v1.", "/grpc.reflection.")
"""Method-name prefixes whose requests `DecodeGuard` decodes by default: every method of every
gateway.v1 service (Gateway, Admin), and the health and reflection services on the same port
(grpc answered their undecodable requests UNKNOWN and INTERNAL)."""

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


_BY_NUMBER = {c.value[0]: c for c in grpc.StatusCode}
DETAILS_KEY = "grpc-status-details-bin"
"""The trailer that carries the serialized `google.rpc.Status` (grpcio-status reads it)."""
DETAIL_CHARS = 400
"""Longest text in one detail field (a description, an allowed range, a metadata value): the
whole status stays a few KiB, far below a client's 8 KiB metadata limit, whatever the input."""


def status_of(error: GatewayError) -> grpc.StatusCode:
    return CODES.get(error.code, grpc.StatusCode.INTERNAL)


def _packed(detail: Any) -> any_pb2.Any:
    packed = any_pb2.Any()
    packed.Pack(detail)
    return packed


def _violation(field: str, value: object, allowed: str) -> error_details_pb2.BadRequest:
    return error_details_pb2.BadRequest(field_violations=[
        error_details_pb2.BadRequest.FieldViolation(
            field=cut(field, ECHO_CHARS),
            description=cut(f"{shorten(value)} is not allowed: {allowed}", 2 * DETAIL_CHARS),
            reason="VALUE_NOT_ALLOWED",
        )
    ])


def _info(reason: str, **metadata: str) -> error_details_pb2.ErrorInfo:
    return error_details_pb2.ErrorInfo(
        reason=reason, domain=ERROR_DOMAIN,
        metadata={k: cut(v, DETAIL_CHARS) for k, v in metadata.items() if v})


def status_proto(
    code: grpc.StatusCode, message: str, details: Iterable[Any] = ()
) -> status_pb2.Status:
    """A `google.rpc.Status` of `code` (its number), `message` and `details` (packed)."""
    return status_pb2.Status(code=code.value[0], message=message,
                             details=[_packed(d) for d in details])


def rich_status(error: GatewayError) -> status_pb2.Status:
    """The `google.rpc.Status` an error becomes: its code, its message, an `ErrorInfo` with its
    stable reason, and a `BadRequest` (INVALID_ARGUMENT: the field, the value cut short, the
    allowed range) or a `RetryInfo` (UNAVAILABLE: when to try again)."""
    details: list[Any] = []
    if isinstance(error, InvalidArgument):
        details.append(_info(error.reason, field=error.field,
                             allowed=cut(error.allowed, DETAIL_CHARS)))
        details.append(_violation(error.field, error.value, error.allowed))
    elif isinstance(error, MessageTooLarge):
        details.append(_info(error.reason, size=str(error.size), limit=str(error.limit)))
    else:
        details.append(_info(error.reason))
    if isinstance(error, Unavailable):
        delay = duration_pb2.Duration()
        delay.FromMilliseconds(error.retry_after_ms)
        details.append(error_details_pb2.RetryInfo(retry_delay=delay))
    return status_proto(status_of(error), error.message, details)


async def abort_status(
    context: grpc.aio.ServicerContext[Any, Any], status: status_pb2.Status
) -> None:
    """End the call with `status`: its code and message, and the whole status in the
    `grpc-status-details-bin` trailer."""
    code = _BY_NUMBER.get(status.code, grpc.StatusCode.UNKNOWN)
    await context.abort(code, status.message, ((DETAILS_KEY, status.SerializeToString()),))


async def abort_error(context: grpc.aio.ServicerContext[Any, Any], error: GatewayError) -> None:
    """End the call with the status `error` maps to (never returns)."""
    await abort_status(context, rich_status(error))


async def _abort(context: grpc.aio.ServicerContext[Any, Any], exc: Exception, method: str) -> None:
    if isinstance(exc, GatewayError):
        await abort_error(context, exc)
    log.exception("unexpected error", method=method)
    await abort_status(context, status_proto(
        grpc.StatusCode.INTERNAL, f"internal error: {type(exc).__name__}", [_info("INTERNAL")]))


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


def undecodable(exc: Exception) -> Undecodable:
    """The error of a request whose bytes did not decode (`exc`: the decoder's error)."""
    return Undecodable(cut(str(exc).splitlines()[0] if str(exc) else type(exc).__name__, 120))


async def refuse_undecodable(context: grpc.aio.ServicerContext[Any, Any], exc: Exception) -> None:
    """The status of a request whose bytes are not a valid message: INVALID_ARGUMENT."""
    await abort_error(context, exc if isinstance(exc, Undecodable) else undecodable(exc))


class DecodeGuard(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Decodes the requests of the methods under `prefixes` itself, so bytes that are not a
    valid request (garbage, truncated, invalid UTF-8 in a string) end the call with
    INVALID_ARGUMENT instead of grpc's UNKNOWN (unary) or an exception inside the servicer
    (streams). On a stream, a bad frame is raised by the request iterator as `Undecodable`:
    the handler ends the stream with it once it has sent what it owes (a PublishStream's
    answers to the requests before it, a Consume stream's settle answers).

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
        guarded: grpc.RpcMethodHandler = decoded(handler, refuse_undecodable, undecodable)
        return guarded
