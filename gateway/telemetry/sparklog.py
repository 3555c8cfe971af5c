"""Spark's own (JVM) log lines for the exporter: JSON like every other line, quiet by default.

Spark logs through log4j2 on standard error, in plain text, from WARN up (plus a banner saying
which profile it uses). The exporter starts Spark's JVM with a log4j2 configuration of its own
(`spark.driver.extraJavaOptions`): one JSON object per line with the fields the gateway's lines
have (`timestamp`, `level`, `logger`, `event`), at ERROR unless the exporter runs at debug level
(then INFO). Python's side of Spark (py4j) is held back by `gateway.logs`.

What the JVM prints outside log4j (its launcher's `WARNING: Using incubator modules`, a crash
report) would still be plain: `stderr_as_json` turns every such line into a JSON line.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
import tempfile
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

_TEMPLATE = {
    "timestamp": {"$resolver": "timestamp",
                  "pattern": {"format": "yyyy-MM-dd'T'HH:mm:ss.SSSSSS'Z'", "timeZone": "UTC"}},
    "level": {"$resolver": "pattern", "pattern": "%level{lowerCase=true}",
              "stackTraceEnabled": False},
    "logger": {"$resolver": "logger", "field": "name"},
    "event": {"$resolver": "message", "stringified": True},
    "exception": {"$resolver": "exception", "field": "stackTrace",
                  "stackTrace": {"stringified": True}},
}


def jvm_level(level: str) -> str:
    """The log4j level Spark's JVM logs at when the exporter runs at `level`."""
    return "INFO" if level == "debug" else "ERROR"


def log4j2_properties(level: str) -> str:
    """A log4j2 configuration: JSON lines on standard error at `jvm_level(level)`."""
    template = json.dumps(_TEMPLATE, separators=(",", ":"))
    jvm = jvm_level(level)
    return "\n".join([
        "status = error",
        f"rootLogger.level = {jvm.lower()}",
        "rootLogger.appenderRef.stderr.ref = stderr",
        # Spark takes PySpark for a shell and prints its shell's level (two plain lines)
        # unless the shell's logger is configured at the root's level.
        "logger.repl.name = org.apache.spark.repl.Main",
        f"logger.repl.level = {jvm.lower()}",
        "appender.stderr.type = Console",
        "appender.stderr.name = stderr",
        "appender.stderr.target = SYSTEM_ERR",
        "appender.stderr.layout.type = JsonTemplateLayout",
        f"appender.stderr.layout.eventTemplate = {template}",
        "",
    ])


def java_options(level: str, directory: str | None = None) -> str:
    """`spark.driver.extraJavaOptions` that make the JVM log as `log4j2_properties` says; the
    file is written to `directory` (a new temporary directory when None)."""
    where = Path(directory or tempfile.mkdtemp(prefix="gateway-export-"))
    path = where / "log4j2.properties"
    path.write_text(log4j2_properties(level))
    return f"-Dlog4j2.configurationFile={path.as_uri()}"


_ERROR = re.compile(rb"^(Exception|Error|Caused by|\s+at |ERROR|FATAL|#)|Exception|Error:")


@contextlib.contextmanager
def stderr_as_json(level: str) -> Iterator[None]:
    """While open, standard error of this process and of the processes it starts (Spark's JVM)
    goes through a pipe: JSON lines pass as they are; any other line becomes one
    (`"logger": "spark"`), an error if it looks like one, else a debug line (shown at debug
    level only: Spark is quiet by default)."""
    sys.stderr.flush()
    real = os.dup(2)
    read, write = os.pipe()
    os.dup2(write, 2)
    os.close(write)
    pump = threading.Thread(target=_pump, args=(read, real, level == "debug"),
                            name="stderr-json", daemon=True)
    pump.start()
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(real, 2)  # the JVM may keep its end open until this process exits
        pump.join(timeout=1)


def _pump(read: int, out: int, debug: bool) -> None:
    with os.fdopen(read, "rb") as lines:
        for line in lines:
            if line.startswith(b"{"):
                os.write(out, line if line.endswith(b"\n") else line + b"\n")
                continue
            text = line.rstrip(b"\r\n")
            if not text.strip():
                continue
            error = bool(_ERROR.search(text))
            if not (error or debug):
                continue
            event = {"event": text.decode("utf-8", "replace"), "level":
                     "error" if error else "debug", "logger": "spark",
                     "timestamp": datetime.now(UTC).isoformat().replace("+00:00", "Z")}
            os.write(out, (json.dumps(event) + "\n").encode())
