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
sequence ids unrecorded. On a back end whose message ids increase in topic order (`positions`:
the embedded store, the in-memory one) each line also carries the topic's covered message id
`[topic, name, id, covered]`: every message of the topic up to it has its producer's sequence id
on disk once the line is. It is the newest message id recorded for the topic, held back below
the stores under way on it (`begin`): each such store's messages come after the newest message
id recorded when it began. On start, `dedup_recovery` reads each topic's messages after its
covered id and raises each producer's id to the highest its stored messages carry, so a resend
is not stored twice. Elsewhere (broker back ends, lines written before) a resend of those ids
is stored again (at least once, as before the journal); nothing stored is lost either way.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
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

STALL_ENV = "GATEWAY_TEST_PULSAR_JOURNAL_STALL"
"""Test-only seam, unset in service: a file path; while that file exists, each journal write
stalls before writing, after creating `<path>.reached` (the window between a store's commit and
the journal's fsync, held open so a test can `kill -9` the gateway in it)."""

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
        self._covered: dict[str, str] = {}
        """Per topic: every message up to this id has its sequence id in the file."""
        self._newest: dict[str, str] = {}
        """Per topic: the newest message id recorded (maybe not yet written)."""
        self._flight: dict[int, tuple[str, str]] = {}
        """Stores under way: token -> (topic, the topic's newest recorded id at their start)."""
        self._tokens = 0
        self._resync = False
        """A write failed: the next one rewrites the file (`_compact`)."""
        self._stall = os.environ.get(STALL_ENV, "")

    def covered(self) -> dict[str, str]:
        """Per topic, the message id up to which the file covers every stored message."""
        return dict(self._covered)

    def begin(self, topic: str) -> int:
        """A store of `topic` begins (before its publish): its token, for `record` or `end`."""
        self._tokens += 1
        self._flight[self._tokens] = (topic, self._newest.get(topic, ""))
        return self._tokens

    def end(self, token: int) -> None:
        """The store of `token` is over without a `record` (its publish failed)."""
        self._flight.pop(token, None)

    def floor(self, token: int) -> str:
        """The newest message id recorded for the topic when the store of `token` began (its
        messages come after it), "" when none was."""
        return self._flight.get(token, ("", ""))[1]

    def adopt(self, marks: dict[Pair, int]) -> None:
        """Raise those pairs' ids (found stored by recovery) and rewrite the file with them."""
        for pair, sequence_id in marks.items():
            self._last[pair] = max(self._last.get(pair, -1), sequence_id)
        self._compact(list(self._last.items()))

    def load(self) -> dict[Pair, int]:
        """Read the journal and rewrite it compacted; the highest id per pair."""
        self._dir.mkdir(parents=True, exist_ok=True)
        if self._path.exists():
            with self._path.open("rb") as f:
                for raw in f:
                    record = _parse(raw)
                    if record is not None:
                        pair, sequence_id, covered = record
                        self._last[pair] = max(self._last.get(pair, -1), sequence_id)
                        if covered:
                            self._covered[pair[0]] = max(self._covered.get(pair[0], ""), covered)
        self._newest = dict(self._covered)
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

    async def record(
        self, topic: str, name: str, sequence_id: int, message_id: str = "", token: int = 0
    ) -> None:
        """Append that `sequence_id` (and everything below it) of the producer is stored,
        `message_id` the newest message of the store (`token`, from `begin`) or "" where ids are
        not ordered; returns once it is on disk. Raises OSError when it cannot be written."""
        self._flight.pop(token, None)
        if message_id:
            self._newest[topic] = max(self._newest.get(topic, ""), message_id)
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
            self._advance({pair[0] for pair, _ in pending})
            data = b"".join(self._line(pair, seq) for pair, seq in pending)
            try:
                await asyncio.to_thread(self._append, data)
                self._lines += len(pending)
                if self._resync or self._lines >= max(
                    COMPACT_MIN_LINES, COMPACT_FACTOR * len(self._last)
                ):
                    await asyncio.to_thread(self._compact, list(self._last.items()))
                    self._resync = False
            except OSError as exc:
                # The covered ids written next count these records in: the next write that
                # succeeds rewrites the whole file, with them.
                self._resync = True
                log.error("pulsar dedup journal not written", error=str(exc))
                for waiter in waiters:
                    if not waiter.done():
                        waiter.set_exception(exc)
                continue
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_result(None)

    def _advance(self, topics: set[str]) -> None:
        """Move each topic's covered id up to its newest recorded one, held back below the
        stores under way on it (their messages come after what was recorded when they began:
        any message up to the result is in this write or an earlier one)."""
        for topic in topics:
            newest = self._newest.get(topic, "")
            floors = [floor for t, floor in self._flight.values() if t == topic]
            covered = min([newest, *floors])
            if covered > self._covered.get(topic, ""):
                self._covered[topic] = covered

    def _line(self, pair: Pair, sequence_id: int) -> bytes:
        return _line(pair, sequence_id, self._covered.get(pair[0], ""))

    def _append(self, data: bytes) -> None:
        if self._stall:
            _stall(Path(self._stall))
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
            f.write(b"".join(self._line(pair, seq) for pair, seq in items))
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


def _stall(path: Path) -> None:
    """The test seam `STALL_ENV` (on the writer's thread)."""
    if path.exists():
        path.with_name(path.name + ".reached").touch()
        while path.exists():
            time.sleep(0.01)


def _line(pair: Pair, sequence_id: int, covered: str = "") -> bytes:
    record: list[object] = [pair[0], pair[1], sequence_id]
    if covered:
        record.append(covered)
    return json.dumps(record, ensure_ascii=False).encode() + b"\n"


def _parse(raw: bytes) -> tuple[Pair, int, str] | None:
    try:
        topic, name, sequence_id, *rest = json.loads(raw)
    except (ValueError, TypeError):
        return None  # a torn last line
    if not (isinstance(topic, str) and isinstance(name, str) and isinstance(sequence_id, int)):
        return None
    covered = rest[0] if len(rest) == 1 and isinstance(rest[0], str) else ""
    if not -1 <= sequence_id <= MAX_SEQUENCE_ID:
        # Written before the edge refused such ids: a PRODUCER could not report it (int64).
        log.warning("pulsar dedup journal entry out of range, ignored", topic=topic,
                    producer=name, sequence_id=sequence_id)
        return None
    return (topic, name), sequence_id, covered
