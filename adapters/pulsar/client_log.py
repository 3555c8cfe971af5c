"""pulsar-client's own log lines into the gateway's log, filtered before they reach Python.

Handed a Python logger, pulsar-client calls into Python for every line it could write, whatever
the logger's level: its debug lines too, several per send and per ack, each taking the
interpreter lock to be dropped there. That cost a Pulsar back end more CPU than all its other
work (`bench.replicas --backend pulsar`: 0.37 CPU s per 1,000 messages, 0.14 without). Here the
client writes through its own file logger, at the level the gateway's log is set to, into a pipe
this process holds; one thread reads the lines and logs each one through `adapters.pulsar.client`
at its own level, so they still come out as the gateway's JSON lines. At debug level the client
gets the Python logger as before.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import logging
import os
import re
import threading
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
LEVELS = {"DEBUG": logging.DEBUG, "INFO": logging.INFO, "WARN": logging.WARNING,
          "ERROR": logging.ERROR}


def native_logger(logger: logging.Logger = LOGGER) -> Any:
    """What to give `pulsar.Client(logger=...)`: a `pulsar.FileLogger` writing into this
    process's pipe at `logger`'s level; at debug, `logger` itself (every line through Python,
    slow, as debugging may be). The pipe never carries debug lines: the client writes some
    while its caller holds the interpreter lock, and a full pipe would then wait for a reader
    that needs that lock."""
    level = logger.getEffectiveLevel()
    if level <= logging.DEBUG:
        return logger
    native = (pulsar.LoggerLevel.Info if level <= logging.INFO
              else pulsar.LoggerLevel.Warn if level <= logging.WARNING
              else pulsar.LoggerLevel.Error)
    path = _pipe()
    if not os.path.exists(path):  # no /dev/fd here: the client's own console logger instead
        return pulsar.ConsoleLogger(native)
    return pulsar.FileLogger(native, path)


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
