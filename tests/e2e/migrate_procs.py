"""Gateways and `gateway migrate` runs as real processes, for the migration tests and the
benchmark: start a gateway, run the command (or kill it halfway), read a group's messages."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from gateway.admin_client import AdminClient, Target, connect
from gateway.v1 import admin_pb2 as pb

PARTS = {
    "ready": pb.MESSAGE_PART_READY,
    "retry": pb.MESSAGE_PART_RETRY,
    "dead-letter": pb.MESSAGE_PART_DEAD_LETTER,
}


@dataclass
class Proc:
    proc: subprocess.Popen[str]
    target: str


def start_gateway(data_dir: Path, *extra: str, scale: float = 1.0) -> Proc:
    """`gateway serve` on a free port, its log beside the data directory."""
    data_dir.mkdir(parents=True, exist_ok=True)
    log = data_dir.parent / f"{data_dir.name}.log"
    with open(log, "w") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gateway.cli", "serve", "--data-dir", str(data_dir),
             "--listen", "127.0.0.1:0", "--log-level", "warning", "--time-scale", str(scale),
             *extra],
            stdout=sink, stderr=subprocess.STDOUT, text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        found = re.search(r"gateway listening on ([^\s\"]+)", log.read_text())
        if found:
            return Proc(proc, found.group(1))
        if proc.poll() is not None:
            raise RuntimeError(f"gateway exited {proc.returncode}:\n{log.read_text()}")
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError(f"gateway did not start:\n{log.read_text()}")


def stop(proc: Proc) -> None:
    if proc.proc.poll() is None:
        proc.proc.send_signal(signal.SIGTERM)
        try:
            proc.proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.proc.kill()
            proc.proc.wait(10)


def migrate(*args: str, timeout_s: float = 600) -> subprocess.CompletedProcess[str]:
    """`gateway migrate ARGS...` to its end."""
    return subprocess.run([sys.executable, "-m", "gateway.cli", "migrate", *args],
                          capture_output=True, text=True, timeout=timeout_s)


def migrate_killed(args: list[str], halfway: Callable[[], bool],
                   deadline_s: float = 300) -> str:
    """Start `gateway migrate ARGS...`, `kill -9` it once `halfway()` is true; its stderr."""
    proc = subprocess.Popen([sys.executable, "-m", "gateway.cli", "migrate", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + deadline_s
    try:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                out, err = proc.communicate()
                raise AssertionError(f"migrate ended before it was killed ({proc.returncode}):"
                                     f"\n{out}\n{err}")
            if halfway():
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(10)
                return proc.stderr.read() if proc.stderr else ""
            time.sleep(0.02)
        raise AssertionError("migrate never got halfway")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


async def read_part(target: str, topic: str, group: str, part: str,
                    naming: str = "") -> list[pb.MovedMessage]:
    """Every message of one part of a group on a gateway (ExportMessages, nothing taken)."""
    channel = connect(Target(target))
    try:
        client = AdminClient(channel, timeout_s=60)
        found: list[pb.MovedMessage] = []
        token = ""
        while True:
            page = await client.export(topic, group, PARTS[part], token, 1000, naming)
            found.extend(page.messages)
            token = page.next_page_token
            if not token:
                return found
    finally:
        await channel.close()


@contextlib.contextmanager
def two_gateways(tmp_path: Path) -> Iterator[tuple[Proc, Proc]]:
    """A source gateway on tmp_path/a and a destination on tmp_path/b, stopped afterwards."""
    source = start_gateway(tmp_path / "a")
    destination = start_gateway(tmp_path / "b")
    try:
        yield source, destination
    finally:
        stop(source)
        stop(destination)
