"""The durable exchanges, queues and bindings, kept across restarts in a journal file.

One JSON record per line (`Topology.apply` replays them), appended and fsynced before the
declare is answered, so a `declare-ok` means the entity survives a crash. At start the journal
is read (a torn last line from a crash is dropped) and rewritten as a snapshot of what it holds,
atomically (write, fsync, rename, fsync the directory).
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


class Journal:
    def __init__(self, directory: Path) -> None:
        self.path = directory / FILE
        self._lock = asyncio.Lock()

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
        self._rewrite(topology.snapshot())
        return count

    async def append(self, changes: Sequence[Change]) -> None:
        """Write `changes` durably (nothing for an empty list)."""
        if not changes:
            return
        text = "".join(json.dumps(c, separators=(",", ":"), sort_keys=True) + "\n"
                       for c in changes)
        async with self._lock:
            await asyncio.to_thread(self._write, text)

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
