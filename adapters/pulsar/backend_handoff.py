"""Calls from pulsar-client's threads to the event loop, handed over in bunches.

pulsar-client runs send receipts and message listeners on its own threads; each one handed over
with `call_soon_threadsafe` costs a wake-up of the loop (a byte through its self-pipe, a read, a
turn). Here the calls queue up and only the first of a bunch wakes the loop, which then runs
every call queued until it finds none, in the order they came.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)


class Handoff:
    """Hand calls from any thread to `loop`, one wake-up per bunch."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._calls: deque[tuple[Callable[..., None], tuple[Any, ...]]] = deque()
        self._lock = threading.Lock()
        self._woken = False

    def call(self, fn: Callable[..., None], *args: Any) -> None:
        """Any thread: run `fn(*args)` on the loop soon (nothing if the loop has closed)."""
        with self._lock:
            self._calls.append((fn, args))
            if self._woken:
                return
            self._woken = True
        with contextlib.suppress(RuntimeError):  # the loop closed: nothing will run
            self.loop.call_soon_threadsafe(self._run)

    def _run(self) -> None:
        """Event loop: every queued call, until none is left."""
        while True:
            with self._lock:
                if not self._calls:
                    self._woken = False
                    return
                calls = list(self._calls)
                self._calls.clear()
            for fn, args in calls:
                try:
                    fn(*args)
                except Exception:  # one call's failure must not cost the others theirs
                    log.exception("pulsar-client callback failed on the event loop")
