"""The two sides of `gateway migrate plan` and the timing both are planned with."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from gateway.core.plan import Plan
from gateway.core.policy import RetryRequest
from gateway.core.traits import PolicyTraits

NO_REQUEST = RetryRequest()
"""A consumer that asks for nothing on failure."""


@dataclass(frozen=True, slots=True)
class Timing:
    """How each attempt goes, the same on both sides (`gateway plan`'s timing flags)."""

    processing_ms: int = 0
    pickup_ms: int = 0
    limit: int = 200


@dataclass(frozen=True, slots=True)
class Side:
    """One side of a move: the policy as asked for and the timeline it gives."""

    plan: Plan
    """What `gateway plan` prints for this policy and these options."""
    options: Mapping[str, str]
    """The options the policy was built from, as given."""
    naming: str
    """The naming scheme asked for ("" for the policy's own)."""
    invisible_ms: int | None
    """The invisible duration of each receive, for policies that have one."""
    traits: PolicyTraits
    request: RetryRequest = NO_REQUEST
    """What the consumer asks for on every failure (`--delay-s`, `--level`), if anything."""

    @property
    def retries(self) -> int | None:
        """Failures retried before the end; None without a limit."""
        total = self.plan.total_attempts
        return None if total is None else total - 1

    def wait_ms(self, retry: int) -> int | None:
        """The wait before retry `retry` (1-based) as this side's timeline gives it; past the
        listed attempts, the last wait listed (tables end in a wait that repeats)."""
        waits = [a.delay_ms for a in self.plan.attempts[1:]]
        if not waits:
            return None
        return waits[min(retry, len(waits)) - 1]
