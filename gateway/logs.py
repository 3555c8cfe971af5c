"""Logging for every `gateway` command that runs for a while (`serve`, `export`, `report`): one
JSON object per line on standard error, at one level.

The gateway's own loggers are structlog's; libraries log through the standard library (grpc,
asyncio, aio-pika, the telemetry spool, py4j). Both go through the same JSON rendering, so no
plain line reaches the stream: a library's message becomes `{"event": ..., "logger": ...}`,
warnings of the `warnings` module included. The level comes from `--log-level`, the config file
(`[server] log_level`, serve only) or `GATEWAY_LOG_LEVEL`, in that order; `info` otherwise.
"""

from __future__ import annotations

import collections
import json
import logging
import os
import sys
import threading
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TextIO

import structlog

from gateway.errors import InvalidArgument

LEVELS = ("debug", "info", "warning", "error")
ENV = "GATEWAY_LOG_LEVEL"
DEFAULT = "info"
QUIET = ("py4j",)
"""Chatty libraries held at warning unless the level is debug (py4j logs every call between
Python and Spark's JVM at info and debug)."""

GRPC_CORE = "grpc._cython.cygrpc"
"""The logger of gRPC's server core, which logs a client going away as an error (`_ClientGone`)."""

WAITING_LINES = 10_000
"""Lines a background writer (`background`) keeps for a log reader that does not keep up;
past it they are dropped and counted."""

_ROOT_HANDLER = "gateway-json"
_STREAM: list[TextIO | None] = [None]
"""Where `configure` sends lines (None: standard error as it is at each line)."""


def level_from(flag: str | None, env: Mapping[str, str] | None = None) -> str:
    """The level a command runs at: the flag, else `GATEWAY_LOG_LEVEL`, else info; checked."""
    environ = os.environ if env is None else env
    value = (flag or environ.get(ENV) or DEFAULT).strip().lower()
    if value not in LEVELS:
        field = "log_level" if flag else ENV
        raise InvalidArgument(field, flag or environ.get(ENV), ", ".join(LEVELS))
    return value


def configure(level: str, stream: TextIO | None = None) -> None:
    """Send every log line of this process, as JSON, to `stream` at `level`. Without a stream,
    to standard error as it is when a line is written (tests capture it)."""
    if level not in LEVELS:
        raise InvalidArgument("log_level", level, ", ".join(LEVELS))
    numeric = getattr(logging, level.upper())
    _STREAM[0] = stream
    stamp = structlog.processors.TimeStamper(fmt="iso", utc=True)
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            stamp,
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=lambda *_args: _Lines(),
        cache_logger_on_first_use=True,
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[
            structlog.stdlib.add_log_level,
            structlog.stdlib.add_logger_name,
            structlog.stdlib.ExtraAdder(),
            stamp,
        ],
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(),
        ],
    )
    handler = _JsonHandler()
    handler.set_name(_ROOT_HANDLER)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    for old in list(root.handlers):
        # Ours from an earlier call, and plain ones (`logging.basicConfig`'s); others (a test
        # runner's capture) stay.
        if old.get_name() == _ROOT_HANDLER or type(old) is logging.StreamHandler:
            root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(numeric)
    for name in QUIET:
        logging.getLogger(name).setLevel(numeric if numeric <= logging.DEBUG else logging.WARNING)
    core = logging.getLogger(GRPC_CORE)
    if not any(isinstance(f, _ClientGone) for f in core.filters):
        core.addFilter(_ClientGone())
    logging.captureWarnings(True)



def announce(event: str, level: str = "info", **fields: object) -> None:
    """A JSON line shown at every log level: what a supervisor or a script waits for (the
    address served, why the process exits). Written even before `configure`."""
    _write(_json_line(event, level, **fields))


def _json_line(event: str, level: str, **fields: object) -> str:
    stamp = datetime.now(UTC).isoformat().replace("+00:00", "Z")
    return json.dumps({"event": event, **fields, "level": level, "timestamp": stamp},
                      default=str)


class _Background:
    """Lines written by a thread of their own. A log reader that stopped reading (a stalled
    collector, `serve 2>&1 | slow`) filled the pipe, and the next line's write then blocked the
    event loop: the gateway stopped serving every client until the reader came back. Lines now
    wait in a bounded queue; past WAITING_LINES they are dropped, and how many is said in a
    line once the stream takes lines again."""

    def __init__(self) -> None:
        self._lines: collections.deque[str] = collections.deque()
        self._ready = threading.Condition()
        self._dropped = 0
        self._busy = False
        self._thread = threading.Thread(target=self._run, name="gateway-log", daemon=True)
        self._thread.start()

    def put(self, line: str) -> None:
        with self._ready:
            if len(self._lines) >= WAITING_LINES:
                self._dropped += 1
                return
            self._lines.append(line)
            self._ready.notify_all()

    def _run(self) -> None:
        while True:
            with self._ready:
                while not self._lines:
                    self._busy = False
                    self._ready.notify_all()
                    self._ready.wait()
                self._busy = True
                lines = list(self._lines)
                self._lines.clear()
                dropped, self._dropped = self._dropped, 0
            if dropped:
                _write_now(_json_line("log lines dropped: the log reader did not keep up",
                                      "warning", dropped=dropped))
            for line in lines:
                _write_now(line)

    def drain(self, timeout_s: float) -> None:
        """Wait until every line waiting is written, at most `timeout_s`."""
        with self._ready:
            self._ready.wait_for(lambda: not self._lines and not self._busy, timeout_s)


_BACKGROUND: list[_Background | None] = [None]


def background() -> None:
    """Write lines from a thread of their own from now on (`serve`; see `_Background`)."""
    if _BACKGROUND[0] is None:
        _BACKGROUND[0] = _Background()


def drain(timeout_s: float = 2.0) -> None:
    """Write the lines still waiting (at most `timeout_s`), then write in the caller again: a
    command's last words (`gateway: error: ...`) come after its log lines."""
    writer, _BACKGROUND[0] = _BACKGROUND[0], None
    if writer is not None:
        writer.drain(timeout_s)


def _write(line: str) -> None:
    writer = _BACKGROUND[0]
    if writer is not None:
        writer.put(line)
    else:
        _write_now(line)


def _write_now(line: str) -> None:
    """Write one line; a stream that cannot take it (its reader went away, the disk is full)
    drops it: `stopping` raised BrokenPipeError in the SIGTERM handler, before the stop, and
    `gateway serve 2>&1 | head` (or a dead log collector) then ignored every SIGTERM."""
    out = _STREAM[0] or sys.stderr
    if out is None:  # started with stderr closed (`2>&-`): nowhere to write
        return
    try:
        out.write(line + "\n")
        out.flush()
    except BrokenPipeError:
        _to_devnull(out)  # nobody reads it: later lines, and the flush at exit, go nowhere
    except (OSError, ValueError):  # ENOSPC, EIO, a closed stream: this line is lost
        pass


def _to_devnull(out: TextIO) -> None:
    try:
        fd = out.fileno()
    except (OSError, ValueError):
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)


class _Lines:
    """structlog's logger: one write per line, message and newline together, so that lines of
    other threads never land inside it. Writes where `configure` said at each line (loggers
    are cached: a later `configure` moves them all)."""

    def msg(self, message: str) -> None:
        _write(message)

    log = debug = info = warn = warning = error = critical = exception = fatal = msg


class _JsonHandler(logging.Handler):
    """The standard library's lines, rendered by structlog's formatter, written as `_Lines`."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = self.format(record)
            _write(line)
        except Exception:
            self.handleError(record)


class _ClientGone(logging.Filter):
    """gRPC's core logs an error with a traceback (`ExecuteBatchError`) when the client of a
    stream went away (cancelled, disconnected) while a response was being written to it: the
    client's doing, which any client can repeat at will, not a fault of the gateway. Such a
    line is kept at debug."""

    def filter(self, record: logging.LogRecord) -> bool:
        kind = record.exc_info[0] if record.exc_info else None
        if kind is None or kind.__name__ != "ExecuteBatchError":
            return True
        record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return logging.getLogger().isEnabledFor(logging.DEBUG)
