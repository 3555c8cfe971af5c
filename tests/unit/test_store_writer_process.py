"""The embedded store's writer runs in a process of its own: it ends with the store (or with
the gateway, however that ends), holds the data directory against a second writer, and a
writer that dies fails the writes waiting for it, without losing what was acknowledged, and is
restarted by the store."""

from __future__ import annotations

import asyncio
import os
import pathlib
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from gateway.backend.base import OutMessage
from gateway.errors import Unavailable
from gateway.store import EmbeddedStore, writes
from gateway.store.writer import GroupCommitWriter

REPO = pathlib.Path(__file__).resolve().parents[2]


def alive(pid: int) -> bool:
    """True while `pid` runs (a zombie, ended but not reaped, counts as ended)."""
    try:
        stat = pathlib.Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


async def until(condition: object, timeout_s: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return True
        await asyncio.sleep(0.02)
    return False


async def test_the_writer_is_another_process_and_ends_with_the_store(
    tmp_path: pathlib.Path,
) -> None:
    store = EmbeddedStore(tmp_path)
    await store.open()
    writer = store._supervisor.writer
    assert writer is not None and writer.pid is not None
    pid = writer.pid
    assert pid != os.getpid() and alive(pid)
    await store.publish("t", [OutMessage(body=b"one")])
    await store.close()
    assert not alive(pid)


async def test_a_killed_writer_is_restarted_and_nothing_acknowledged_is_lost(
    tmp_path: pathlib.Path,
) -> None:
    """It used to fail the store until the process restarted (issue 16, defect 2)."""
    store = EmbeddedStore(tmp_path)
    heard: list[bool] = []
    store.on_state_change(lambda: heard.append(store.healthy()))
    await store.open()
    try:
        ids = await store.publish("t", [OutMessage(body=str(i).encode()) for i in range(50)])
        assert store._supervisor.writer is not None and store._supervisor.writer.pid is not None
        pid = store._supervisor.writer.pid
        os.kill(pid, signal.SIGKILL)
        assert await until(lambda: heard[-1:] == [True])
        assert heard == [False, True]
        assert not alive(pid)
        assert store._supervisor.writer.pid is not None and alive(store._supervisor.writer.pid)
        ids += await asyncio.wait_for(store.publish("t", [OutMessage(body=b"late")]), 10)
    finally:
        await asyncio.wait_for(store.close(), 30)

    reopened = EmbeddedStore(tmp_path)
    await reopened.open()
    try:
        assert reopened.healthy()
        got = await reopened.fetch("t", "g", 100, 2**62)
        assert [m.message_id for m in got] == ids
    finally:
        await reopened.close()


async def test_the_writer_ignores_interrupts(tmp_path: pathlib.Path) -> None:
    store = EmbeddedStore(tmp_path)
    await store.open()
    try:
        assert store._supervisor.writer is not None and store._supervisor.writer.pid is not None
        os.kill(store._supervisor.writer.pid, signal.SIGINT)
        os.kill(store._supervisor.writer.pid, signal.SIGTERM)
        await asyncio.sleep(0.2)
        assert alive(store._supervisor.writer.pid)
        ids = await store.publish("t", [OutMessage(body=b"after")])
        got = await store.fetch("t", "g", 10, 2**62)
        assert [m.message_id for m in got] == ids
    finally:
        await store.close()


async def test_a_second_writer_on_the_same_directory_is_refused(tmp_path: pathlib.Path) -> None:
    store = EmbeddedStore(tmp_path)
    await store.open()
    failures: list[BaseException] = []
    try:
        second = GroupCommitWriter(tmp_path, asyncio.get_running_loop(), fsync=True,
                                   on_failure=failures.append, lock_wait_s=0.3)
        with pytest.raises(Unavailable, match="in use by another gateway"):
            await second.start()
        assert store.healthy()
        await store.publish("t", [OutMessage(body=b"still mine")])
    finally:
        await store.close()


OWNER = textwrap.dedent(
    """
    import asyncio, pathlib, sys
    from gateway.backend.base import OutMessage
    from gateway.store import EmbeddedStore

    async def main():
        store = EmbeddedStore(pathlib.Path(sys.argv[1]))
        await store.open()
        print("WRITER", store._supervisor.writer.pid, flush=True)
        while True:
            ids = await store.publish("t", [OutMessage(body=b"x" * 256) for _ in range(20)])
            sys.stdout.write("".join(f"ID {i}\\n" for i in ids))
            sys.stdout.flush()

    asyncio.run(main())
    """
)


async def test_the_writer_ends_when_its_gateway_is_killed(tmp_path: pathlib.Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", OWNER, str(tmp_path)], stdout=subprocess.PIPE, cwd=REPO,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
    )
    assert proc.stdout is not None
    first = proc.stdout.readline().split()
    assert first[0] == b"WRITER"
    writer_pid = int(first[1])
    acked: list[str] = []
    while len(acked) < 400:
        line = proc.stdout.readline()
        if line.startswith(b"ID ") and line.endswith(b"\n"):
            acked.append(line.split()[1].decode())
    proc.kill()
    proc.wait()
    assert await until(lambda: not alive(writer_pid)), "the writer outlived its gateway"

    store = EmbeddedStore(tmp_path)
    await store.open()
    try:
        got = await store.fetch("t", "g", 100_000, 2**62)
        assert set(acked) <= {m.message_id for m in got}
    finally:
        await store.close()


async def test_a_write_that_cannot_be_sent_fails_instead_of_hanging(
    tmp_path: pathlib.Path,
) -> None:
    store = EmbeddedStore(tmp_path)
    await store.open()
    try:
        assert store._supervisor.writer is not None
        unsendable = writes.statement("SELECT ?", (lambda: 1,))
        with pytest.raises(Unavailable, match="could not be sent"):
            await asyncio.wait_for(store._supervisor.writer.submit(unsendable), 10)
        assert not store.healthy()
        assert await until(store.healthy)  # a new writer, and the store serves again
        await store.publish("t", [OutMessage(body=b"after")])
    finally:
        await asyncio.wait_for(store.close(), 30)
