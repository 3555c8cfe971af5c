"""The six states every dialect maps onto."""

from __future__ import annotations

import enum


class State(enum.Enum):
    READY = "READY"
    """Stored and visible: may be delivered."""
    INFLIGHT = "INFLIGHT"
    """Delivered, no result yet; has a deadline (ack timeout or invisible duration)."""
    WAITING_RETRY = "WAITING_RETRY"
    """Failed or timed out with attempts left; READY again when its interval has passed."""
    COMMITTED = "COMMITTED"
    """The consumer reported success. Terminal."""
    DEAD_LETTERED = "DEAD_LETTERED"
    """Attempts exhausted (or dead-lettered on request); stored on the dead-letter destination."""
    DISCARDED = "DISCARDED"
    """Attempts exhausted with no dead-letter destination, or a broadcast failure. Terminal."""

    @property
    def terminal(self) -> bool:
        return self in (State.COMMITTED, State.DEAD_LETTERED, State.DISCARDED)


# The members as module constants for the per-message paths: Python 3.11's `EnumType` has a
# `__getattr__`, which sends every `State.X` lookup through a slow attribute hook (about 60 ns,
# against 6 ns for a global).
READY = State.READY
INFLIGHT = State.INFLIGHT
WAITING_RETRY = State.WAITING_RETRY
COMMITTED = State.COMMITTED
DEAD_LETTERED = State.DEAD_LETTERED
DISCARDED = State.DISCARDED
