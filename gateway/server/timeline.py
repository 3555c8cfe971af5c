"""A message's timeline for one group: every transition the telemetry spool holds for it.

The spool (`gateway.telemetry.spool`) keeps every transition as one JSON line in segment files;
this module reads them back for one message. Segments are read in a worker thread (they may add
up to the spool's size limit) and a line is parsed only when it names the message. Events still
in the spool's memory are written out first, at most once a second, so that the timeline of a
message that moved a moment ago is whole.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from gateway.telemetry.events import STATES
from gateway.telemetry.spool import SEGMENT_RE, Spool

FLUSH_INTERVAL_S = 1.0
"""The spool's buffer is written out at most this often for timelines."""
MAX_EVENTS = 10_000
"""Most transitions a timeline holds (the latest are kept)."""


@dataclass(frozen=True, slots=True)
class TimelineEvent:
    ts_ms: int
    from_state: str
    to_state: str
    attempt: int
    delay_ms: int
    reason: str
    destination: str


class SpoolTimeline:
    """Reads one message's transitions from a telemetry spool."""

    def __init__(self, spool: Spool) -> None:
        self._spool = spool
        self._lock = threading.Lock()
        self._flushed_at = 0.0

    @property
    def complete(self) -> bool:
        """False once the spool has lost events (a full buffer, or old segments deleted)."""
        return self._spool.dropped == 0

    async def events(self, topic: str, group: str, message_id: str) -> list[TimelineEvent]:
        """The message's transitions for `group` of `topic`, oldest first."""
        return await asyncio.to_thread(self._read, topic, group, message_id)

    def _flush(self) -> None:
        with self._lock:
            now = time.monotonic()
            if now - self._flushed_at < FLUSH_INTERVAL_S:
                return
            self._flushed_at = now
        self._spool.flush()

    def _read(self, topic: str, group: str, message_id: str) -> list[TimelineEvent]:
        self._flush()
        return read_events(self._spool.directory, topic, group, message_id)


def read_events(
    directory: Path, topic: str, group: str, message_id: str
) -> list[TimelineEvent]:
    """Every transition of `message_id` for `group` of `topic` in the spool's segments."""
    needle = b'"message_id":' + json.dumps(message_id).encode()
    found: list[tuple[int, int, TimelineEvent]] = []
    try:
        names = sorted(e.name for e in os.scandir(directory) if SEGMENT_RE.match(e.name))
    except OSError:
        return []
    for name in names:
        try:
            data = (directory / name).read_bytes()
        except OSError:  # deleted by the spool's retention meanwhile
            continue
        if needle not in data:
            continue
        for line in data.splitlines():
            if needle not in line:
                continue
            event = _parse(line, topic, group, message_id)
            if event is not None:
                found.append(event)
    found.sort(key=lambda e: (e[0], e[1]))
    return [e for _, _, e in found[-MAX_EVENTS:]]


def _parse(
    line: bytes, topic: str, group: str, message_id: str
) -> tuple[int, int, TimelineEvent] | None:
    try:
        row = json.loads(line)
        if (row.get("message_id") != message_id or row.get("group") != group
                or row.get("topic") != topic):
            return None
        to_state = str(row["to_state"])
        from_state = str(row.get("from_state") or "")
        if to_state not in STATES or (from_state and from_state not in STATES):
            return None
        return int(row["ts_ms"]), int(row.get("seq", 0)), TimelineEvent(
            int(row["ts_ms"]), from_state, to_state, int(row.get("attempt", 0)),
            int(row.get("delay_ms", 0)), str(row.get("reason", "")),
            str(row.get("destination", "")),
        )
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
