"""aio-pika's robust connection, waiting with back-off between attempts and telling its owner of
each one.

aio-pika's `RobustConnection` brings a connection, its channels and their consumers back by
itself, but waits a fixed `reconnect_interval` between attempts, for ever, and logs two or three
lines per attempt (aiormq's "error when creating transport" among them). `BackoffConnection`
keeps the restoring and sets that interval before each wait from `link_rules.Backoff` (0.5 s
doubling to 15 s with jitter; reset by a connection that works); its `Watcher` (the `Link`)
hears of every lost connection, failed attempt and connection made, and writes the one line per
attempt. `quiet_library_logs` drops the libraries' own lines for each attempt and each lost
connection (a traceback among them).
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable
from typing import Any, Protocol

import aio_pika
from yarl import URL

from adapters.amqp.link_rules import Backoff

REPLACED_LINES = {
    "aiormq.connection": ("error when creating transport",
                          "Cancelling cause reader exited abnormally"),  # with a traceback
    "aio_pika.robust_connection": ("Connection attempt to ", "Connection to "),
}
"""Lines of the libraries for each attempt and each lost connection (by logger, the start of the
message template) that the `Watcher`'s one line replaces."""


class Watcher(Protocol):
    def lost(self, exc: BaseException | None) -> None:
        """A connection that was up went down; attempts to reconnect start at once."""

    def failed(self, exc: BaseException | None, failures: int, delay_s: float) -> None:
        """Attempt number `failures` in a row failed; the next one comes in `delay_s`."""

    def connected(self, failures: int) -> None:
        """A connection was made (its channels restored) after `failures` failed attempts."""


class BackoffConnection(aio_pika.RobustConnection):
    """`RobustConnection` with back-off between attempts (see the module docstring). It keeps
    trying until closed (aio-pika's `fail_fast` is off): `connect()` returns once connected."""

    def __init__(self, url: str, *, backoff: Backoff, watcher: Watcher,
                 draw: Callable[[], float] = random.random) -> None:
        super().__init__(URL(url), reconnect_interval=backoff.first_s, fail_fast="false")
        self.backoff = backoff
        self.failures = 0
        """Failed attempts since the last connection made."""
        self._watcher = watcher
        self._draw = draw
        self._up = False

    async def _on_connection_close(self, closing: asyncio.Future[Any]) -> None:
        if not (self._close_called or self.is_closed):
            try:
                exc: BaseException | None = closing.exception()
            except asyncio.CancelledError as cancelled:
                exc = cancelled
            if self._up:
                self._up = False
                self._watcher.lost(exc)
            else:
                self.failures += 1
                self.reconnect_interval = self.backoff.delay_s(self.failures, self._draw())
                self._watcher.failed(exc, self.failures, self.reconnect_interval)
        await super()._on_connection_close(closing)

    async def _on_connected(self) -> None:
        await super()._on_connected()
        failures, self.failures = self.failures, 0
        self.reconnect_interval = self.backoff.first_s
        self._up = True
        self._watcher.connected(failures)


class _Replaced(logging.Filter):
    def __init__(self, starts: tuple[str, ...]) -> None:
        super().__init__()
        self.starts = starts

    def filter(self, record: logging.LogRecord) -> bool:
        return not (isinstance(record.msg, str) and record.msg.startswith(self.starts))


class _ChannelReopen(logging.Filter):
    """aio-pika's robust channels try to reopen at once when the connection under them is lost,
    fail (the connection is closed: RuntimeError, or ChannelInvalidStateError "No active
    transport") and log it as an error, each channel each time; the connection reopens them
    when it comes back. Other failures of that callback are still logged."""

    GONE = ("RuntimeError", "ChannelInvalidStateError")

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        return not (record.msg == "Callback %r error: %s: %s" and isinstance(args, tuple)
                    and len(args) == 3 and args[1] in self.GONE
                    and "RobustChannel._on_close" in repr(args[0]))


def quiet_library_logs() -> None:
    """Drop the libraries' per-attempt lines (`REPLACED_LINES`); idempotent."""
    for name, starts in REPLACED_LINES.items():
        logger = logging.getLogger(name)
        if not any(isinstance(f, _Replaced) for f in logger.filters):
            logger.addFilter(_Replaced(starts))
    tools = logging.getLogger("aio_pika.tools")
    if not any(isinstance(f, _ChannelReopen) for f in tools.filters):
        tools.addFilter(_ChannelReopen())
