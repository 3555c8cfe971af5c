"""The durable exchanges, queues and bindings, kept across restarts in a journal file.

One JSON record per line (`Topology.apply` replays them), appended and fsynced before the
declare is answered, so a `declare-ok` means the entity survives a crash. At start the journal
is read (a torn last line from a crash is dropped) and rewritten as a snapshot of what it holds,
atomically (write, fsync, rename, fsync the directory); and again whenever the records appended
since outnumber the snapshot's several times (a client declaring and deleting durable queues in
a loop does not grow the file without end). Replaying a record again is harmless, so a snapshot
may already hold changes whose records are appended after it.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Sequence
from pathlib import Path

import structlog

from adapters.amqp.frontend.topology import Change, Topology

log = structlog.get_logger(__name__)

FILE = "topology.jsonl"
COMPACT_MIN = 10_000
"""Records appended since the last snapshot before the journal may be compacted..."""
COMPACT_FACTOR = 4
"""...and only when they are this many times the snapshot's records."""


class Journal:
    def __init__(self, directory: Path) -> None:
        self.path = directory / FILE
        self._lock = asyncio.Lock()
        self._topology: Topology | None = None
        self._snapshot_records = 0
        self._appended = 0

    def load(self, topology: Topology) -> int:
        """Replay the journal into `topology` and compact it; the records replayed."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        count = 0
        if self.path.exists():
            lines = self.path.read_text("utf-8").splitlines()
            for number, line in enumerate(lines, 1):
                if not line.strip():
                    continue
                try:
                    topology.apply(json.loads(line))
                    count += 1
                except Exception as exc:
                    if number == len(lines):
                        log.warning("amqp topology journal: torn last record dropped",
                                    path=str(self.path))
                        break
                    raise RuntimeError(f"{self.path}:{number}: unreadable record: {exc}") from exc
        self._topology = topology
        records = topology.snapshot()
        self._rewrite(records)
        self._snapshot_records = len(records)
        return count

    async def append(self, changes: Sequence[Change]) -> None:
        """Write `changes` durably (nothing for an empty list)."""
        if not changes:
            return
        text = "".join(json.dumps(c, separators=(",", ":"), sort_keys=True) + "\n"
                       for c in changes)
        async with self._lock:
            await asyncio.to_thread(self._write, text)
            self._appended += len(changes)
            if self._topology is not None and self._appended >= max(
                COMPACT_MIN, COMPACT_FACTOR * self._snapshot_records
            ):
                records = self._topology.snapshot()  # here, in the loop that changes it
                try:
                    await asyncio.to_thread(self._rewrite, records)
                except OSError as exc:  # the journal as it was is still whole: go on
                    log.warning("amqp topology journal not compacted", error=exc.strerror)
                    return
                self._snapshot_records = len(records)
                self._appended = 0

    def _write(self, text: str) -> None:
        with self.path.open("a", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())

    def _rewrite(self, records: list[Change]) -> None:
        tmp = self.path.with_suffix(".tmp")
        with tmp.open("w", encoding="utf-8") as f:
            for record in records:
                f.write(json.dumps(record, separators=(",", ":"), sort_keys=True) + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        fd = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
