"""When a consume stream of the Python client fails: the typed error it raises, and the opt-in
policy that resubscribes instead (`GatewayClient.consume(..., reconnect=Reconnect())`)."""

from __future__ import annotations

import random
from dataclasses import dataclass

import grpc

TRANSIENT = frozenset({
    grpc.StatusCode.OK,  # the gateway ended the stream: it is draining to stop or restart
    grpc.StatusCode.UNAVAILABLE,  # the connection broke, or the gateway is not serving yet
    grpc.StatusCode.CANCELLED,  # the server went away mid-call
    grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.RESOURCE_EXHAUSTED,  # too many calls at once (--max-rpcs)
    grpc.StatusCode.ABORTED,
    grpc.StatusCode.UNKNOWN,  # e.g. a connection reset the transport could not classify
    grpc.StatusCode.INTERNAL,  # e.g. a stream cut mid-frame
})
"""The ends a resubscription may heal. The others (INVALID_ARGUMENT, UNAUTHENTICATED,
PERMISSION_DENIED, FAILED_PRECONDITION, NOT_FOUND, UNIMPLEMENTED, ...) say the subscription
itself is wrong: subscribing again would get the same answer, so they are raised."""


class StreamFailed(Exception):
    """A consume stream ended without the consumer closing it: raised by `async for` and
    `next()` (and by a resubscription that gave up). `code` is the gRPC status it ended with
    (OK: the gateway ended it, e.g. draining on SIGTERM); `__cause__` is the gRPC error, if
    any."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(f"consume stream ended: {code.name}: {details}" if details
                         else f"consume stream ended: {code.name}")
        self.code = code
        self.details = details

    @classmethod
    def of(cls, error: grpc.aio.AioRpcError) -> StreamFailed:
        failed = cls(error.code(), error.details() or "")
        failed.__cause__ = error
        return failed


@dataclass(frozen=True, slots=True)
class Reconnect:
    """Resubscribe a failed consume stream with exponential back-off.

    The n-th attempt in a row (n = 0, 1, ...) waits `min(max_backoff_s, initial_backoff_s *
    multiplier**n)`, spread by +-`jitter` of itself so that many consumers do not come back at
    the same instant; an attempt that subscribes resets the count. After `max_attempts` failed
    attempts in a row (None: never) the last failure is raised, and so is at once a failure
    whose code is not in `retry_on`.
    """

    initial_backoff_s: float = 0.1
    max_backoff_s: float = 5.0
    multiplier: float = 2.0
    jitter: float = 0.2
    max_attempts: int | None = None
    retry_on: frozenset[grpc.StatusCode] = TRANSIENT

    def __post_init__(self) -> None:
        if not 0 < self.initial_backoff_s <= self.max_backoff_s:
            raise ValueError(f"Reconnect: 0 < initial_backoff_s ({self.initial_backoff_s}) "
                             f"<= max_backoff_s ({self.max_backoff_s}) is required")
        if self.multiplier < 1:
            raise ValueError(f"Reconnect: multiplier {self.multiplier} must be at least 1")
        if not 0 <= self.jitter < 1:
            raise ValueError(f"Reconnect: jitter {self.jitter} must be in 0..1 (exclusive)")
        if self.max_attempts is not None and self.max_attempts < 1:
            raise ValueError(f"Reconnect: max_attempts {self.max_attempts} must be at least 1 "
                             "(None: no limit)")

    def backoff_s(self, attempt: int, rng: random.Random | None = None) -> float:
        """The wait before attempt number `attempt` (0 for the first after a failure)."""
        base = min(self.max_backoff_s,
                   self.initial_backoff_s * self.multiplier ** min(attempt, 64))
        spread = (rng or random).uniform(-self.jitter, self.jitter)
        return float(base * (1 + spread))

    def gives_up(self, failure: StreamFailed, failed_attempts: int) -> bool:
        """Whether to raise `failure` after `failed_attempts` attempts in a row failed."""
        if failure.code not in self.retry_on:
            return True
        return self.max_attempts is not None and failed_attempts >= self.max_attempts
