"""Logs: every line JSON at one configurable level (`gateway.logs`), in a real `gateway serve`
and in-process for the standard library's loggers."""

from __future__ import annotations

import io
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

import pytest

from gateway import logs
from gateway.errors import InvalidArgument

REPO = Path(__file__).resolve().parents[2]


def json_lines(text: str) -> list[dict[str, object]]:
    """Every line of `text` as JSON (fails on a plain line)."""
    out = []
    for line in text.splitlines():
        assert line.startswith("{"), f"not a JSON line: {line!r}"
        out.append(json.loads(line))
    return out


def serve(tmp: Path, *args: str, env: dict[str, str] | None = None) -> list[dict[str, object]]:
    """Run `gateway serve` until it listens, publish nothing, stop it; its stderr lines."""
    data = tmp / f"data-{time.monotonic_ns()}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "gateway.cli", "serve", "--data-dir", str(data), "--listen",
         "127.0.0.1:0", "--grace-s", "0", *args],
        stderr=subprocess.PIPE, text=True, cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})},
    )
    assert proc.stderr is not None
    lines: list[str] = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        lines.append(line)
        if "gateway listening on" in line:
            break
    proc.send_signal(signal.SIGTERM)
    _, rest = proc.communicate(timeout=60)
    assert proc.returncode == 0, "".join(lines) + rest
    return json_lines("".join(lines) + rest)


@pytest.mark.slow
def test_serve_writes_only_json_lines_at_the_level_asked(tmp_path: Path) -> None:
    said = serve(tmp_path, "--log-level", "debug")
    listening = [e for e in said if str(e["event"]).startswith("gateway listening on")]
    assert len(listening) == 1 and str(listening[0]["listen"]).startswith("127.0.0.1:")
    assert {e["level"] for e in said} >= {"info", "debug"}
    assert all("timestamp" in e for e in said)

    # The environment sets the level when no flag does; the flag wins over it.
    quiet = serve(tmp_path, env={logs.ENV: "warning"})
    assert [e["level"] for e in quiet if e["level"] in ("debug", "info")] == ["info"]
    assert str(quiet[0]["event"]).startswith("gateway listening on")  # shown at every level
    loud = serve(tmp_path, "--log-level", "info", env={logs.ENV: "error"})
    assert sum(e["level"] == "info" for e in loud) > 1

    # And the config file.
    config = tmp_path / "gw.toml"
    config.write_text('[server]\nlog_level = "warning"\n')
    filed = serve(tmp_path, "--config", str(config))
    assert not [e for e in filed if e["level"] in ("debug",)]


def test_standard_library_lines_and_warnings_are_json() -> None:
    out = io.StringIO()
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    logging.captureWarnings(False)  # an earlier test's capture hooked pytest's own handler
    try:
        logs.configure("info", out)
        logging.getLogger("some.library").warning("disk %s at %d%%", "sda", 93)
        logging.getLogger("some.library").debug("not shown")
        logging.getLogger("py4j.clientserver").info("Closing down clientserver connection")
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            warnings.warn("old call", DeprecationWarning, stacklevel=1)
        try:
            raise ValueError("boom")
        except ValueError:
            logging.getLogger("some.library").exception("failed")
        said = json_lines(out.getvalue())
        assert said[0]["event"] == "disk sda at 93%" and said[0]["logger"] == "some.library"
        assert said[0]["level"] == "warning"
        assert "old call" in str(said[1]["event"]) and said[1]["logger"] == "py.warnings"
        assert said[2]["event"] == "failed" and "ValueError: boom" in str(said[2]["exception"])
        assert len(said) == 3  # debug below the level, py4j's info held back

        out.truncate(0)
        out.seek(0)
        logs.configure("debug", out)
        logging.getLogger("py4j.clientserver").debug("Received command")
        assert json_lines(out.getvalue())[0]["logger"] == "py4j.clientserver"
    finally:
        logs.configure("info")  # back to standard error (cached loggers follow)
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
        logging.captureWarnings(False)
        logging.getLogger("py4j").setLevel(logging.NOTSET)


def test_levels_are_checked() -> None:
    assert logs.level_from(None, {}) == "info"
    assert logs.level_from(None, {logs.ENV: "WARNING"}) == "warning"
    assert logs.level_from("error", {logs.ENV: "debug"}) == "error"
    with pytest.raises(InvalidArgument) as bad:
        logs.level_from(None, {logs.ENV: "loud"})
    assert bad.value.field == logs.ENV and "debug, info, warning, error" in bad.value.message
    with pytest.raises(InvalidArgument):
        logs.configure("verbose")


class Stuck(io.StringIO):
    """A stream whose first write waits until `go` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = threading.Event()
        self.go = threading.Event()

    def write(self, text: str) -> int:
        self.entered.set()
        self.go.wait(30)
        return super().write(text)


def test_lines_wait_for_a_slow_reader_and_past_the_limit_are_counted() -> None:
    """`serve` writes from a thread of its own: a write that blocks (a full pipe) holds up that
    thread, not the caller; past WAITING_LINES the lines are dropped and then counted."""
    out = Stuck()
    try:
        logs.configure("info", out)
        logs.background()
        logs.announce("first")
        assert out.entered.wait(10)
        extra = 7
        for i in range(logs.WAITING_LINES + extra):  # none of these calls blocks
            logs.announce(f"line {i}")
        out.go.set()
        logs.drain(30)
        said = json_lines(out.getvalue())
        assert said[0]["event"] == "first"
        assert said[1]["event"] == "log lines dropped: the log reader did not keep up"
        assert said[1]["dropped"] == extra and "timestamp" in said[1]
        assert [e["event"] for e in said[2:]] == [f"line {i}"
                                                  for i in range(logs.WAITING_LINES)]
        logs.announce("after the drain")  # written by the caller again
        assert json_lines(out.getvalue())[-1]["event"] == "after the drain"
    finally:
        out.go.set()
        logs.drain(5)
        logs.configure("info")
