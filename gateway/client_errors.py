"""Typed errors for the Python client: a gateway status with its `google.rpc.Status` details.

The gateway ends a failed call with a `google.rpc.Status` in the `grpc-status-details-bin`
trailer (`gateway.server.errors`): an `ErrorInfo` with a stable reason, a `BadRequest` for
INVALID_ARGUMENT, a `RetryInfo` for UNAVAILABLE. `GatewayClient` raises a `GatewayRpcError`
subclass for every failed call, with those details as attributes:

    try:
        await client.publish("orders", [b"x"], delay_ms=-1)
    except InvalidArgumentError as exc:
        print(exc.reason, exc.field_violations[0].field, exc.field_violations[0].description)
    except UnavailableError as exc:
        await asyncio.sleep(exc.retry_delay_s or 1.0)

Each is a `grpc.aio.AioRpcError`, so code that catches that and reads `code()` and `details()`
keeps working.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import grpc
from google.rpc import error_details_pb2, status_pb2

DETAILS_KEY = "grpc-status-details-bin"


@dataclass(frozen=True, slots=True)
class FieldViolation:
    """One refused field: its path in the request and why (the value cut short, the range)."""

    field: str
    description: str
    reason: str = ""


class GatewayRpcError(grpc.aio.AioRpcError):  # type: ignore[misc]
    """A failed gateway call. `reason` and `domain` come from the status's `ErrorInfo` ("" when
    the status has none, e.g. one made by gRPC itself), `metadata` is its metadata,
    `field_violations` its `BadRequest`, `retry_delay_s` its `RetryInfo` (None: none given)."""

    def __init__(
        self,
        code: grpc.StatusCode,
        details: str,
        initial_metadata: Any,
        trailing_metadata: Any,
        debug_error_string: str | None,
        status: status_pb2.Status | None,
    ) -> None:
        super().__init__(code, initial_metadata, trailing_metadata, details, debug_error_string)
        self.status = status
        self.reason = ""
        self.domain = ""
        self.metadata: dict[str, str] = {}
        self.field_violations: list[FieldViolation] = []
        self.retry_delay_s: float | None = None
        for detail in status.details if status is not None else ():
            _read_detail(self, detail)

    def __str__(self) -> str:
        text = f"{self.code().name}: {self.details()}"
        return f"{text} [{self.reason}]" if self.reason else text


def _read_detail(error: GatewayRpcError, detail: Any) -> None:
    info = error_details_pb2.ErrorInfo()
    bad = error_details_pb2.BadRequest()
    retry = error_details_pb2.RetryInfo()
    if detail.Unpack(info):
        error.reason, error.domain = info.reason, info.domain
        error.metadata = dict(info.metadata)
    elif detail.Unpack(bad):
        error.field_violations.extend(FieldViolation(v.field, v.description, v.reason)
                                      for v in bad.field_violations)
    elif detail.Unpack(retry):
        error.retry_delay_s = retry.retry_delay.ToMilliseconds() / 1000


class InvalidArgumentError(GatewayRpcError):
    """INVALID_ARGUMENT: `field_violations` names the field, the value and the allowed range."""


class FailedPreconditionError(GatewayRpcError):
    """FAILED_PRECONDITION: a stale or repeated receipt (`reason` STALE_RECEIPT), say."""


class NotFoundError(GatewayRpcError):
    """NOT_FOUND."""


class ResourceExhaustedError(GatewayRpcError):
    """RESOURCE_EXHAUSTED: a message over the size limit (`metadata` size and limit), too many
    calls at once."""


class UnavailableError(GatewayRpcError):
    """UNAVAILABLE: try again after `retry_delay_s`."""


class UnauthenticatedError(GatewayRpcError):
    """UNAUTHENTICATED."""


class PermissionDeniedError(GatewayRpcError):
    """PERMISSION_DENIED."""


BY_CODE: dict[grpc.StatusCode, type[GatewayRpcError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgumentError,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPreconditionError,
    grpc.StatusCode.NOT_FOUND: NotFoundError,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhaustedError,
    grpc.StatusCode.UNAVAILABLE: UnavailableError,
    grpc.StatusCode.UNAUTHENTICATED: UnauthenticatedError,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDeniedError,
}


def status_of(trailing_metadata: Any) -> status_pb2.Status | None:
    """The `google.rpc.Status` in a call's trailers, or None (none there, or not decodable)."""
    for key, value in trailing_metadata or ():
        if key == DETAILS_KEY and isinstance(value, bytes):
            status = status_pb2.Status()
            try:
                status.ParseFromString(value)
            except Exception:  # a broken trailer: the plain error is still raised
                return None
            return status
    return None


def typed(error: grpc.aio.AioRpcError) -> GatewayRpcError:
    """`error` as the typed exception of its code, with the details of its status."""
    if isinstance(error, GatewayRpcError):
        return error
    trailing = error.trailing_metadata()
    cls = BY_CODE.get(error.code(), GatewayRpcError)
    return cls(error.code(), error.details() or "", error.initial_metadata(), trailing,
               error.debug_error_string(), status_of(trailing))


class ErrorDetails(grpc.aio.UnaryUnaryClientInterceptor):  # type: ignore[misc]
    """A channel interceptor: every unary call that fails raises its typed exception."""

    async def intercept_unary_unary(
        self,
        continuation: Callable[[Any, Any], Awaitable[Any]],
        client_call_details: Any,
        request: Any,
    ) -> Any:
        call = await continuation(client_call_details, request)
        try:
            return await call
        except grpc.aio.AioRpcError as exc:
            raise typed(exc) from None


def interceptors() -> list[grpc.aio.ClientInterceptor]:
    """The interceptors `GatewayClient` puts on its channel."""
    return [ErrorDetails()]
