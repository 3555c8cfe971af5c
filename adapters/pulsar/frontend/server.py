"""The Pulsar binary-protocol listener: accepts client connections and serves them."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from pathlib import Path

import structlog

from adapters.pulsar.frontend import dedup_recovery, replies
from adapters.pulsar.frontend.budget import READ_BUDGET_BYTES, ReadBudget
from adapters.pulsar.frontend.connection import Connection
from adapters.pulsar.frontend.consumers import MAX_UNACKED
from adapters.pulsar.frontend.framing import PARTIAL_FACTOR, PartialFrames
from adapters.pulsar.frontend.ids import DedupRegistry, IdAllocator
from adapters.pulsar.frontend.journal import Journal
from adapters.pulsar.frontend.namespaces import TopicListing
from adapters.pulsar.frontend.ports import AuthorizerPort
from adapters.pulsar.frontend.readers import ReaderGroups
from adapters.pulsar.frontend.schemas import MAX_TOTAL_BYTES as MAX_SCHEMA_BYTES
from adapters.pulsar.frontend.schemas import SchemaRegistry
from adapters.pulsar.frontend.shared import (
    HANDSHAKE_TIMEOUT_S,
    MAX_CONSUMERS,
    MAX_PRODUCERS,
    Shared,
)
from adapters.pulsar.frontend.subscriptions import SubscriptionRegistry
from adapters.pulsar.wire import wire_pb2 as pb
from adapters.pulsar.wire.frames import FRAME_OVERHEAD, MAX_MESSAGE_SIZE
from gateway.engine.port import EnginePort, EngineQueries
from gateway.errors import InvalidArgument

log = structlog.get_logger(__name__)

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 6650
MAX_CONNECTIONS = 1000
"""Client connections served at once per listener; more are answered with an ERROR
(ServiceNotReady) and closed."""


def parse_listen(text: str) -> tuple[str, int]:
    """Split a `HOST:PORT` listen address (`--pulsar-listen`)."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isascii() or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise InvalidArgument("pulsar_listen", text, "HOST:PORT with a port in 0..65535")
    return host.strip("[]") or DEFAULT_HOST, int(port)


LARGEST_MESSAGE = 1 << 30
"""The gateway's own largest `max_message_bytes` (Pulsar's 5 MiB is only its default)."""


class PulsarFrontEnd:
    """Lets unmodified Pulsar clients publish and consume through the engine.

    Lookups and partitioned-metadata requests point back at this listener (`advertised_url`, by
    default `pulsar://HOST:PORT` of the bound socket) with no partitions. `max_message_size` is
    announced to clients, which then refuse larger messages themselves: set it to the engine's
    limit when that is lower than Pulsar's 5 MiB (a message the engine refuses is answered with
    SEND_ERROR, and the client resends it until its send timeout). With an `authorizer`, clients
    must connect with a token (`pulsar.AuthenticationToken`) and may only produce to and consume
    from what its principal allows.

    Limits: `max_connections` at once; a connection must send CONNECT within
    `handshake_timeout_s` and may hold `max_producers` producers and `max_consumers` consumers,
    each with at most `max_unacked_per_consumer` unsettled deliveries;
    frames read and not yet answered may hold `read_budget_bytes` across all connections (more
    waits), and frames not yet read whole `partial_frame_bytes` (4 x the read budget by
    default; a connection whose frame would pass it is closed, as is one whose frame does not
    complete within twice `keepalive_s`: `adapters.pulsar.frontend.framing`). Values inside
    commands are checked by `adapters.pulsar.frontend.edge`.

    With `tls` (the gateway's `--tls-cert` context, client certificates included) it serves
    TLS only: clients connect to `pulsar+ssl://`, and lookups send them there.

    With a `state_dir` (the product gives `DATA_DIR/pulsar`) producers' sequence ids survive
    restarts (`adapters.pulsar.frontend.journal`), and readers' subscriptions a crash left are
    dropped at the next start (`adapters.pulsar.frontend.readers`), and topics keep their
    schemas (`adapters.pulsar.frontend.schemas`); without one they last as long as the front
    end.

    With the engine's `queries` it serves pattern (regex) subscriptions: GET_TOPICS_OF_NAMESPACE
    lists the gateway's topics (`adapters.pulsar.frontend.namespaces`); without them it lists
    none.
    """

    def __init__(
        self,
        engine: EnginePort,
        host: str = DEFAULT_HOST,
        port: int = DEFAULT_PORT,
        *,
        advertised_url: str | None = None,
        keepalive_s: float = 30.0,
        max_message_size: int = MAX_MESSAGE_SIZE,
        authorizer: AuthorizerPort | None = None,
        handshake_timeout_s: float = HANDSHAKE_TIMEOUT_S,
        max_connections: int = MAX_CONNECTIONS,
        max_producers: int = MAX_PRODUCERS,
        max_consumers: int = MAX_CONSUMERS,
        max_unacked_per_consumer: int = MAX_UNACKED,
        read_budget_bytes: int = READ_BUDGET_BYTES,
        partial_frame_bytes: int | None = None,
        state_dir: str | Path | None = None,
        tls: ssl.SSLContext | None = None,
        queries: EngineQueries | None = None,
    ) -> None:
        self._engine = engine
        self._listing = TopicListing(queries)
        self._host = host
        self._requested_port = port
        self._advertised_url = advertised_url
        self._keepalive_s = keepalive_s
        if not 1024 <= max_message_size <= LARGEST_MESSAGE:
            raise InvalidArgument("max_message_size", max_message_size, f"1024..{LARGEST_MESSAGE}")
        self._max_message_size = max_message_size
        if not 0 < handshake_timeout_s <= 3600:
            raise InvalidArgument("handshake_timeout_s", handshake_timeout_s, "0..3600 s")
        for name, value in (
            ("max_connections", max_connections),
            ("max_producers", max_producers),
            ("max_consumers", max_consumers),
            ("max_unacked_per_consumer", max_unacked_per_consumer),
        ):
            if not 1 <= value <= 1_000_000:
                raise InvalidArgument(name, value, "1..1000000")
        # Room for two frames of the largest size at least, whatever the budget asked for.
        read_budget_bytes = max(read_budget_bytes, 2 * (max_message_size + FRAME_OVERHEAD))
        self._handshake_timeout_s = handshake_timeout_s
        self._max_connections = max_connections
        self._max_producers = max_producers
        self._max_consumers = max_consumers
        self._max_unacked = max_unacked_per_consumer
        self._read_budget_bytes = read_budget_bytes
        if partial_frame_bytes is None:
            partial_frame_bytes = PARTIAL_FACTOR * read_budget_bytes
        elif partial_frame_bytes < 1:
            raise InvalidArgument("partial_frame_bytes", partial_frame_bytes, "at least 1")
        self._partial_frame_bytes = partial_frame_bytes
        self._authorizer = authorizer
        self._tls = tls
        self._server: asyncio.Server | None = None
        self._connections: dict[Connection, asyncio.Task[None]] = {}
        self._ids = IdAllocator(ordered=engine.positions)
        self._journal = Journal(Path(state_dir)) if state_dir else None
        self._dedup = DedupRegistry(journal=self._journal)
        self._subscriptions = SubscriptionRegistry()
        self._readers = ReaderGroups(Path(state_dir) if state_dir else None)
        self._schemas = SchemaRegistry(Path(state_dir) if state_dir else None,
                                       MAX_SCHEMA_BYTES // 2 if authorizer is not None else 0)
        self._shared: Shared | None = None

    @property
    def port(self) -> int:
        """The bound port (after `start`)."""
        if self._server is None or not self._server.sockets:
            raise RuntimeError("the Pulsar front end is not started")
        return int(self._server.sockets[0].getsockname()[1])

    @property
    def service_url(self) -> str:
        """The URL clients are pointed at by lookups."""
        scheme = "pulsar+ssl" if self._tls is not None else "pulsar"
        return self._advertised_url or f"{scheme}://{self._host}:{self.port}"

    async def start(self) -> None:
        """Bind and start accepting connections."""
        if self._journal is not None:
            await asyncio.to_thread(self._dedup.load)
            # Ids a crash kept out of the journal, from the stored messages (`dedup_recovery`).
            raised = await dedup_recovery.recover(
                self._engine, self._journal.covered(), self._dedup.last)
            if raised:
                for (topic, name), sequence_id in raised.items():
                    self._dedup.record(topic, name, sequence_id)
                await asyncio.to_thread(self._journal.adopt, raised)
            self._journal.start()
        await self._readers.recover(self._engine)
        await asyncio.to_thread(self._schemas.load)
        self._server = await asyncio.start_server(
            self._accept, self._host, self._requested_port, ssl=self._tls,
            ssl_handshake_timeout=self._handshake_timeout_s if self._tls is not None else None)
        self._shared = Shared(
            engine=self._engine,
            service_url=self.service_url,
            ids=self._ids,
            dedup=self._dedup,
            subscriptions=self._subscriptions,
            keepalive_s=self._keepalive_s,
            max_message_size=self._max_message_size,
            authorizer=self._authorizer,
            handshake_timeout_s=self._handshake_timeout_s,
            max_producers=self._max_producers,
            max_consumers=self._max_consumers,
            max_unacked=self._max_unacked,
            budget=ReadBudget(self._read_budget_bytes),
            readers=self._readers,
            schemas=self._schemas,
            partial=PartialFrames(self._partial_frame_bytes),
            listing=self._listing,
        )
        log.info("pulsar front end listening", url=self.service_url)

    async def stop(self) -> None:
        """Stop accepting, close every connection and wait for their cleanup."""
        if self._server is not None:
            self._server.close()
        for connection in list(self._connections):
            connection.close()
        tasks = list(self._connections.values())
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        if self._server is not None:
            with contextlib.suppress(Exception):
                await self._server.wait_closed()
            self._server = None
        await self._readers.close()
        if self._journal is not None:
            await self._journal.close()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        assert self._shared is not None
        if len(self._connections) >= self._max_connections:
            text = f"the listener serves {self._max_connections} connections, the most allowed"
            writer.write(replies.error(replies.NO_REQUEST, pb.ServiceNotReady, text))
            writer.close()
            log.info("pulsar connection refused", reason=text)
            return
        connection = Connection(reader, writer, self._shared)
        task = asyncio.current_task()
        assert task is not None
        self._connections[connection] = task
        try:
            await connection.serve()
        finally:
            self._connections.pop(connection, None)
