"""A TCP proxy to the broker whose broker-to-client direction a test can hold: what the broker
sends waits in the proxy, in order, until the test releases it. A test makes "a delivery on its
way to the gateway" last exactly as long as it needs, and sees when the gateway speaks to the
broker meanwhile (`sent`), without timing anything."""

from __future__ import annotations

import asyncio
from urllib.parse import urlsplit, urlunsplit

from tests.amqp_front import RABBITMQ_URL


class GateProxy:
    """A TCP proxy to the broker whose broker-to-client direction a test can hold (the bytes wait
    in the proxy, in order, until `release`); `sent` is set when the client sends anything."""

    def __init__(self) -> None:
        self.open = asyncio.Event()
        self.open.set()
        self.sent = asyncio.Event()
        self.port = 0
        self._tasks: set[asyncio.Task[None]] = set()
        self._server: asyncio.Server | None = None

    def url(self) -> str:
        parts = urlsplit(RABBITMQ_URL)
        return urlunsplit(parts._replace(netloc=f"{parts.username}:{parts.password}"
                                                f"@127.0.0.1:{self.port}"))

    def hold(self) -> None:
        self.open.clear()
        self.sent.clear()

    def release(self) -> None:
        self.open.set()

    async def __aenter__(self) -> GateProxy:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        broker = urlsplit(RABBITMQ_URL)
        up_reader, up_writer = await asyncio.open_connection(broker.hostname, broker.port or 5672)
        for task in (self._pump(reader, up_writer, upstream=True),
                     self._pump(up_reader, writer, upstream=False)):
            self._tasks.add(asyncio.ensure_future(task))

    async def _pump(self, source: asyncio.StreamReader, sink: asyncio.StreamWriter, *,
                    upstream: bool) -> None:
        try:
            while data := await source.read(65536):
                if upstream:
                    self.sent.set()
                else:
                    await self.open.wait()
                sink.write(data)
                await sink.drain()
        finally:
            sink.close()
