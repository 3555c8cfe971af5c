"""pulsar-client's own log lines into the gateway's log, filtered before they reach Python.

Handed a Python logger, pulsar-client calls into Python for every line it could write, whatever
the logger's level: its debug lines too, several per send and per ack, each taking the
interpreter lock to be dropped there. That cost a Pulsar back end more CPU than all its other
work (`bench.replicas --backend pulsar`: 0.37 CPU s per 1,000 messages, 0.14 without). Here the
client writes through its own file logger, at the level the gateway's log is set to, into a pipe
this process holds; one thread reads the lines and logs each one through `adapters.pulsar.client`
at its own level, so they still come out as the gateway's JSON lines.

At debug level the client writes into a file instead (deleted at once, so nothing is left
behind), which a thread follows: never a pipe, whose writes can wait (see `native_logger`), and
never a Python logger, which the client may call while the interpreter ends and abort the
process (apache/pulsar-client-python issue 256). What the thread has read is given back to the
file system as it goes (Linux), so a long debug session does not fill the disk.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import functools
import logging
import os
import re
import tempfile
import threading
import time
from typing import Any

import pulsar as pulsar_client

pulsar: Any = pulsar_client
"""pulsar-client ships no type information: its classes are used untyped."""

LOGGER = logging.getLogger("adapters.pulsar.client")
PIPE_BYTES = 1 << 20
"""What the pipe holds before the client's writes wait for the reading thread."""
LINE = re.compile(r"^\S+ \S+ (DEBUG|INFO|WARN|ERROR)\s+\[\d+\] (?:\S+:\d+ \| )?(.*)$")
"""A line of the client's file logger: date, time, level, [thread], source:line | message (the
message is what its Python logger would have been given)."""
FOLLOW_S = 0.05
"""How often the thread that follows the debug file looks for more."""
LEVELS = {"DEBUG": logging.DEBUG, "INFO": logging.INFO, "WARN": logging.WARNING,
          "ERROR": logging.ERROR}


def native_logger(logger: logging.Logger = LOGGER) -> Any:
    """What to give `pulsar.Client(logger=...)`: a `pulsar.FileLogger` at `logger`'s level,
    never a Python logger (see the module docstring). Below debug it writes into this process's
    pipe; at debug into a file a thread follows: the pipe never carries debug lines, as the
    client writes some while its caller holds the interpreter lock, and a full pipe would then
    wait for a reader that needs that lock; a file's writes do not wait for its reader."""
    level = logger.getEffectiveLevel()
    native = (pulsar.LoggerLevel.Debug if level <= logging.DEBUG
              else pulsar.LoggerLevel.Info if level <= logging.INFO
              else pulsar.LoggerLevel.Warn if level <= logging.WARNING
              else pulsar.LoggerLevel.Error)
    path = _followed_file() if level <= logging.DEBUG else _pipe()
    if not os.path.exists(path):  # no /dev/fd here: the client's own console logger instead
        return pulsar.ConsoleLogger(native)
    return pulsar.FileLogger(native, path)


@functools.cache
def _followed_file() -> str:
    """A deleted file's path the client can open, and the thread that follows it: one per
    process."""
    write, name = tempfile.mkstemp(prefix="gateway-pulsar-client-", suffix=".log")
    try:
        read = os.open(name, os.O_RDWR)  # fallocate needs it writable
    finally:
        os.unlink(name)  # the two descriptors keep it while the process lives
    threading.Thread(target=_follow, args=(read,), name="pulsar-client-log", daemon=True).start()
    return f"/dev/fd/{write}"  # kept open for the life of the process


def _follow(read: int) -> None:
    """Thread: log every whole line written to the file, and give back what was read."""
    offset = freed = 0
    pending = b""
    while True:
        data = os.pread(read, 65536, offset)
        if not data:
            time.sleep(FOLLOW_S)
            continue
        offset += len(data)
        *lines, pending = (pending + data).split(b"\n")
        for raw in lines:
            emit(raw.decode("utf-8", "replace"))
        whole = (offset - len(pending)) // 65536 * 65536
        if whole > freed:
            _punch(read, freed, whole - freed)
            freed = whole


def _punch(fd: int, offset: int, length: int) -> None:
    """Give the file system back `length` bytes of the file from `offset` (read already); its
    size stays. Nothing where the system cannot (not Linux, an old kernel, a file system
    without holes)."""
    with contextlib.suppress(OSError, AttributeError, TypeError):
        libc = ctypes.CDLL(None, use_errno=True)
        fallocate = libc.fallocate
        fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_longlong, ctypes.c_longlong]
        fallocate(fd, PUNCH_HOLE | KEEP_SIZE, offset, length)


PUNCH_HOLE = 0x02
KEEP_SIZE = 0x01
"""Linux's FALLOC_FL_PUNCH_HOLE and FALLOC_FL_KEEP_SIZE (`fallocate(2)`)."""


@functools.cache
def _pipe() -> str:
    """The pipe's write end as a path the client can open: one pipe and one reading thread per
    process (made on the event loop, by the first back end that opens)."""
    read, write = os.pipe()  # neither end is inherited by child processes
    with contextlib.suppress(OSError, AttributeError):  # room for bursts (Linux)
        fcntl.fcntl(write, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
    threading.Thread(target=_pump, args=(read,), name="pulsar-client-log", daemon=True).start()
    return f"/dev/fd/{write}"  # kept open for the life of the process


def _pump(read: int) -> None:
    """Thread: log every whole line that comes through the pipe."""
    pending = b""
    while True:
        data = os.read(read, 65536)
        if not data:
            return
        *lines, pending = (pending + data).split(b"\n")
        for raw in lines:
            emit(raw.decode("utf-8", "replace"))


def emit(line: str, logger: logging.Logger = LOGGER) -> None:
    """One line of pulsar-client's log, at its level (a line not in its format: at info)."""
    match = LINE.match(line)
    if match is None:
        if line.strip():
            logger.info("%s", line)
        return
    logger.log(LEVELS[match.group(1)], "%s", match.group(2))
