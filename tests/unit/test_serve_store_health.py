"""Health follows the embedded store: NOT_SERVING while it is down, SERVING once it healed; a
store that cannot recover ends `gateway serve` with a non-zero status (a supervisor restarts it)
instead of leaving a half-dead process."""

from __future__ import annotations

import asyncio
import os
import pathlib
import signal
import time

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from gateway.backend.base import OutMessage
from gateway.cli import serve_cmd
from gateway.errors import Unavailable
from gateway.server.app import running_gateway
from gateway.server.config import ServeConfig
from gateway.store import EmbeddedStore, recovery, writes
from gateway.store.writer import GroupCommitWriter

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


async def test_health_is_not_serving_while_the_store_is_down_and_serving_after(
    tmp_path: pathlib.Path,
) -> None:
    async with running_gateway(tmp_path) as app:
        store = app.backend
        assert isinstance(store, EmbeddedStore)
        seen: list[int] = []
        async with grpc.aio.insecure_channel(f"127.0.0.1:{app.grpc_port}") as channel:
            stub = health_pb2_grpc.HealthStub(channel)

            async def poll() -> None:  # every change the overall status goes through
                while True:
                    reply = await stub.Check(health_pb2.HealthCheckRequest(service=""))
                    if seen[-1:] != [reply.status]:
                        seen.append(reply.status)
                    await asyncio.sleep(0.005)

            watcher = asyncio.ensure_future(poll())
            try:
                while seen[-1:] != [SERVING]:
                    await asyncio.sleep(0.01)
                ids = await app.engine.publish("t", [OutMessage(body=b"before")])
                writer = store._supervisor.writer
                assert writer is not None
                with pytest.raises(Unavailable):
                    await writer.submit(writes.statement("INSERT INTO nowhere VALUES(1)"))
                deadline = time.monotonic() + 20
                while seen[-2:] != [NOT_SERVING, SERVING]:
                    assert time.monotonic() < deadline, seen
                    await asyncio.sleep(0.01)
                liveness = await stub.Check(health_pb2.HealthCheckRequest(service="liveness"))
                assert liveness.status == SERVING
            finally:
                watcher.cancel()
        ids += await app.engine.publish("t", [OutMessage(body=b"after")])
        got = await store.fetch("t", "g", 10, 2**62)
        assert [m.message_id for m in got] == ids


def writer_children() -> list[int]:
    """Pids of the store writer processes started by this process."""
    found = []
    for entry in pathlib.Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        if (int(fields[1]) == os.getpid() and fields[0] != "Z"
                and b"gateway.store.writer_proc" in cmdline):
            found.append(int(entry.name))
    return found


async def test_serve_exits_non_zero_when_the_store_cannot_recover(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(recovery, "GIVE_UP_AFTER", 3)
    monkeypatch.setattr(recovery, "BACKOFF_S", (0.001, 0.002))
    real_start = GroupCommitWriter.start
    starts = 0

    async def start_once(self: GroupCommitWriter) -> None:
        nonlocal starts
        starts += 1
        if starts > 1:
            raise Unavailable("embedded store did not open: simulated")
        await real_start(self)

    monkeypatch.setattr(GroupCommitWriter, "start", start_once)
    config = ServeConfig(listen="127.0.0.1:0", data_dir=str(tmp_path / "data"), grace_s=0.0)
    served = asyncio.ensure_future(serve_cmd.serve(config))
    deadline = time.monotonic() + 20
    said = ""
    while "gateway listening on" not in said:
        assert time.monotonic() < deadline and not served.done()
        await asyncio.sleep(0.02)
        said += capsys.readouterr().err
    os.kill(writer_children()[0], signal.SIGKILL)
    code = await asyncio.wait_for(served, 30)
    assert code == serve_cmd.EXIT_BACKEND_LOST != 0
    assert starts == 3
    assert "exiting with status 75: embedded store gave up" in capsys.readouterr().err
