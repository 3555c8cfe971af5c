"""Group commit: one thread writes every queued change, one transaction per batch.

Callers submit a write (a function of the connection) and may await its future; the future
completes only after the COMMIT of the transaction that holds the write. Writes are applied in
submission order. While one transaction commits (and fsyncs), new writes queue up and go into
the next transaction together, so many concurrent callers share one fsync.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import pathlib
import queue
import sqlite3
import threading
from collections.abc import Callable
from dataclasses import dataclass

from gateway.errors import Unavailable
from gateway.store.schema import connect

log = logging.getLogger(__name__)

Write = Callable[[sqlite3.Connection], None]


@dataclass(slots=True)
class _Job:
    write: Write
    future: asyncio.Future[None] | None


class GroupCommitWriter:
    """The single writer thread of a store, with counters of what it committed."""

    def __init__(
        self,
        data_dir: pathlib.Path,
        loop: asyncio.AbstractEventLoop,
        *,
        fsync: bool,
        on_failure: Callable[[BaseException], None],
        max_batch: int = 4096,
    ) -> None:
        self._data_dir = data_dir
        self._loop = loop
        self._fsync = fsync
        self._on_failure = on_failure
        self._max_batch = max_batch
        self._queue: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="store-writer", daemon=True)
        self._failed: BaseException | None = None
        self.transactions = 0
        """Transactions committed (or attempted) so far."""
        self.writes = 0
        """Writes applied so far; writes / transactions is the mean batch size."""

    def start(self) -> None:
        """Start the writer thread."""
        self._thread.start()

    def submit(self, write: Write) -> asyncio.Future[None]:
        """Queue `write`; the returned future is done after its transaction commits."""
        future = self._loop.create_future()
        self._put(_Job(write, future))
        return future

    def submit_nowait(self, write: Write) -> None:
        """Queue `write` without waiting for it (later writes still commit after it)."""
        self._put(_Job(write, None))

    def _put(self, job: _Job) -> None:
        if self._failed is not None:
            raise Unavailable(f"embedded store write failed earlier: {self._failed}")
        self._queue.put(job)

    async def stop(self) -> None:
        """Write everything queued, then end the thread."""
        self._queue.put(None)
        await asyncio.to_thread(self._thread.join)

    def _run(self) -> None:
        conn = connect(self._data_dir, fsync=self._fsync)
        try:
            stopping = False
            while not stopping:
                first = self._queue.get()
                if first is None:
                    break
                batch = [first]
                while len(batch) < self._max_batch:
                    try:
                        job = self._queue.get_nowait()
                    except queue.Empty:
                        break
                    if job is None:
                        stopping = True
                        break
                    batch.append(job)
                self._commit(conn, batch)
        finally:
            conn.close()

    def _commit(self, conn: sqlite3.Connection, batch: list[_Job]) -> None:
        error: BaseException | None = None
        try:
            conn.execute("BEGIN IMMEDIATE")
            for job in batch:
                job.write(conn)
            conn.execute("COMMIT")
        except BaseException as exc:  # any failure fails the whole batch and the store
            error = exc
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
        self.transactions += 1
        self.writes += len(batch)
        futures = [job.future for job in batch if job.future is not None]
        if error is not None:
            self._failed = error
            log.error("embedded store commit failed: %r", error)
        # a closed loop raises RuntimeError: nobody is waiting any more
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(_settle, futures, error, self._on_failure)


def _settle(
    futures: list[asyncio.Future[None]],
    error: BaseException | None,
    on_failure: Callable[[BaseException], None],
) -> None:
    if error is not None:
        on_failure(error)
    for future in futures:
        if future.done():
            continue
        if error is None:
            future.set_result(None)
        else:
            future.set_exception(Unavailable(f"embedded store commit failed: {error}"))
