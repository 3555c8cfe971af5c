"""The progress of a copy: a bar with rate and ETA redrawn on a terminal, nothing elsewhere (the
command prints its summary line at the end either way)."""

from __future__ import annotations

import time
from typing import TextIO

WIDTH = 30
REDRAW_S = 0.1


def _clock(seconds: float) -> str:
    seconds = max(0, int(seconds))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


class Progress:
    """Counts messages done against an expected total (None: unknown) and draws a bar on
    `stream` when it is a terminal."""

    def __init__(self, stream: TextIO, *, terminal: bool | None = None) -> None:
        self._stream = stream
        self.terminal = stream.isatty() if terminal is None else terminal
        self.total: int | None = None
        self.done = 0
        self.bytes = 0
        self._started = self._drawn = 0.0

    def start(self, total: int | None) -> None:
        self.total = total
        self._started = time.monotonic()
        self._draw(force=True)

    def advance(self, n: int, bytes_so_far: int) -> None:
        self.done += n
        self.bytes = bytes_so_far
        self._draw()

    def line(self) -> str:
        """The bar as text: `[#####.....] 5,000/10,000  50%  2,345 msg/s  ETA 0:02`."""
        elapsed = max(time.monotonic() - self._started, 1e-9)
        rate = self.done / elapsed
        total = self.total
        if total is not None and self.done > total:
            total = self.done  # more arrived than estimated
        if not total:
            return f"{self.done:,} copied  {rate:,.0f} msg/s  {_clock(elapsed)} elapsed"
        share = min(1.0, self.done / total)
        filled = int(share * WIDTH)
        eta = (total - self.done) / rate if rate > 0 else 0.0
        return (f"[{'#' * filled}{'.' * (WIDTH - filled)}] {self.done:,}/{total:,} "
                f"{share * 100:3.0f}%  {rate:,.0f} msg/s  ETA {_clock(eta)}")

    def _draw(self, force: bool = False) -> None:
        if not self.terminal:
            return
        now = time.monotonic()
        if not force and now - self._drawn < REDRAW_S:
            return
        self._drawn = now
        self._stream.write("\r\x1b[2K" + self.line())
        self._stream.flush()

    def finish(self) -> None:
        if self.terminal and self._started:
            self._draw(force=True)
            self._stream.write("\n")
            self._stream.flush()
