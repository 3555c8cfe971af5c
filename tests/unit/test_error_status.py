"""Every gateway error becomes a `google.rpc.Status` with a stable reason; the status stays small
whatever the input."""

from __future__ import annotations

import grpc
import pytest
from google.rpc import error_details_pb2

from gateway import errors
from gateway.server.errors import rich_status


def details(error: errors.GatewayError) -> dict[str, object]:
    status = rich_status(error)
    out: dict[str, object] = {"code": status.code}
    for packed in status.details:
        for kind in (error_details_pb2.ErrorInfo, error_details_pb2.BadRequest,
                     error_details_pb2.RetryInfo):
            detail = kind()
            if packed.Unpack(detail):
                out[kind.__name__] = detail
    return out


@pytest.mark.parametrize(("error", "code", "reason"), [
    (errors.InvalidArgument("f", 1, "0..1"), grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ARGUMENT"),
    (errors.StaleReceipt("r"), grpc.StatusCode.FAILED_PRECONDITION, "STALE_RECEIPT"),
    (errors.IllegalTransition("READY", "Ack"), grpc.StatusCode.FAILED_PRECONDITION,
     "ILLEGAL_TRANSITION"),
    (errors.FailedPrecondition("x"), grpc.StatusCode.FAILED_PRECONDITION, "FAILED_PRECONDITION"),
    (errors.NotFound("x"), grpc.StatusCode.NOT_FOUND, "NOT_FOUND"),
    (errors.AlreadyExists("x"), grpc.StatusCode.ALREADY_EXISTS, "ALREADY_EXISTS"),
    (errors.MessageTooLarge(5, 4), grpc.StatusCode.RESOURCE_EXHAUSTED, "MESSAGE_TOO_LARGE"),
    (errors.Unavailable("x"), grpc.StatusCode.UNAVAILABLE, "UNAVAILABLE"),
    (errors.Unauthenticated("x"), grpc.StatusCode.UNAUTHENTICATED, "UNAUTHENTICATED"),
    (errors.PermissionDenied("x"), grpc.StatusCode.PERMISSION_DENIED, "PERMISSION_DENIED"),
    (errors.Unimplemented("x"), grpc.StatusCode.UNIMPLEMENTED, "UNIMPLEMENTED"),
    (errors.MissingExtra("x"), grpc.StatusCode.FAILED_PRECONDITION, "MISSING_EXTRA"),
])
def test_every_error_has_its_reason(error: errors.GatewayError, code: grpc.StatusCode,
                                    reason: str) -> None:
    got = details(error)
    assert got["code"] == code.value[0]
    info = got["ErrorInfo"]
    assert isinstance(info, error_details_pb2.ErrorInfo)
    assert (info.reason, info.domain) == (reason, "retry-gateway")
    assert ("RetryInfo" in got) == (code is grpc.StatusCode.UNAVAILABLE)
    assert ("BadRequest" in got) == (code is grpc.StatusCode.INVALID_ARGUMENT)


def test_reasons_are_listed_in_the_readme() -> None:
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    reasons = {cls.reason for cls in vars(errors).values()
               if isinstance(cls, type) and issubclass(cls, errors.GatewayError)}
    for reason in [*reasons, "UNDECODABLE_REQUEST"]:
        assert f"`{reason}`" in readme, reason


@pytest.mark.parametrize("value", ["v" * 1_000_000, b"\xff" * 1_000_000, 10**5000, None],
                         ids=["str", "bytes", "int", "none"])
def test_huge_input_keeps_the_status_small(value: object) -> None:
    error = errors.InvalidArgument("f" * 1_000_000, value, "a" * 1_000_000)
    status = rich_status(error)
    assert len(status.SerializeToString()) < 4096
    bad = details(error)["BadRequest"]
    assert isinstance(bad, error_details_pb2.BadRequest)
    assert bad.field_violations[0].field.startswith("fff")
