"""A publish that returned survives SIGKILL of the process; leased messages come back."""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys
import textwrap
import time

from gateway.store import EmbeddedStore

REPO = pathlib.Path(__file__).resolve().parents[2]

PUBLISHER = textwrap.dedent(
    """
    import asyncio, pathlib, sys
    from gateway.backend.base import OutMessage
    from gateway.store import EmbeddedStore

    async def publisher(store, n):
        while True:
            batch = [OutMessage(body=b"x" * 512, key=f"k{n}") for _ in range(10)]
            ids = await store.publish("crash", batch)
            sys.stdout.write("".join(f"ID {i}\\n" for i in ids))
            sys.stdout.flush()

    async def main():
        store = EmbeddedStore(pathlib.Path(sys.argv[1]))
        await store.open()
        await asyncio.gather(*(publisher(store, n) for n in range(4)))

    asyncio.run(main())
    """
)

CONSUMER = textwrap.dedent(
    """
    import asyncio, pathlib, sys, time
    from gateway.backend.base import OutMessage
    from gateway.store import EmbeddedStore

    async def main():
        store = EmbeddedStore(pathlib.Path(sys.argv[1]))
        await store.open()
        await store.publish("inflight", [OutMessage(body=str(i).encode()) for i in range(6)])
        got = await store.fetch("inflight", "g", 6, time.time_ns() // 1_000_000)
        await store.ack([m.lease for m in got[:3]])
        print("ACKED", *[m.message_id for m in got[:3]])
        print("LEASED", *[m.message_id for m in got[3:]], flush=True)
        await asyncio.sleep(3600)

    asyncio.run(main())
    """
)


def run_until(script: str, data_dir: pathlib.Path, enough: int) -> list[str]:
    """Run `script`, read complete stdout lines until `enough` of them, then SIGKILL it."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.Popen(
        [sys.executable, "-c", script, str(data_dir)],
        stdout=subprocess.PIPE,
        env=env,
        cwd=REPO,
    )
    assert proc.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + 60
    try:
        while len(lines) < enough and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            if line.endswith(b"\n"):
                lines.append(line.decode().strip())
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
    assert proc.returncode == -signal.SIGKILL
    assert len(lines) >= enough, f"child printed only {len(lines)} lines"
    return lines


async def test_published_ids_survive_sigkill(tmp_path: pathlib.Path) -> None:
    lines = run_until(PUBLISHER, tmp_path, 400)
    printed = [line.split()[1] for line in lines if line.startswith("ID ")]
    assert len(printed) >= 400

    store = EmbeddedStore(tmp_path)
    await store.open()
    try:
        stored: list[str] = []
        after = -1
        while True:
            page = await store.peek("crash", "check", 1000, after_position=after)
            if not page:
                break
            stored += [m.message_id for m in page]
            after = page[-1].lease.position
        assert set(printed) <= set(stored)
        assert len(stored) == len(set(stored))
    finally:
        await store.close()


async def test_in_flight_messages_are_delivered_again_after_sigkill(
    tmp_path: pathlib.Path,
) -> None:
    acked_line, leased_line = run_until(CONSUMER, tmp_path, 2)
    acked = acked_line.split()[1:]
    leased = leased_line.split()[1:]
    assert len(acked) == len(leased) == 3

    store = EmbeddedStore(tmp_path)
    await store.open()
    try:
        got = await store.fetch("inflight", "g", 10, time.time_ns() // 1_000_000)
        assert [m.message_id for m in got] == leased
    finally:
        await store.close()
