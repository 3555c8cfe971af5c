"""The AMQP listener: accepts connections (at most `max_connections`), loads the durable
topology at start, routes dead letters, and closes everything on stop."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from pathlib import Path

import structlog

from adapters.amqp.frontend import queues
from adapters.amqp.frontend.connection import Connection
from adapters.amqp.frontend.context import AuthorizerPort, Context, Limits
from adapters.amqp.frontend.deadletters import DeadLetterRouter
from adapters.amqp.frontend.expiry import Sweeper
from adapters.amqp.frontend.footprint import Budget
from adapters.amqp.frontend.journal import Journal
from adapters.amqp.frontend.leases import QueueLeases
from adapters.amqp.frontend.topology import MAX_BINDINGS, MAX_EXCHANGES, MAX_QUEUES, Topology
from gateway.engine.port import EnginePort, EngineQueries
from gateway.errors import Unavailable

log = structlog.get_logger(__name__)


def budget_of(limits: Limits, *, shared: bool) -> Budget:
    """What declared entities may hold; `shared` (authentication on): each principal at most
    its share, `max_principal_topology_bytes` (0: half of the whole) and half of each count
    limit, so that one client cannot fill the listener for every other."""
    if not shared:
        return Budget(limits.max_topology_bytes, limits.max_connection_topology_bytes)
    return Budget(limits.max_topology_bytes, limits.max_connection_topology_bytes,
                  limits.max_principal_topology_bytes or (limits.max_topology_bytes + 1) // 2,
                  {"queue": (MAX_QUEUES + 1) // 2, "exchange": (MAX_EXCHANGES + 1) // 2,
                   "binding": (MAX_BINDINGS + 1) // 2})


class AMQPFrontEnd:
    def __init__(
        self,
        engine: EnginePort,
        queries: EngineQueries,
        host: str,
        port: int,
        *,
        state_dir: Path,
        authorizer: AuthorizerPort | None = None,
        tls: ssl.SSLContext | None = None,
        limits: Limits | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self.tls = tls
        limits = limits or Limits()
        topology = Topology(budget_of(limits, shared=authorizer is not None))
        journal = Journal(state_dir)
        self.ctx = Context(engine, queries, authorizer, topology, journal, limits)
        self.ctx.router = DeadLetterRouter(self.ctx)
        self._sweeper = Sweeper(self.ctx)
        self._leases = QueueLeases(self.ctx)
        self.connections: set[Connection] = set()
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        ctx = self.ctx
        replayed = await asyncio.to_thread(ctx.journal.load, ctx.topology)
        assert ctx.router is not None
        for queue in ctx.topology.queues.values():
            ctx.router.ensure(queue)
        await queues.restore(ctx)
        self._sweeper.start()
        self._leases.start()
        loop = asyncio.get_running_loop()
        try:
            self._server = await loop.create_server(
                self._accept, self.host, self.port, ssl=self.tls, backlog=1024)
        except OSError as exc:
            raise Unavailable(f"cannot listen on {self.host}:{self.port} for AMQP: "
                              f"{exc.strerror}") from None
        sockets = self._server.sockets
        if sockets:
            self.port = sockets[0].getsockname()[1]
        log.info("amqp front end listening", host=self.host, port=self.port,
                 tls=self.tls is not None, topology_records=replayed,
                 queues=len(ctx.topology.queues))

    def _accept(self) -> Connection:
        conn = Connection(self.ctx, self._lost)
        if len(self.connections) >= self.ctx.limits.max_connections:
            log.warning("amqp connection refused: too many connections",
                        limit=self.ctx.limits.max_connections)
            conn.refuse = True
        self.connections.add(conn)
        return conn

    def _lost(self, conn: Connection) -> None:
        self.connections.discard(conn)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for conn in list(self.connections):
            conn.close()
        for conn in list(self.connections):
            with contextlib.suppress(Exception):
                await asyncio.wait_for(conn.wait_closed(), self.ctx.limits.close_timeout_s)
            conn.abort()
        await self._sweeper.close()
        await self._leases.close()
        if self.ctx.router is not None:
            await self.ctx.router.close()
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 1.0)
