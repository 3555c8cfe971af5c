"""Shared helpers of the Pulsar front-end tests that drive the official `pulsar-client`: the
gateway plus its Pulsar front end in this process, restartable on one data dir and port."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, TypeVar

import pulsar
import pytest

from adapters.pulsar.frontend import PulsarFrontEnd
from gateway.engine.clock import SystemClock
from gateway.server.app import GatewayApp, running_gateway

T = TypeVar("T")
QUIET = pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)


async def run(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run a blocking client call off the event loop."""
    return await asyncio.to_thread(fn, *args, **kwargs)


class Stack:
    """The gateway plus the Pulsar front end, restartable on the same data dir and port."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.port = 0
        self.front: PulsarFrontEnd | None = None
        self.app: GatewayApp | None = None
        self._exit: contextlib.AsyncExitStack | None = None

    @property
    def url(self) -> str:
        return f"pulsar://127.0.0.1:{self.port}"

    async def start(self) -> None:
        self._exit = contextlib.AsyncExitStack()
        app = self.app = await self._exit.enter_async_context(
            running_gateway(data_dir=self.data_dir, listen="127.0.0.1:0", clock=SystemClock())
        )
        self.front = PulsarFrontEnd(
            app.engine, "127.0.0.1", self.port, state_dir=self.data_dir / "pulsar",
            queries=app.engine,
        )
        await self.front.start()
        self.port = self.front.port

    async def stop(self) -> None:
        if self.front is not None:
            await self.front.stop()
            self.front = None
        if self._exit is not None:
            await self._exit.aclose()
            self._exit = None


@pytest.fixture(name="stack")
async def stack_fixture(tmp_path: Path) -> AsyncIterator[Stack]:
    """The `stack` fixture: a started `Stack` on `tmp_path / "data"`, stopped after the test.
    A test module imports `stack_fixture` to have it."""
    instance = Stack(tmp_path / "data")
    await instance.start()
    yield instance
    await instance.stop()


def client_for(url: str, timeout_s: int = 10) -> pulsar.Client:
    return pulsar.Client(url, operation_timeout_seconds=timeout_s, logger=QUIET)


async def receive_all(consumer: pulsar.Consumer, quiet_ms: int = 700) -> list[pulsar.Message]:
    """Receive until nothing arrives for `quiet_ms`."""
    out: list[pulsar.Message] = []
    while True:
        try:
            out.append(await run(consumer.receive, quiet_ms))
        except pulsar.Timeout:
            return out
