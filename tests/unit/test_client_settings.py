"""The Python client's settings, checked without a gateway: the reconnection back-off, which
failures it retries, the typed stream error, failure reasons and bearer tokens."""

from __future__ import annotations

import random

import grpc
import pytest

import gateway.client as client
from gateway.client_message import reason_of
from gateway.client_reconnect import TRANSIENT, Reconnect, StreamFailed
from gateway.client_tls import bearer_metadata
from gateway.limits import MAX_TEXT_BYTES


def test_backoff_doubles_from_the_first_wait_up_to_the_longest() -> None:
    policy = Reconnect(initial_backoff_s=0.1, max_backoff_s=1.0, multiplier=2.0, jitter=0.0)
    assert [policy.backoff_s(n) for n in range(6)] == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    assert policy.backoff_s(10_000) == 1.0, "no overflow after many attempts"


def test_jitter_spreads_each_wait_within_its_fraction() -> None:
    policy = Reconnect(initial_backoff_s=1.0, max_backoff_s=1.0, jitter=0.2)
    rng = random.Random(7)
    waits = [policy.backoff_s(0, rng) for _ in range(500)]
    assert all(0.8 <= w <= 1.2 for w in waits)
    assert max(waits) - min(waits) > 0.3, "actually spread"


@pytest.mark.parametrize("code", sorted(TRANSIENT, key=lambda c: c.name))
def test_transient_ends_are_retried_until_max_attempts(code: grpc.StatusCode) -> None:
    failure = StreamFailed(code, "x")
    assert not Reconnect().gives_up(failure, 1_000_000), "no limit by default"
    limited = Reconnect(max_attempts=3)
    assert [limited.gives_up(failure, n) for n in range(5)] == [False] * 3 + [True] * 2


@pytest.mark.parametrize("code", [
    grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.UNAUTHENTICATED,
    grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.FAILED_PRECONDITION,
    grpc.StatusCode.NOT_FOUND, grpc.StatusCode.UNIMPLEMENTED,
])
def test_a_refused_subscription_is_not_retried(code: grpc.StatusCode) -> None:
    assert Reconnect().gives_up(StreamFailed(code, "no"), 0)


@pytest.mark.parametrize("settings", [
    {"initial_backoff_s": 0}, {"initial_backoff_s": -1}, {"initial_backoff_s": 10},
    {"multiplier": 0.5}, {"jitter": 1.0}, {"jitter": -0.1}, {"max_attempts": 0},
])
def test_bad_reconnect_settings_are_refused(settings: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="Reconnect: "):
        Reconnect(**settings)  # type: ignore[arg-type]


def test_stream_failed_says_how_the_stream_ended() -> None:
    failed = StreamFailed(grpc.StatusCode.UNAVAILABLE, "Socket closed")
    assert str(failed) == "consume stream ended: UNAVAILABLE: Socket closed"
    assert (failed.code, failed.details) == (grpc.StatusCode.UNAVAILABLE, "Socket closed")
    assert str(StreamFailed(grpc.StatusCode.OK, "")) == "consume stream ended: OK"


def test_a_failure_reason_names_the_exception_and_fits_the_gateways_limit() -> None:
    assert reason_of(ValueError("bad order")) == "ValueError: bad order"
    assert reason_of(TimeoutError()) == "TimeoutError"
    long = reason_of(RuntimeError("€" * 2000))  # 3 bytes each
    assert len(long.encode()) <= MAX_TEXT_BYTES
    assert long.startswith("RuntimeError: €") and "\ufffd" not in long


def test_bearer_metadata_is_what_the_gateway_reads() -> None:
    from gateway.server.auth import bearer

    assert bearer_metadata(None) == ()
    metadata = bearer_metadata("s3cret-token")
    assert metadata == (("authorization", "Bearer s3cret-token"),)
    assert bearer(metadata) == "s3cret-token"


def test_the_client_module_keeps_its_public_names() -> None:
    for name in ("GatewayClient", "ConsumeStream", "Message", "SettledTwice", "CLOSE_WAIT_S",
                 "ClientTLS", "Reconnect", "StreamFailed", "TRANSIENT"):
        assert name in client.__all__
        assert getattr(client, name) is not None
