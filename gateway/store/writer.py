"""Group commit in a process of its own: the store's one writer.

Callers submit a write (`gateway.store.writes.Write`) and may await its future; the future
completes, with the write's result, only after the COMMIT of the transaction that holds it.
Writes are applied in submission order. The writes submitted in one turn of the event loop go
to the writer process as one frame; while it commits (and fsyncs), new frames queue up and go
into the next transaction together, so many concurrent callers share one fsync.

The writer runs SQLite in its own process (`gateway.store.writer_proc`) so that its work never
waits for, or holds, the gateway's interpreter lock: in a thread, each of its statements gave
up the lock and then queued behind the event loop to take it back.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import pathlib
import socket
import subprocess
import sys
from collections.abc import Callable

from gateway.errors import Unavailable
from gateway.store.pipe import FrameBuffer, frame
from gateway.store.writes import Write

log = logging.getLogger(__name__)

START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 60.0
LOCK_WAIT_S = 10.0
"""How long a new writer waits for an earlier one (of a gateway just killed) to end."""
COMMIT_TIMEOUT_S = 30.0
"""How long writes may wait for the writer's next commit before the writer counts as hung (a
stopped process, a disk that never answers): it is killed and the store restarts it, as it does
a writer that died. Without this a stopped writer held every publish, and health, for ever."""
SOCKET_BUFFER_BYTES = 4 << 20
_PACKAGE_ROOT = str(pathlib.Path(__file__).resolve().parents[2])


class WriterFailed(Exception):
    """The writer process failed a transaction or ended without being asked to."""


class StoreGone(WriterFailed):
    """The store's files were deleted or replaced under the writer: no new writer can carry on
    from the index this process holds (`writer_proc`)."""


class GroupCommitWriter:
    """The store's writer process and the futures of the writes it has not committed yet."""

    def __init__(
        self,
        data_dir: pathlib.Path,
        loop: asyncio.AbstractEventLoop,
        *,
        fsync: bool,
        on_failure: Callable[[BaseException], None],
        lock_wait_s: float = LOCK_WAIT_S,
        commit_timeout_s: float = COMMIT_TIMEOUT_S,
    ) -> None:
        self._data_dir = data_dir
        self._loop = loop
        self._fsync = fsync
        self._on_failure = on_failure
        self._lock_wait_s = lock_wait_s
        self._commit_timeout_s = commit_timeout_s
        self._progress_at = 0.0
        """Loop time of the last commit answered, or of the first write queued after it."""
        self._watch: asyncio.TimerHandle | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._transport: asyncio.Transport | None = None
        self._started: asyncio.Future[None] = loop.create_future()
        self._ended: asyncio.Future[None] = loop.create_future()
        self._out: list[Write] = []
        self._flush_due = False
        self._next = 0
        """Number of the next write submitted (the writer counts the same way)."""
        self._waiting: collections.deque[tuple[int, asyncio.Future[object]]] = (
            collections.deque()
        )
        self._failed: BaseException | None = None
        self._stopping = False
        self.transactions = 0
        """Transactions committed so far."""
        self.writes = 0
        """Writes committed so far; writes / transactions is the mean batch size."""

    @property
    def pid(self) -> int | None:
        """The writer process's id, once started."""
        return None if self._proc is None else self._proc.pid

    @property
    def failed(self) -> BaseException | None:
        """Why the writer failed (it takes no more writes), or None while it works."""
        return self._failed

    async def start(self) -> None:
        """Start the writer process and wait until it has opened the store."""
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        for sock in (mine, theirs):
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SOCKET_BUFFER_BYTES)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SOCKET_BUFFER_BYTES)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (_PACKAGE_ROOT, env.get("PYTHONPATH", "")) if p
        )
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "gateway.store.writer_proc", str(self._data_dir.absolute()),
                 "1" if self._fsync else "0", str(theirs.fileno()), str(self._lock_wait_s)],
                pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL, env=env,
            )
        finally:
            theirs.close()
        mine.setblocking(False)
        transport, _ = await self._loop.connect_accepted_socket(lambda: _Link(self), mine)
        self._transport = transport
        try:
            await asyncio.wait_for(asyncio.shield(self._started), START_TIMEOUT_S)
        except (TimeoutError, WriterFailed) as exc:
            await self.kill()
            raise Unavailable(f"embedded store did not open: {exc}") from None
        except asyncio.CancelledError:  # start-up ended (SIGTERM): no writer left behind
            await self.kill(0.0)
            raise
        self._arm_watch()

    def _arm_watch(self) -> None:
        self._watch = self._loop.call_later(
            min(1.0, self._commit_timeout_s / 4), self._check_progress)

    def _check_progress(self) -> None:
        """Fail the writer when writes have waited `commit_timeout_s` for a commit."""
        self._watch = None
        if self._failed is not None or self._transport is None:
            return
        waited = self._loop.time() - self._progress_at
        if self._next > self.writes and waited > self._commit_timeout_s:
            self._fail(WriterFailed(
                f"the embedded store's writer process committed nothing for {waited:.0f} s "
                f"(commit_timeout_s {self._commit_timeout_s:g}): stopped or hung"))
            self._transport.abort()
            return
        self._arm_watch()

    def submit(self, write: Write) -> asyncio.Future[object]:
        """Queue `write`; the returned future is done, with the write's result, after its
        transaction commits."""
        future: asyncio.Future[object] = self._loop.create_future()
        self._queue(write)
        self._waiting.append((self._next - 1, future))
        return future

    def submit_nowait(self, write: Write) -> None:
        """Queue `write` without waiting for it (later writes still commit after it)."""
        self._queue(write)

    def _queue(self, write: Write) -> None:
        if self._failed is not None:
            raise Unavailable(f"embedded store write failed earlier: {self._failed}")
        if self._transport is None or self._stopping:
            raise Unavailable("embedded store writer is not running")
        if self._next == self.writes:  # nothing was outstanding: the wait starts now
            self._progress_at = self._loop.time()
        self._out.append(write)
        self._next += 1
        if not self._flush_due:
            self._flush_due = True
            self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        """Send the writes queued in this turn of the loop as one frame."""
        self._flush_due = False
        if not self._out or self._transport is None or self._transport.is_closing():
            return
        batch, self._out = self._out, []
        awaited = bool(self._waiting) and self._waiting[-1][0] >= self._next - len(batch)
        try:
            self._transport.write(frame((awaited, batch)))
        except Exception as exc:  # nothing may wait forever for writes that never left
            self._fail(WriterFailed(f"embedded store writes could not be sent: {exc!r}"))
            self._transport.abort()

    async def stop(self) -> None:
        """Commit everything queued, then end the writer process."""
        if self._transport is None:
            return
        self._flush()
        self._stopping = True
        if not self._transport.is_closing():
            self._transport.write_eof()
        try:
            await asyncio.wait_for(asyncio.shield(self._ended), STOP_TIMEOUT_S)
        except TimeoutError:
            log.error("embedded store writer did not stop within %.0f s", STOP_TIMEOUT_S)
        await self.kill()

    async def kill(self, wait_s: float = 5.0) -> None:
        """Cut the link, give the process `wait_s` to end by itself (it commits the whole
        frames it has read), then kill it; reap it either way."""
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None
        if self._transport is not None:
            self._transport.abort()
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None:
            try:
                await asyncio.wait_for(asyncio.to_thread(proc.wait), wait_s)
            except TimeoutError:
                proc.kill()
                await asyncio.to_thread(proc.wait)

    # ------------------------------------------------------------- the writer's answers
    def _answer(self, message: tuple[object, ...]) -> None:
        kind = message[0]
        if kind == "ok":
            upto, results, transactions = message[1], message[2], message[3]
            assert isinstance(upto, int) and isinstance(results, list)
            assert isinstance(transactions, int)
            self.writes, self.transactions = upto, transactions
            self._progress_at = self._loop.time()
            values = dict(results) if results else {}
            waiting = self._waiting
            while waiting and waiting[0][0] < upto:
                number, future = waiting.popleft()
                if not future.done():
                    future.set_result(values.get(number))
        elif kind == "ready":
            if not self._started.done():
                self._started.set_result(None)
        elif kind == "gone":
            self._fail(StoreGone(f"embedded store lost its files: {message[1]}"))
        elif not self._started.done():
            self._start_failed(WriterFailed(str(message[1])))
        else:
            self._fail(WriterFailed(f"embedded store commit failed: {message[1]}"))

    def _lost(self) -> None:
        if not self._ended.done():
            self._ended.set_result(None)
        if not self._started.done():
            self._start_failed(WriterFailed("the writer process ended at start"))
        elif self._started.exception() is None and (self._waiting or not self._stopping):
            self._fail(WriterFailed("the embedded store's writer process ended"))

    def _start_failed(self, error: WriterFailed) -> None:
        self._started.set_exception(error)
        self._started.exception()  # seen: `start` raises it, if anybody still waits there

    def _fail(self, error: BaseException) -> None:
        first = self._failed is None
        if first:
            self._failed = error
            log.error("%s", error)
        waiting, self._waiting = self._waiting, collections.deque()
        for _, future in waiting:
            if not future.done():
                future.set_exception(Unavailable(str(error)))
        if first:
            self._on_failure(error)


class _Link(asyncio.Protocol):
    """The gateway's end of the socket pair: whole answer frames to the writer object."""

    def __init__(self, writer: GroupCommitWriter) -> None:
        self._writer = writer
        self._buffer = FrameBuffer()

    def data_received(self, data: bytes) -> None:
        self._buffer.feed(data)
        for message in self._buffer.frames():
            assert isinstance(message, tuple)
            self._writer._answer(message)

    def connection_lost(self, exc: Exception | None) -> None:
        self._writer._lost()
