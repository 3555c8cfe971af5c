"""The embedded store's writer and reader: opened together, and restarted when the writer fails.

A failed commit (disk full) or a lost writer fails the writes waiting for it; the supervisor
then marks the store down (every call fails with Unavailable at once), restarts the writer with
back-off (`gateway.store.recovery`) and has the index rebuilt from the tables, the durable truth,
as opening does. Leases handed out before are void then (a new session; `on_leases_lost`). At
too many failures in a row it gives up (`fatal`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import pathlib
import sqlite3
from collections.abc import Callable

from gateway.errors import Unavailable
from gateway.store import index, writes
from gateway.store import reader as rd
from gateway.store.recovery import Recovery
from gateway.store.writer import COMMIT_TIMEOUT_S, GroupCommitWriter, StoreGone

_log = logging.getLogger(__name__)


def _load(conn: sqlite3.Connection) -> rd.Loaded:
    """The tables, with MEMORY_KEEP delayed positions per group (the rest are paged in)."""
    return rd.load(conn, index.MEMORY_KEEP)


class Supervisor:
    """Opens, serves, restarts and closes the writer process and the reader thread.

    `install(loaded)` rebuilds the store's index from the tables (at open and after each
    restart); `wake()` wakes everybody waiting on the index (the store went down or closes).
    """

    def __init__(
        self,
        data_dir: pathlib.Path,
        *,
        fsync: bool,
        recovery: Recovery,
        install: Callable[[rd.Loaded], None],
        wake: Callable[[], None],
        commit_timeout_s: float = COMMIT_TIMEOUT_S,
    ) -> None:
        self._dir = data_dir
        self._commit_timeout_s = commit_timeout_s
        self._fsync = fsync
        self._recovery = recovery
        self._install = install
        self._wake = wake
        self.writer: GroupCommitWriter | None = None
        self.reader: rd.Reader | None = None
        self.open = False
        self.failure: BaseException | None = None
        """Why the store is down (it is recovering), or None."""
        self.fatal: str | None = None
        """Why the store gave up, or None."""
        self._recovering: asyncio.Task[None] | None = None
        self._state_listeners: list[Callable[[], None]] = []
        self._reset_listeners: list[Callable[[], None]] = []

    # ----------------------------------------------------------------- lifecycle

    async def start(self) -> None:
        """Start the writer, load the tables and install them; then the store is open."""
        # The writer first: it takes the directory's lock (so an earlier writer has ended)
        # and creates the tables; only then is the index loaded.
        self.failure = None
        self.fatal = None
        self._recovery.reset()
        writer = self._new_writer()
        await writer.start()
        try:
            self.reader = rd.Reader(self._dir)
            try:
                loaded = await self.reader.run(_load)
            except sqlite3.DatabaseError as exc:
                # A damaged store file (`database disk image is malformed`) was a traceback
                # and exit status 1: one line naming the directory instead.
                raise Unavailable(f"embedded store did not open: cannot read the store in "
                                  f"{self._dir.resolve()}: {exc}") from None
            if writer.failed is not None:  # it ended meanwhile: nobody would restart it
                raise Unavailable(f"embedded store did not open: {writer.failed}")
        except BaseException:
            await writer.stop()
            if self.reader is not None:
                await self.reader.close()
                self.reader = None
            raise
        self._serve(writer, loaded)
        self.open = True

    async def stop(self, *tasks: asyncio.Task[None] | None) -> None:
        """Close: cancel `tasks` (the store's own) and any recovery, stop the writer and the
        reader."""
        self.open = False
        for task in (*tasks, self._recovering):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._recovering = None
        self._wake()
        if self.writer is not None:
            await self.writer.stop()
        if self.reader is not None:
            await self.reader.close()
        self.writer = None
        self.reader = None

    def ready(self) -> tuple[GroupCommitWriter, rd.Reader]:
        """The writer and the reader, or Unavailable saying why the store does not serve."""
        if self.fatal is not None:
            raise Unavailable(self.fatal)
        if not self.open or self.writer is None or self.reader is None:
            raise Unavailable("embedded store is not open")
        if self.failure is not None:
            raise Unavailable(f"embedded store is recovering from: {self.failure}")
        return self.writer, self.reader

    def healthy(self) -> bool:
        return self.open and self.failure is None and self.fatal is None

    def on_state_change(self, callback: Callable[[], None]) -> None:
        self._state_listeners.append(callback)

    def on_leases_lost(self, callback: Callable[[], None]) -> None:
        self._reset_listeners.append(callback)

    def _tell(self, listeners: list[Callable[[], None]]) -> None:
        for listener in listeners:
            try:
                listener()
            except Exception:  # a listener's bug must not stop the store's recovery
                _log.exception("embedded store listener failed")

    def _new_writer(self) -> GroupCommitWriter:
        writer: GroupCommitWriter

        def failed(error: BaseException) -> None:
            self._writer_failed(writer, error)

        writer = GroupCommitWriter(
            self._dir, asyncio.get_running_loop(), fsync=self._fsync, on_failure=failed,
            commit_timeout_s=self._commit_timeout_s,
        )
        return writer

    def _serve(self, writer: GroupCommitWriter, loaded: rd.Loaded) -> None:
        """Serve with `writer` and an index rebuilt from `loaded`."""
        self.writer = writer
        self._install(loaded)

    # ----------------------------------------------------------------- recovery

    def _writer_failed(self, writer: GroupCommitWriter, error: BaseException) -> None:
        """The serving writer failed (a restart attempt's own writer is not looked at here:
        the attempt sees its failure)."""
        if writer is not self.writer or not self.open or self.failure is not None:
            return
        if isinstance(error, StoreGone):  # nothing to restart on: the process must go
            self.failure = error
            self._wake()
            self._give_up(str(error))
            return
        self.failure = error
        self._recovery.failed()
        self._wake()
        self._recovering = asyncio.ensure_future(self._recover(writer))
        self._tell(self._state_listeners)

    async def _recover(self, old: GroupCommitWriter) -> None:
        """Restart the writer and rebuild the index until that works or the store gives up."""
        try:
            await self._restart(old)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug here must not leave the store down for good, unsaid
            _log.exception("embedded store recovery failed")
            self._give_up(f"embedded store recovery failed: {exc!r}")

    async def _restart(self, old: GroupCommitWriter) -> None:
        await old.kill()  # and reaped: its last frames are committed (or lost) by now
        while not self._recovery.exhausted:
            await asyncio.sleep(self._recovery.delay_s())
            writer = self._new_writer()
            try:
                await writer.start()
                await writer.submit(writes.BARRIER)
                assert self.reader is not None
                loaded = await self.reader.run(_load)
                if writer.failed is not None:
                    raise writer.failed
            except asyncio.CancelledError:
                await writer.kill(0.0)
                raise
            except Exception as exc:  # any reason: count it and try again
                await writer.kill(0.0)
                self.failure = exc
                self._recovery.failed()
                _log.error("embedded store restart failed (%d in a row): %s",
                           self._recovery.failures, exc)
                continue
            self._serve(writer, loaded)
            self._tell(self._reset_listeners)
            self.failure = None
            self._recovery.healed()
            self._recovering = None
            _log.warning("embedded store recovered: writer restarted, index rebuilt")
            self._tell(self._state_listeners)
            return
        self._give_up(
            f"embedded store gave up after {self._recovery.failures} failures in a row;"
            f" the last: {self.failure}"
        )

    def _give_up(self, reason: str) -> None:
        self.fatal = reason
        _log.critical("%s", reason)
        self._recovering = None
        self._tell(self._state_listeners)
