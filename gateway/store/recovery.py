"""When the embedded store restarts a failed writer, and when it gives up.

A failure is a writer that failed a commit or ended (disk full, killed) or a restart attempt
that did not work. Failures in a row make a *run*: the restart waits `backoff_s[0]`, doubling
with each failure of the run up to `backoff_s[1]`. A store that healed and then stayed healthy
for `stable_s` starts a new run at its next failure; one that fails again sooner (a disk that is
still full takes writes for a moment only) continues the run. At `give_up_after` failures in a
row the store cannot recover by itself: it gives up and says so (`Backend.fatal`), and the
process exits non-zero so that its supervisor restarts it.

With the defaults (0.1 s doubling to 5 s, 30 failures), a store gives up after about two
minutes of trying.
"""

from __future__ import annotations

import time
from collections.abc import Callable

BACKOFF_S = (0.1, 5.0)
"""First and longest wait before restarting the writer."""
GIVE_UP_AFTER = 30
"""Failures in a row after which the store gives up."""
STABLE_S = 30.0
"""A store healthy this long after it healed counts its next failure as the first of a run."""


class Recovery:
    """The count of failures in a row and what follows from it."""

    def __init__(
        self,
        backoff_s: tuple[float, float] = BACKOFF_S,
        give_up_after: int = GIVE_UP_AFTER,
        stable_s: float = STABLE_S,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        first, longest = backoff_s
        if not 0 < first <= longest or give_up_after < 1 or stable_s < 0:
            raise ValueError(f"bad recovery settings: {backoff_s}, {give_up_after}, {stable_s}")
        self._first = first
        self._longest = longest
        self._give_up_after = give_up_after
        self._stable_s = stable_s
        self._monotonic = monotonic
        self.failures = 0
        """Failures in the current run."""
        self._healed_at: float | None = None

    def reset(self) -> None:
        """Forget every failure (the store opens anew)."""
        self.failures = 0
        self._healed_at = None

    def failed(self) -> None:
        """Count one failure (of the writer, or of a restart attempt)."""
        healed_at, self._healed_at = self._healed_at, None
        if healed_at is not None and self._monotonic() - healed_at >= self._stable_s:
            self.failures = 0
        self.failures += 1

    def healed(self) -> None:
        """The store serves again (the run goes on if it fails again within `stable_s`)."""
        self._healed_at = self._monotonic()

    @property
    def exhausted(self) -> bool:
        """True once the run has as many failures as the store tolerates."""
        return self.failures >= self._give_up_after

    def delay_s(self) -> float:
        """How long to wait before the next restart attempt."""
        return min(self._first * (1 << max(0, min(self.failures - 1, 62))), self._longest)
