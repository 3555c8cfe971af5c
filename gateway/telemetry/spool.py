"""A bounded on-disk spool of transition events, written off the hot path.

`Spool.record` only appends to an in-memory buffer; a background thread serializes the buffer into
JSON-lines segment files. Each segment is written under a hidden temporary name (`.tmp-...`, which
Spark's file source ignores), fsync'd, renamed to `events-<first seq>-<last seq>.jsonl` and made
durable with an fsync of the directory, so a reader only ever sees complete segments.

Everything is bounded: a full buffer drops its oldest events, and when the segments on disk add
up to more than `max_total_bytes` the oldest segments are deleted. Every event lost is counted in
`dropped`, and by reason in `dropped_counts()` (`/metrics` shows them as
`gateway_telemetry_dropped_total`); drops from a full buffer are logged by the writer thread (not
the hot path), at most once a minute. Telemetry is dropped, never a message: nothing here raises
into the caller.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gateway.errors import InvalidArgument
from gateway.telemetry.events import TransitionEvent, TransitionLike, to_json_line

log = logging.getLogger(__name__)

SEGMENT_RE = re.compile(r"^events-(\d+)-(\d+)\.jsonl$")
_SEQ_MARK = ".seq-high"
_TMP_PREFIX = ".tmp-"
DROP_REASONS = ("buffer_full", "disk_cap", "write_failed", "closed")
"""Why events were lost: the in-memory buffer was full (the oldest went), old segments were
deleted to keep the spool under its size cap, an event could not be serialized or its segment
written, or it came after `close`."""
BUFFER_WARN_INTERVAL_MS = 60_000
"""Full-buffer drops are logged at most this often (each warning counts those since the last)."""


def wall_clock_ms() -> int:
    """Wall-clock milliseconds: the default clock of a spool."""
    return time.time_ns() // 1_000_000


def segment_name(first_seq: int, last_seq: int) -> str:
    """File name of a segment holding events `first_seq`..`last_seq` (zero-padded, sortable)."""
    return f"events-{first_seq:012d}-{last_seq:012d}.jsonl"


@dataclass(slots=True)
class _Segment:
    name: str
    first_seq: int
    size: int
    events: int | None
    """Events in the file; None for segments found on disk at start (counted when deleted)."""


class Spool:
    """Collects transition events and writes them to segment files in `directory`.

    `clock` returns wall-clock milliseconds and decides when a segment is old enough to close.
    `gateway_id` fills that column for engine transitions. With `background=False` no thread is
    started and the owner calls `pump()` itself.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        segment_max_bytes: int = 4 << 20,
        segment_max_age_ms: int = 10_000,
        max_total_bytes: int = 256 << 20,
        max_buffered_events: int = 100_000,
        clock: Callable[[], int] = wall_clock_ms,
        gateway_id: str = "",
        background: bool = True,
        poll_interval_s: float = 0.1,
    ) -> None:
        if segment_max_bytes < 1:
            raise InvalidArgument("segment_max_bytes", segment_max_bytes, ">= 1")
        if segment_max_age_ms < 0:
            raise InvalidArgument("segment_max_age_ms", segment_max_age_ms, ">= 0")
        if max_total_bytes < segment_max_bytes:
            raise InvalidArgument(
                "max_total_bytes", max_total_bytes, f">= segment_max_bytes ({segment_max_bytes})"
            )
        if max_buffered_events < 1:
            raise InvalidArgument("max_buffered_events", max_buffered_events, ">= 1")
        self._dir = Path(directory)
        self._dir.mkdir(parents=True, exist_ok=True)
        self._segment_max_bytes = segment_max_bytes
        self._segment_max_age_ms = segment_max_age_ms
        self._max_total_bytes = max_total_bytes
        self._max_buffered = max_buffered_events
        self._clock = clock
        self._gateway_id = gateway_id
        self._poll_interval_s = poll_interval_s

        # Shared with `record` (hot path), guarded by _lock.
        self._lock = threading.Lock()
        self._buf: deque[tuple[int, TransitionEvent | TransitionLike]] = deque()
        self._buf_since_ms = 0
        self._dropped_buffer = 0
        self._dropped_closed = 0
        self._closed = False
        self._wake_at = max(1, min(4096, max_buffered_events // 2))

        # Owned by the writer, guarded by _io_lock.
        self._io_lock = threading.Lock()
        self._pending: list[bytes] = []
        self._pending_bytes = 0
        self._pending_first = 0
        self._pending_last = 0
        self._pending_since_ms = 0
        self._segments: deque[_Segment] = deque()
        self._total_bytes = 0
        self._dropped_disk = 0
        self._dropped_failed = 0
        self._written = 0
        self._warned_drops = 0
        """Full-buffer drops already logged."""
        self._warned_at_ms: int | None = None

        self._seq = self._recover()
        self._enforce_retention()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        if background:
            self._thread = threading.Thread(target=self._run, name="telemetry-spool", daemon=True)
            self._thread.start()

    # -- hot path ---------------------------------------------------------------------------

    def record(self, event: TransitionEvent | TransitionLike) -> None:
        """Queue one event; never blocks on I/O. Drops the oldest queued event when full.

        An engine transition (no id or gateway id) becomes an event when it is written, off the
        hot path: it gets a fresh event id and this spool's `gateway_id`."""
        with self._lock:
            if self._closed:
                self._dropped_closed += 1
                return
            buf = self._buf
            if not buf:
                self._buf_since_ms = self._clock()
            elif len(buf) >= self._max_buffered:
                buf.popleft()
                self._dropped_buffer += 1
            self._seq += 1
            buf.append((self._seq, event))
            wake = len(buf) == self._wake_at
        if wake:
            self._wake.set()

    def on_transition(self, transition: TransitionEvent | TransitionLike) -> None:
        """Engine observer hook: record the event; a failure is logged, never raised."""
        try:
            self.record(transition)
        except Exception:
            log.exception("telemetry spool failed to record a transition event")

    # -- state ------------------------------------------------------------------------------

    @property
    def directory(self) -> Path:
        return self._dir

    @property
    def dropped(self) -> int:
        """Events lost so far, for every reason of `DROP_REASONS`."""
        return sum(self.dropped_counts().values())

    def dropped_counts(self) -> dict[str, int]:
        """Events lost so far by reason (every one of `DROP_REASONS`, zeros included)."""
        with self._lock:
            buffered, closed = self._dropped_buffer, self._dropped_closed
        return {"buffer_full": buffered, "disk_cap": self._dropped_disk,
                "write_failed": self._dropped_failed, "closed": closed}

    @property
    def written(self) -> int:
        """Events written to segment files by this spool."""
        return self._written

    @property
    def total_bytes(self) -> int:
        """Bytes of segment files currently kept on disk."""
        return self._total_bytes

    def segments(self) -> list[str]:
        """Names of the segments on disk, oldest first."""
        with self._io_lock:
            return [s.name for s in self._segments]

    # -- writer -----------------------------------------------------------------------------

    def pump(self, *, force: bool = False) -> int:
        """Write what is due: full segments, a segment older than the age limit, or (with
        `force`) everything buffered. Returns the number of segments written."""
        with self._io_lock:
            return self._pump_locked(force)

    def flush(self) -> None:
        """Write every event recorded so far to a segment file (blocks on file I/O)."""
        self.pump(force=True)

    def close(self) -> None:
        """Flush, stop the background writer and refuse further events (they count as dropped)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join()
        self.flush()

    def __enter__(self) -> Spool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _run(self) -> None:
        while True:
            self._wake.wait(self._poll_interval_s)
            self._wake.clear()
            with self._lock:
                closed = self._closed
            if closed:
                return
            try:
                self.pump()
            except Exception:
                log.exception("telemetry spool writer failed")

    def _pump_locked(self, force: bool) -> int:
        with self._lock:
            items, self._buf = self._buf, deque()
            since = self._buf_since_ms
            dropped = self._dropped_buffer
        if dropped > self._warned_drops:
            self._warn_buffer_drops(dropped)
        written = 0
        if items and not self._pending:
            self._pending_since_ms = since
        for seq, event in items:
            try:
                line = to_json_line(event, seq, self._gateway_id)
            except Exception:
                log.exception("telemetry event %d could not be serialized; dropped", seq)
                self._dropped_failed += 1
                continue
            if self._pending and self._pending_bytes + len(line) > self._segment_max_bytes:
                written += self._commit()
                self._pending_since_ms = since
            if not self._pending:
                self._pending_first = seq
            self._pending.append(line)
            self._pending_bytes += len(line)
            self._pending_last = seq
        if self._pending and (
            force
            or self._pending_bytes >= self._segment_max_bytes
            or self._clock() - self._pending_since_ms >= self._segment_max_age_ms
        ):
            written += self._commit()
        return written

    def _commit(self) -> int:
        """Write the pending lines as one segment; returns 1 if it was written, else 0."""
        lines, count = self._pending, len(self._pending)
        first, last, size = self._pending_first, self._pending_last, self._pending_bytes
        self._pending, self._pending_bytes = [], 0
        name = segment_name(first, last)
        tmp = self._dir / f"{_TMP_PREFIX}{name}-{uuid.uuid4().hex}"
        try:
            self._write_mark(last)
            with open(tmp, "wb") as f:
                f.write(b"".join(lines))
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self._dir / name)
            self._fsync_dir()
        except OSError:
            with contextlib.suppress(OSError):
                tmp.unlink()
            log.exception(
                "telemetry segment %s could not be written; %d events dropped", name, count
            )
            self._dropped_failed += count
            return 0
        self._segments.append(_Segment(name, first, size, count))
        self._total_bytes += size
        self._written += count
        self._enforce_retention()
        return 1

    def _warn_buffer_drops(self, dropped: int) -> None:
        """Log the full-buffer drops not logged yet, unless a warning went out less than
        `BUFFER_WARN_INTERVAL_MS` ago (the next one then counts them)."""
        now = self._clock()
        last = self._warned_at_ms
        if last is not None and last <= now < last + BUFFER_WARN_INTERVAL_MS:
            return
        log.warning(
            "telemetry spool buffer full (%d events, the writer fell behind): dropped the %d "
            "oldest events (%d since start)",
            self._max_buffered,
            dropped - self._warned_drops,
            dropped,
        )
        self._warned_drops = dropped
        self._warned_at_ms = now

    def _enforce_retention(self) -> None:
        """Delete the oldest segments while the spool is over `max_total_bytes`, counting the
        events they held as dropped (a segment someone else already removed counts nothing)."""
        while self._total_bytes > self._max_total_bytes and self._segments:
            seg = self._segments.popleft()
            self._total_bytes -= seg.size
            path = self._dir / seg.name
            try:
                events = seg.events
                if events is None:
                    events = path.read_bytes().count(b"\n")
                path.unlink()
            except FileNotFoundError:
                continue
            self._dropped_disk += events
            log.warning(
                "telemetry spool over %d bytes: deleted %s (%d events)",
                self._max_total_bytes,
                seg.name,
                events,
            )

    def _write_mark(self, seq: int) -> None:
        tmp = self._dir / f"{_SEQ_MARK}.tmp"
        tmp.write_text(str(seq))
        os.replace(tmp, self._dir / _SEQ_MARK)

    def _fsync_dir(self) -> None:
        fd = os.open(self._dir, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def _recover(self) -> int:
        """Load the segments left by an earlier run and return the last seq ever handed out."""
        high = 0
        found: list[_Segment] = []
        for entry in os.scandir(self._dir):
            if entry.name.startswith(_TMP_PREFIX):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(entry.path)
                continue
            m = SEGMENT_RE.match(entry.name)
            if m:
                first, last = int(m.group(1)), int(m.group(2))
                found.append(_Segment(entry.name, first, entry.stat().st_size, None))
                high = max(high, last)
        mark = self._dir / _SEQ_MARK
        with contextlib.suppress(FileNotFoundError, ValueError):
            high = max(high, int(mark.read_text().strip() or 0))
        found.sort(key=lambda s: s.first_seq)
        self._segments.extend(found)
        self._total_bytes = sum(s.size for s in found)
        return high
