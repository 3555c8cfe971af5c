"""The durable part of Pulsar producer deduplication: the highest stored sequence id per
(topic, producer name), in `DATA_DIR/pulsar/producers.jsonl`.

A producer that reconnects after a gateway restart resends what it has no receipt for; the
front end must still know which sequence ids are stored. After each store, before the receipts
go out, the new highest ids are appended to the journal as JSON lines `[topic, name, id]` and
fsynced, in group commits (every producer's records that wait are written by one write and one
fsync). On start the journal is read (a torn last line from a crash is skipped, and so is an id
above `MAX_SEQUENCE_ID`, which older versions could write: dropping it means a resend of
those ids is stored again, where keeping it would break every PRODUCER of that name) and written
again compacted, one line per pair, through a temporary file renamed over it; it is compacted the
same way while the gateway runs once it holds `COMPACT_FACTOR` times more lines than pairs.

A crash between a store's commit and the journal's fsync (a few milliseconds) leaves those
sequence ids unrecorded: a resend of them is stored again (at least once, as before the
journal); nothing stored is lost either way.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from pathlib import Path

import structlog

log = structlog.get_logger(__name__)

MAX_SEQUENCE_ID = 2**63 - 1
"""Largest sequence id a SEND may carry (`edge` refuses larger ones): PRODUCER_SUCCESS reports
the last stored one as an int64 (`last_sequence_id`), so a larger one could never be reported
back."""
FILE_NAME = "producers.jsonl"
COMPACT_FACTOR = 4
"""Compact once the journal holds this many times more lines than pairs (and at least
`COMPACT_MIN_LINES`)."""
COMPACT_MIN_LINES = 10_000

Pair = tuple[str, str]


class Journal:
    """Append-only, fsynced records of stored sequence ids (see the module docstring)."""

    def __init__(self, directory: Path) -> None:
        self._path = directory / FILE_NAME
        self._dir = directory
        self._last: dict[Pair, int] = {}
        self._lines = 0
        self._pending: list[tuple[Pair, int]] = []
        self._waiters: list[asyncio.Future[None]] = []
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._fd = -1

    def load(self) -> dict[Pair, int]:
        """Read the journal and rewrite it compacted; the highest id per pair."""
        self._dir.mkdir(parents=True, exist_ok=True)
        if self._path.exists():
            with self._path.open("rb") as f:
                for raw in f:
                    record = _parse(raw)
                    if record is not None:
                        pair, sequence_id = record
                        self._last[pair] = max(self._last.get(pair, -1), sequence_id)
        self._compact(list(self._last.items()))
        return dict(self._last)

    def start(self) -> None:
        """Start the group-commit writer (on the event loop)."""
        self._task = asyncio.create_task(self._run(), name="pulsar-dedup-journal")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    async def record(self, topic: str, name: str, sequence_id: int) -> None:
        """Append that `sequence_id` (and everything below it) of the producer is stored;
        returns once it is on disk. Raises OSError when it cannot be written."""
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._pending.append(((topic, name), sequence_id))
        self._waiters.append(waiter)
        self._wake.set()
        await waiter

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            pending, self._pending = self._pending, []
            waiters, self._waiters = self._waiters, []
            if not pending:
                continue
            for pair, sequence_id in pending:
                self._last[pair] = max(self._last.get(pair, -1), sequence_id)
            data = b"".join(_line(pair, seq) for pair, seq in pending)
            try:
                await asyncio.to_thread(self._append, data)
                self._lines += len(pending)
                if self._lines >= max(COMPACT_MIN_LINES, COMPACT_FACTOR * len(self._last)):
                    await asyncio.to_thread(self._compact, list(self._last.items()))
            except OSError as exc:
                log.error("pulsar dedup journal not written", error=str(exc))
                for waiter in waiters:
                    if not waiter.done():
                        waiter.set_exception(exc)
                continue
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_result(None)

    def _append(self, data: bytes) -> None:
        if self._fd < 0:
            self._fd = os.open(self._path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        os.write(self._fd, data)
        os.fsync(self._fd)

    def _compact(self, items: list[tuple[Pair, int]]) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        temporary = self._path.with_suffix(".tmp")
        with temporary.open("wb") as f:
            f.write(b"".join(_line(pair, seq) for pair, seq in items))
            f.flush()
            os.fsync(f.fileno())
        os.replace(temporary, self._path)
        directory = os.open(self._dir, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)
        self._lines = len(items)

    def forget(self, pair: Pair) -> None:
        """Drop a pair the registry no longer remembers (gone at the next compaction)."""
        self._last.pop(pair, None)


def _line(pair: Pair, sequence_id: int) -> bytes:
    return json.dumps([pair[0], pair[1], sequence_id], ensure_ascii=False).encode() + b"\n"


def _parse(raw: bytes) -> tuple[Pair, int] | None:
    try:
        topic, name, sequence_id = json.loads(raw)
    except (ValueError, TypeError):
        return None  # a torn last line
    if not (isinstance(topic, str) and isinstance(name, str) and isinstance(sequence_id, int)):
        return None
    if not -1 <= sequence_id <= MAX_SEQUENCE_ID:
        # Written before the edge refused such ids: a PRODUCER could not report it (int64).
        log.warning("pulsar dedup journal entry out of range, ignored", topic=topic,
                    producer=name, sequence_id=sequence_id)
        return None
    return (topic, name), sequence_id
