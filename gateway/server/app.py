"""The composition root: builds the back end, the engine, the gRPC server and the front ends.

`running_gateway(...)` starts one for tests and scripts; `gateway serve` uses `GatewayApp`.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import shutil
import socket
import ssl
import tempfile
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import grpc
import structlog
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from gateway.backend import Backend
from gateway.engine.clock import Clock, SystemClock
from gateway.engine.config import EngineConfig
from gateway.engine.engine import Engine
from gateway.engine.observe import Observer
from gateway.errors import InvalidArgument, Unavailable
from gateway.limits import StreamSlots
from gateway.product import AnyProduct, FrontEnd, Host, build_registry, installed
from gateway.server.addresses import join_host_port
from gateway.server.admin_api import AdminService
from gateway.server.api import GatewayService
from gateway.server.auth import AuthInterceptor, Authorizer
from gateway.server.config import (
    EMBEDDED,
    LISTENERS,
    ServeConfig,
    backends,
    build,
    check_listener,
)
from gateway.server.errors import DecodeGuard, ErrorInterceptor
from gateway.server.metrics import TimingInterceptor, directory_size
from gateway.server.principals import load_principals
from gateway.server.timeline import SpoolTimeline
from gateway.server.totals import GroupTotals
from gateway.telemetry.spool import Spool
from gateway.v1 import admin_pb2, admin_pb2_grpc, gateway_pb2, gateway_pb2_grpc

log = structlog.get_logger("gateway.server")

ExtraService = Callable[[grpc.aio.Server, Engine], object]
SERVICE_NAMES = ("gateway.v1.Gateway", "gateway.v1.Admin")
LIVENESS = "liveness"
"""Health name that is SERVING while the process runs, whatever the back end's state: a broker
outage must not make Kubernetes restart the sidecar (the overall status covers readiness)."""


def make_backend(
    config: ServeConfig, clock: Clock, products: Sequence[AnyProduct] | None = None
) -> Backend:
    """The back end `config.backend` names: the embedded store, or one a product offers."""
    if config.backend == EMBEDDED:
        from gateway.store import EmbeddedStore

        return EmbeddedStore(Path(config.data_dir), clock,
                             tail_bytes=config.cache_mb << 20,
                             commit_timeout_s=config.commit_timeout_s)
    products = installed() if products is None else products
    for product in products:
        if config.backend in product.backends:
            return product.open_backend(config.backend, config.section(product), clock)
    raise InvalidArgument("backend", config.backend, "one of " + ", ".join(backends(products)))


TRACING_FLUSH_S = 5.0
"""How long stopping waits for the last spans to reach the OTLP collector."""
STREAMS_PER_CONNECTION = 1000
"""Concurrent calls one HTTP/2 connection may carry (more wait for the client's next stream)."""
HANDSHAKE_TIMEOUT_MS = 10_000
"""A connection that has not finished its TLS / HTTP/2 handshake by then is closed."""
IDLE_CONNECTION_MS = 120_000
"""A connection that carries no call for this long is closed (GOAWAY); gRPC clients reconnect
by themselves on their next call, so only idle sockets go (file descriptors are bounded)."""


class GatewayApp:
    def __init__(
        self,
        config: ServeConfig,
        *,
        clock: Clock | None = None,
        backend: Backend | None = None,
        extra_services: Sequence[ExtraService] = (),
        observers: Sequence[Observer] = (),
        front_end_settings: Mapping[str, object] | None = None,
        products: Sequence[AnyProduct] | None = None,
    ) -> None:
        """`products`: those to serve (default: every installed one). `front_end_settings`: by
        product name, settings that product's front end uses instead of building them from its
        config section (tests)."""
        self.config = config
        self.products = tuple(installed() if products is None else products)
        self.front_end_settings = dict(front_end_settings or {})
        self.clock = clock or SystemClock()
        self.backend = backend or make_backend(config, self.clock, self.products)
        engine_config = EngineConfig(
            max_message_bytes=config.max_message_bytes,
            time_scale=config.time_scale,
            auto_create=config.auto_create,
            gateway_id=config.gateway_id,
            backend_name=self.backend.name,
            broadcast_idle_ms=round(config.broadcast_idle_s * 1000),
            max_unacked=config.max_unacked,
            max_unacked_bytes=config.max_unacked_mb << 20,
            max_held_bytes=config.max_held_mb << 20,
            max_publish_bytes=config.max_publish_mb << 20,
            max_groups=config.max_groups,
            max_groups_per_principal=config.groups_per_principal,
            max_topics=config.max_topics,
            max_stored_groups=config.max_stored_groups,
            max_topics_per_principal=config.topics_per_principal,
            max_stored_groups_per_principal=config.stored_groups_per_principal,
        )
        from gateway.server.metrics import Metrics

        self.metrics = Metrics(label_cap=config.metrics_label_cap)
        self.totals = GroupTotals()
        hooks: list[Observer] = [*observers, self.metrics, self.totals]
        self.spool: Spool | None = None
        if config.telemetry:
            self.spool = Spool(Path(config.data_dir) / "telemetry", gateway_id=config.gateway_id)
            self.metrics.watch_telemetry(self.spool.dropped_counts)
            hooks.append(self.spool)
        self.tracing: Any = None
        if config.tracing:
            from gateway.tracing.setup import open_tracing

            self.tracing = open_tracing(config)
            hooks.append(self.tracing)
        registry = build_registry(self.products)
        self.engine = Engine(self.backend, registry, self.clock, engine_config, hooks)
        self.metrics_port = 0
        self.console: Any = None
        """The web console (`gateway.console.Console`) when `console_listen` is set."""
        self.console_port = 0
        self._console_dir = ""
        self.extra_services = list(extra_services)
        self.server: grpc.aio.Server | None = None
        self.grpc_port = 0
        self.authorizer: Authorizer | None = None
        self.stream_slots = StreamSlots(config.max_rpcs)
        """Streams no credentials admitted, on every service of the gRPC server together."""
        self.front_ends: dict[str, FrontEnd] = {}
        """Each product's front end by product name, in product order (after `start`)."""
        self.serving = False
        """What the overall health check says (SERVING or not); /metrics shows it too."""
        self._health_task: asyncio.Task[None] | None = None
        self._health_changed = asyncio.Event()
        self.lost = asyncio.Event()
        """Set when the back end cannot recover within this process (`Backend.fatal`): the
        process should end with a non-zero status so that its supervisor restarts it."""

    def _prepare_front_ends(self) -> None:
        """Authentication, then each product's front end (refusing bad settings and missing
        dependencies before anything starts)."""
        cfg = self.config
        if cfg.tokens_file:
            fields = [key for product in self.products for key in product.principal_fields]
            principals = load_principals(cfg.tokens_file, [dict(p) for p in cfg.principals],
                                         fields)
            self.authorizer = Authorizer(principals, self.engine.naming_schemes())
        host = Host(engine=self.engine, authorizer=self.authorizer,
                    stream_slots=self.stream_slots,
                    max_message_bytes=cfg.max_message_bytes,
                    listener=lambda field, address: check_listener(field, address, cfg),
                    queries=self.engine, data_dir=cfg.data_dir,
                    tls=self._ssl_context() if cfg.tls_cert else None)
        for product in self.products:
            settings = self.front_end_settings.get(product.name)
            front = product.front_end(replace(host, settings=settings), cfg.section(product))
            if front is not None:
                self.front_ends[product.name] = front

    async def start(self) -> None:
        cfg = self.config
        self._prepare_front_ends()
        await self.engine.start()
        limit = cfg.max_message_bytes + 64 * 1024
        # DecodeGuard first: every other interceptor sees decoded requests.
        interceptors: list[Any] = [DecodeGuard(), TimingInterceptor(self.metrics)]
        if self.authorizer is not None:
            interceptors.append(AuthInterceptor(self.authorizer, self.stream_slots))
        interceptors.append(ErrorInterceptor())
        server = grpc.aio.server(
            interceptors=interceptors,
            maximum_concurrent_rpcs=cfg.max_rpcs,
            options=[
                ("grpc.max_receive_message_length", max(limit, 64 * 1024 * 1024)),
                ("grpc.max_send_message_length", max(limit, 64 * 1024 * 1024)),
                ("grpc.so_reuseport", 0),
                ("grpc.max_concurrent_streams", STREAMS_PER_CONNECTION),
                ("grpc.server_handshake_timeout_ms", HANDSHAKE_TIMEOUT_MS),
                ("grpc.max_connection_idle_ms", IDLE_CONNECTION_MS),
            ],
        )
        gateway_pb2_grpc.add_GatewayServicer_to_server(GatewayService(self.engine), server)
        timeline = SpoolTimeline(self.spool) if self.spool is not None else None
        admin_pb2_grpc.add_AdminServicer_to_server(
            AdminService(self.engine, self.totals, timeline,
                         max_message_bytes=cfg.max_message_bytes), server)
        mounted: list[str] = []
        for front in self.front_ends.values():
            mounted.extend(front.mount(server))
        for extra in self.extra_services:
            extra(server, self.engine)
        health_servicer = health.aio.HealthServicer()
        self._health = health_servicer
        health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
        names = (
            gateway_pb2.DESCRIPTOR.services_by_name["Gateway"].full_name,
            admin_pb2.DESCRIPTOR.services_by_name["Admin"].full_name,
            *mounted,
            health.SERVICE_NAME,
            reflection.SERVICE_NAME,
        )
        reflection.enable_server_reflection(names, server)
        host, port = check_listener("listen", cfg.listen, cfg)
        _check_free("listen", cfg.listen, host, port)
        try:
            if cfg.tls_cert:
                bound = server.add_secure_port(join_host_port(host, port), self._tls())
            else:
                bound = server.add_insecure_port(join_host_port(host, port))
        except RuntimeError:  # grpc's "Failed to bind": the port is taken, or not this host's
            bound = 0
        if bound == 0:
            raise Unavailable(f"cannot listen on {cfg.listen} (listen): the address is in use "
                              "or not one of this host's")
        self.grpc_port = bound
        if cfg.console_listen:
            # The console calls the admin API over a Unix socket in a directory only this user
            # may enter: the same API and checks as the network port, without its TLS.
            self._console_dir = tempfile.mkdtemp(prefix="gateway-console-")
            server.add_insecure_port(f"unix:{self._console_dir}/admin.sock")
        await server.start()
        self.server = server
        for front in self.front_ends.values():
            await front.start()
        if cfg.console_listen:
            await self._start_console()
        if cfg.admin_listen:
            ahost, aport = check_listener("admin_listen", cfg.admin_listen, cfg)
            self.metrics.bind(self.engine, lambda: directory_size(cfg.data_dir),
                              lambda: self.serving)
            try:
                self.metrics_port = self.metrics.serve(
                    ahost, aport, self._ssl_context() if cfg.tls_cert else None)
            except OSError as exc:
                    raise Unavailable(f"cannot listen on {cfg.admin_listen} (admin_listen): "
                                  f"{exc.strerror or exc}") from None
        await self._health.set(LIVENESS, health_pb2.HealthCheckResponse.SERVING)
        await self._set_serving(self.backend.healthy())
        self.backend.on_state_change(self._health_changed.set)
        self._health_task = asyncio.ensure_future(self._watch_health())
        log.info("gateway started", listen=join_host_port(host, bound), backend=self.backend.name,
                 data_dir=cfg.data_dir, front_ends=list(self.front_ends),
                 **{name: address for name, address in cfg.listeners()
                    if address and name not in LISTENERS},
                 metrics=f"{cfg.admin_listen.rsplit(':', 1)[0]}:{self.metrics_port}"
                 if cfg.admin_listen else None,
                 console=f"{cfg.console_listen.rsplit(':', 1)[0]}:{self.console_port}"
                 if cfg.console_listen else None,
                 tls="mtls" if cfg.tls_client_ca else ("tls" if cfg.tls_cert else "off"),
                 auth=("bearer tokens" if cfg.tokens_file else
                       "none: without a tokens file the gateway accepts every caller"
                       + ("" if cfg.allow_remote_unauthenticated else " on loopback only")))

    async def _start_console(self) -> None:
        from gateway.console.server import Console, ConsoleSettings

        cfg = self.config
        host, port = check_listener("console_listen", cfg.console_listen, cfg)
        channel = grpc.aio.insecure_channel(f"unix:{self._console_dir}/admin.sock")
        self.console = Console(ConsoleSettings(auth=bool(cfg.tokens_file), tls_cert=cfg.tls_cert,
                                               tls_key=cfg.tls_key,
                                               tls_client_ca=cfg.tls_client_ca), channel)
        self.console_port = await self.console.start(host, port)

    async def _stop_console(self) -> None:
        if self.console is not None:
            await self.console.stop()
            await self.console.channel.close()
            self.console = None
        if self._console_dir:
            shutil.rmtree(self._console_dir, ignore_errors=True)
            self._console_dir = ""

    def _tls(self) -> Any:
        cfg = self.config
        key = Path(cfg.tls_key).read_bytes()
        cert = Path(cfg.tls_cert).read_bytes()
        if cfg.tls_client_ca:
            return grpc.ssl_server_credentials(
                [(key, cert)], root_certificates=Path(cfg.tls_client_ca).read_bytes(),
                require_client_auth=True,
            )
        return grpc.ssl_server_credentials([(key, cert)])

    def _ssl_context(self) -> ssl.SSLContext:
        """The same certificate for front ends on listeners of their own (TLS 1.2 and up;
        client certificates required with `tls_client_ca`)."""
        cfg = self.config
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(cfg.tls_cert, cfg.tls_key)
        if cfg.tls_client_ca:
            context.load_verify_locations(cfg.tls_client_ca)
            context.verify_mode = ssl.CERT_REQUIRED
        return context

    async def _set_serving(self, serving: bool) -> None:
        self.serving = serving
        status = (health_pb2.HealthCheckResponse.SERVING if serving
                  else health_pb2.HealthCheckResponse.NOT_SERVING)
        for name in ("", *SERVICE_NAMES):
            await self._health.set(name, status)

    async def _watch_health(self) -> None:
        """Health follows the back end: at once where it tells of changes, else within 0.5 s."""
        last = None
        while True:
            self._health_changed.clear()
            fatal = self.backend.fatal()
            if fatal is not None and not self.lost.is_set():
                log.critical("the back end cannot recover: the gateway must be restarted",
                             reason=fatal)
                self.lost.set()
            ok = self.backend.healthy() and self.engine.accepting
            if ok != last:
                await self._set_serving(ok)
                last = ok
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._health_changed.wait(), 0.5)

    async def stop(self, grace_s: float | None = None) -> None:
        """Drain: NOT_SERVING first, no new deliveries, settles accepted for the grace period."""
        grace = self.config.grace_s if grace_s is None else grace_s
        if self._health_task is not None:
            self._health_task.cancel()
        if self.server is None:
            await self.engine.close()
            return
        await self._set_serving(False)
        await self.engine.stop_dispatch()
        loop = asyncio.get_running_loop()
        until = loop.time() + grace
        while self.engine.unsettled_count() and loop.time() < until:
            await asyncio.sleep(0.05)
        for front in self.front_ends.values():
            await front.stop()
        await self._stop_console()
        await self.server.stop(min(grace, 1.0))
        await self.engine.close()
        self.metrics.close()
        if self.spool is not None:
            self.spool.close()
        if self.tracing is not None:
            await self._close_tracing()
        log.info("gateway stopped")


    async def abandon(self) -> None:
        """Undo a start that failed half way (a listener's address taken, say): whatever
        started stops at once, without a drain, and the store closes."""
        for front in self.front_ends.values():
            with contextlib.suppress(Exception):
                await front.stop()
        with contextlib.suppress(Exception):
            await self._stop_console()
        if self.server is not None:
            await self.server.stop(0)
        with contextlib.suppress(Exception):
            await self.engine.close()
        self.metrics.close()

    async def _close_tracing(self) -> None:
        """Export the spans still pending, for at most TRACING_FLUSH_S (a collector that is
        away must not hold the exit up)."""
        try:
            await asyncio.wait_for(asyncio.to_thread(self.tracing.close), TRACING_FLUSH_S)
        except TimeoutError:
            log.warning("tracing: pending spans not exported before exit",
                        waited_s=TRACING_FLUSH_S)


def _check_free(field: str, value: str, host: str, port: int) -> None:
    """Refuse an address some socket listens on already, before grpc tries it (grpc's core
    logs its own line to stderr first). Only "in use" is decided here; grpc decides the rest."""
    if port == 0:
        return
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError:
        return
    for family, kind, proto, _, address in infos:
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(address)
            except OSError as exc:
                if exc.errno == errno.EADDRINUSE:
                    raise Unavailable(f"cannot listen on {value} ({field}): the address is in "
                                      "use") from None


@contextlib.asynccontextmanager
async def running_gateway(
    data_dir: str | Path,
    listen: str = "127.0.0.1:0",
    *,
    clock: Clock | None = None,
    time_scale: float = 1.0,
    extra_services: Sequence[ExtraService] = (),
    backend: Backend | None = None,
    grace_s: float = 1.0,
    max_message_bytes: int = 4 * 1024 * 1024,
    observers: Sequence[Observer] = (),
    front_end_settings: Mapping[str, object] | None = None,
    **settings: Any,
) -> AsyncIterator[GatewayApp]:
    """Start a gateway for a test or a script; stop it on exit. `settings` are flat setting keys,
    the gateway's (tokens_file, admin_listen, tls_cert, …) and the products' (pulsar_listen, …)."""
    config = build(dict(
        listen=listen,
        data_dir=str(data_dir),
        time_scale=time_scale,
        grace_s=grace_s,
        max_message_bytes=max_message_bytes,
        **settings,
    ))
    app = GatewayApp(config, clock=clock, backend=backend, extra_services=extra_services,
                     observers=observers, front_end_settings=front_end_settings)
    await app.start()
    try:
        yield app
    finally:
        await app.stop(grace_s)
