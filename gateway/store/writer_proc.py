"""The embedded store's writer process: group commit outside the gateway's interpreter.

`gateway.store.writer.GroupCommitWriter` starts it as
`python -m gateway.store.writer_proc DATA_DIR FSYNC FD LOCK_WAIT_S`, FD being its end of a socket
pair. It first takes the data directory's writer lock, so that it starts only once an earlier
writer (of a gateway that was just killed) has committed and ended, and creates the tables.

It reads frames (`gateway.store.pipe`) that each hold whether anybody awaits one of its writes
and a list of writes (`gateway.store.writes.Write`). It applies every frame that has arrived in
one transaction, commits (with fsync when FSYNC is 1), then answers
`("ok", writes applied so far, [(write number, result), ...], transactions so far)`. Frames
nobody awaits wait up to DEFER_S for one that somebody does, so they pay no fsync of their own.

A failed transaction is rolled back and answered `("error", text)`, and the process ends: the
store fails the writes waiting for it and starts a new writer (`gateway.store.recovery`). Before
each COMMIT it checks that the store's files are still the ones it opened: when the database or
its WAL was deleted or replaced (the data directory removed while the gateway runs), a commit
would go to a file nobody will ever read again, so it rolls back, answers `("gone", text)` and
ends; the store then gives up (a new writer would start an empty store under a stale index). At end
of input (the store closed, or the gateway died) it commits the whole frames it has read and
ends. It ignores SIGINT, SIGTERM and SIGHUP: the gateway decides when it stops, and a terminal's
Ctrl-C (or hangup) reaches the gateway, which then closes the store.
"""

from __future__ import annotations

import contextlib
import fcntl
import pathlib
import select
import signal
import socket
import sqlite3
import sys
import time
from typing import TextIO, cast

from gateway.store import schema
from gateway.store.pipe import FrameBuffer, frame
from gateway.store.writes import Write, apply

LOCK_NAME = "writer.lock"
Frame = tuple[bool, list[Write]]
"""Whether somebody awaits a write of the frame, and its writes."""
DEFER_S = 0.02
"""How long writes nobody awaits may wait for awaited ones to share their transaction."""
MAX_TX_BYTES = 32 << 20
"""Bytes of queued frames taken into one transaction at most (more wait for the next)."""
RECV_BYTES = 1 << 20


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    data_dir, fsync, fd = pathlib.Path(args[0]), args[1] == "1", int(args[2])
    lock_wait_s = float(args[3])
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    sock = socket.socket(fileno=fd)
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        lock = _lock(data_dir / LOCK_NAME, lock_wait_s)
        if lock is None:
            _send(sock, ("error", f"the data directory {data_dir} is in use by another gateway"))
            return 1
        schema.create(data_dir, fsync=fsync)
        conn = schema.connect(data_dir, fsync=fsync)
        files = _Files(data_dir / schema.DB_NAME)
    except Exception as exc:
        _send(sock, ("error", f"cannot open the store in {data_dir}: {exc!r}"))
        return 1
    _send(sock, ("ready",))
    buffer = FrameBuffer()
    applied = transactions = 0
    ended = False
    try:
        while not ended:
            batches, ended = _receive(sock, buffer)
            if not batches:
                continue
            if not ended and not any(awaited for awaited, _ in batches):
                # Nobody waits for these writes (positions a group has looked at): let them
                # ride with the next awaited ones rather than pay an fsync of their own.
                more, ended = _receive(sock, buffer, DEFER_S)
                batches += more
            results: list[tuple[int, object]] = []
            try:
                conn.execute("BEGIN IMMEDIATE")
                for _, batch in batches:
                    for write in batch:
                        result = apply(conn, write)
                        if result is not None:
                            results.append((applied, result))
                        applied += 1
                gone = files.gone()
                if gone is not None:
                    conn.execute("ROLLBACK")
                    _send(sock, ("gone", gone))
                    return 1
                conn.execute("COMMIT")
                files.committed()
            except Exception as exc:  # any failure fails the whole batch and the store
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
                _send(sock, ("error", repr(exc)))
                return 1
            transactions += 1
            _send(sock, ("ok", applied, results, transactions))
    finally:
        conn.close()
        lock.close()
    return 0


class _Files:
    """The identity (device, inode) of the database file and of its WAL as this writer opened
    them, to tell whether they are still the files at those paths."""

    def __init__(self, db: pathlib.Path) -> None:
        self._paths = (db, db.with_name(db.name + "-wal"))
        self._ids: list[tuple[int, int] | None] = [_identity(self._paths[0]), None]

    def committed(self) -> None:
        """After a commit the WAL exists: remember it (once)."""
        if self._ids[1] is None:
            self._ids[1] = _identity(self._paths[1])

    def gone(self) -> str | None:
        """Why a commit now would be lost (a file deleted or replaced), or None."""
        for path, known in zip(self._paths, self._ids, strict=True):
            if known is not None and _identity(path) != known:
                return (f"the store file {path} was deleted or replaced while the gateway ran "
                        "(its data directory removed?): what it commits now would be lost")
        return None


def _identity(path: pathlib.Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return (st.st_dev, st.st_ino)


def _lock(path: pathlib.Path, wait_s: float) -> TextIO | None:
    """Hold the data directory's writer lock (one writer per store, and a new one only after
    the last one has committed its final transaction); None if it stays taken."""
    handle = path.open("a")
    deadline = time.monotonic() + wait_s
    while True:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return handle
        except BlockingIOError:
            if time.monotonic() > deadline:
                handle.close()
                return None
            time.sleep(0.02)


def _receive(
    sock: socket.socket, buffer: FrameBuffer, awaited_within_s: float | None = None
) -> tuple[list[Frame], bool]:
    """Wait for at least one whole frame (or end of input), then take whatever else has
    arrived, up to MAX_TX_BYTES. With `awaited_within_s`, keep taking frames until one that
    somebody awaits arrives or that time has passed. Returns the frames and whether input has
    ended; a partial frame at the end is dropped (nothing in it was acknowledged)."""
    batches = cast(list[Frame], buffer.frames())
    deadline = None if awaited_within_s is None else time.monotonic() + awaited_within_s
    while not batches or (
        deadline is not None and not any(awaited for awaited, _ in batches)
    ):
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([sock], [], [], left)[0]:
                return batches, False
        data = sock.recv(RECV_BYTES)
        if not data:
            return batches, True
        buffer.feed(data)
        batches += cast(list[Frame], buffer.frames())
    ended = False
    while buffer.pending() < MAX_TX_BYTES:
        try:
            data = sock.recv(RECV_BYTES, socket.MSG_DONTWAIT)
        except BlockingIOError:
            break
        if not data:
            ended = True
            break
        buffer.feed(data)
    batches += cast(list[Frame], buffer.frames())
    return batches, ended


def _send(sock: socket.socket, message: tuple[object, ...]) -> None:
    with contextlib.suppress(OSError):  # the gateway is gone: input ends next
        sock.sendall(frame(message))


if __name__ == "__main__":
    raise SystemExit(main())
