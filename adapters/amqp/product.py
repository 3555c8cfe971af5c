"""The AMQP product: the RabbitMQ dialect and naming scheme, and the RabbitMQ back end.

The back end needs aio-pika and aiormq (the `rabbitmq` extra); `--backend rabbitmq` without them
is refused with one sentence naming the extra. This module imports without them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING
from urllib.parse import unquote

from adapters.amqp import dialect
from gateway.core.registry import Registry
from gateway.product import FrontEnd, Host, OptionFlag, OwnListener, Product, setting

if TYPE_CHECKING:
    from gateway.backend import Backend
    from gateway.engine.clock import Clock
    from gateway.migrate.endpoint import Destination, Source, Url


@dataclass(frozen=True, slots=True)
class AMQPConfig:
    """`[amqp]` (the AMQP 0-9-1 front end) and `[rabbitmq]` (the back end) in the TOML file."""

    amqp_listen: str = setting(
        "", toml="amqp.listen", flag="--amqp-listen", listener=True,
        help="serve AMQP 0-9-1 on HOST:PORT for AMQP clients (5672 is the usual port)")
    """AMQP 0-9-1 front end address; "" leaves it off."""
    amqp_frame_max: int = setting(131_072, toml="amqp.frame_max")
    """Largest frame the AMQP front end proposes and accepts (4096..1048576)."""
    amqp_heartbeat_s: int = setting(60, toml="amqp.heartbeat_s")
    """Heartbeat interval the AMQP front end proposes (0..3600 s; 0: none)."""
    amqp_max_connections: int = setting(1000, toml="amqp.max_connections")
    amqp_max_pending_publish_mb: int = setting(256, toml="amqp.max_pending_publish_mb")
    """MiB of published messages read and not yet stored, over every AMQP connection together
    (1..65536; each connection holds at most 64 MiB of them); past it connections are not read
    from until stored ones make room."""
    amqp_max_topology_mb: int = setting(128, toml="amqp.max_topology_mb")
    """MiB that every declared queue, exchange and binding (with their arguments) may hold
    in memory together (1..65536)."""
    amqp_max_topology_mb_per_connection: int = setting(
        32, toml="amqp.max_topology_mb_per_connection")
    """The same for what one connection declared, while it is open (1..max_topology_mb)."""
    amqp_max_topology_mb_per_principal: int = setting(
        0, toml="amqp.max_topology_mb_per_principal")
    """The same for what one principal declared, over all its connections, durable entities
    kept across restarts included (0..max_topology_mb; 0: half of it). Only with a tokens
    file: without one every client is the one anonymous principal."""
    rabbitmq_url: str = setting("amqp://guest:guest@127.0.0.1:5672/", toml="rabbitmq.url",
                                flag="--rabbitmq-url",
                                help="--backend rabbitmq: the broker's amqp:// or amqps:// URL "
                                     "(refused without --backend rabbitmq)")
    """The broker of `--backend rabbitmq`."""
    rabbitmq_start_wait_s: float = setting(
        300.0, toml="rabbitmq.start_wait_s", flag="--rabbitmq-start-wait-s",
        help="--backend rabbitmq: how long the gateway, started while the broker cannot be "
        "reached, waits for it (not serving, trying again with back-off) before it exits with "
        "status 75; 0 exits at once")
    """0..86400 s."""

    def __post_init__(self) -> None:
        from gateway.errors import InvalidArgument

        if not 4096 <= self.amqp_frame_max <= 1 << 20:
            raise InvalidArgument("amqp_frame_max", self.amqp_frame_max, "4096..1048576 bytes")
        if not 0 <= self.amqp_heartbeat_s <= 3600:
            raise InvalidArgument("amqp_heartbeat_s", self.amqp_heartbeat_s, "0..3600 s")
        if not 0 <= self.rabbitmq_start_wait_s <= 86_400:
            raise InvalidArgument("rabbitmq_start_wait_s", self.rabbitmq_start_wait_s,
                                  "0..86400 s")
        if not 1 <= self.amqp_max_connections <= 100_000:
            raise InvalidArgument("amqp_max_connections", self.amqp_max_connections,
                                  "1..100000")
        if not 1 <= self.amqp_max_pending_publish_mb <= 65_536:
            raise InvalidArgument("amqp_max_pending_publish_mb", self.amqp_max_pending_publish_mb,
                                  "1..65536 MiB")
        if not 1 <= self.amqp_max_topology_mb <= 65_536:
            raise InvalidArgument("amqp_max_topology_mb", self.amqp_max_topology_mb,
                                  "1..65536 MiB")
        if not 1 <= self.amqp_max_topology_mb_per_connection <= self.amqp_max_topology_mb:
            raise InvalidArgument("amqp_max_topology_mb_per_connection",
                                  self.amqp_max_topology_mb_per_connection,
                                  f"1..{self.amqp_max_topology_mb} MiB (amqp_max_topology_mb)")
        if not 0 <= self.amqp_max_topology_mb_per_principal <= self.amqp_max_topology_mb:
            raise InvalidArgument("amqp_max_topology_mb_per_principal",
                                  self.amqp_max_topology_mb_per_principal,
                                  f"0..{self.amqp_max_topology_mb} MiB (amqp_max_topology_mb); "
                                  "0: half of it")


def _broker_url(url: str) -> bool:
    """An amqp:// or amqps:// URL with a host and, if any, a port in 1..65535."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return False
    return parts.scheme in ("amqp", "amqps") and bool(parts.hostname) and port != 0


TLS_FILES = (("cafile", False), ("certfile", False), ("keyfile", False), ("capath", True))
"""The URL options that name a file (or for `capath` a directory) the TLS connection reads."""


def _tls_file_problem(url: str) -> str | None:
    """Why a TLS file an `amqps://` URL names (`?cafile=`, `certfile`, `keyfile`, `capath`)
    cannot be read, or None: the client library would fail every attempt to connect the same
    way."""
    import os
    from urllib.parse import parse_qs, urlsplit

    parts = urlsplit(url)
    if parts.scheme != "amqps":  # a plain connection reads none of them
        return None
    query = parse_qs(parts.query)
    for option, directory in TLS_FILES:
        for path in query.get(option, ()):
            kind = "directory" if directory else "file"
            try:
                fine = os.path.isdir(path) if directory else (
                    os.path.isfile(path) and os.access(path, os.R_OK))
                if not fine:
                    os.stat(path)  # the OS's reason when it is missing or unreachable
            except (OSError, ValueError) as exc:
                errno = exc.errno if isinstance(exc, OSError) else None
                said = os.strerror(errno) if errno else str(exc)
                return f"?{option}={path}: a readable {kind} ({said})"
            if not fine:
                return f"?{option}={path}: a readable {kind}"
    return None


MIGRATION_PORTS = MappingProxyType({"amqp": 5672, "amqps": 5671})
"""The port an `amqp://` or `amqps://` URL without one means."""


def vhost(url: Url) -> str:
    """The virtual host an `amqp://` URL names: its path, percent-decoded (`%2F` is `/`); no
    path is `/`."""
    path = url.parts.path
    return "/" if path in ("", "/") else unquote(path[1:])


class AMQP(Product[AMQPConfig]):
    name = "amqp"
    extra = "rabbitmq"
    config_type = AMQPConfig
    backends = ("rabbitmq",)
    plan_flags = (
        OptionFlag("--retry-interval-s", "x_retry_interval_s", "rabbitmq x-retry-interval"),
        OptionFlag("--dlx", "x_dead_letter_exchange",
                   "rabbitmq dead-letter exchange (exhausted messages go there)"),
    )
    migration_schemes = ("amqp", "amqps")
    migration_ports = MIGRATION_PORTS

    def migration_side(self, url: Url, role: str, timeout_s: float = 30.0) -> Source | Destination:
        self.require("rabbitmq queue side of migrate copy",
                     {"aio_pika": "aio-pika", "aiormq": "aiormq"})
        from adapters.amqp.migrate import side

        return side(url, role, timeout_s)

    def migration_path(self, url: Url) -> str:
        return vhost(url)

    def register(self, registry: Registry) -> None:
        dialect.register(registry)

    def open_backend(self, name: str, config: AMQPConfig, clock: Clock) -> Backend:
        self.require("rabbitmq back end", {"aio_pika": "aio-pika", "aiormq": "aiormq"})
        from adapters.amqp.backend import RabbitMQBackend
        from gateway.errors import InvalidArgument, masked

        if not _broker_url(config.rabbitmq_url):
            # Checked where it is used (a gateway on another back end may carry any value, a
            # manifest's placeholder say). Before, `foo` had the gateway retry a connection for
            # ever before it served, deaf to SIGTERM. The echo hides a password.
            raise InvalidArgument("rabbitmq_url", masked(config.rabbitmq_url),
                                  "amqp://USER:PASSWORD@HOST:PORT/VHOST or amqps://...")
        problem = _tls_file_problem(config.rabbitmq_url)
        if problem is not None:  # before, retried for the start wait (300 s)
            raise InvalidArgument("rabbitmq_url", masked(config.rabbitmq_url), problem)

        return RabbitMQBackend(config.rabbitmq_url, clock=clock,
                               start_wait_s=config.rabbitmq_start_wait_s)

    def front_end(self, host: Host, config: AMQPConfig) -> FrontEnd | None:
        if not config.amqp_listen:
            return None
        self.require("amqp front end", {"pamqp": "pamqp"})
        from adapters.amqp.frontend import AMQPFrontEnd
        from adapters.amqp.frontend.context import Limits

        address, port = host.listener("amqp_listen", config.amqp_listen)
        limits = host.settings if isinstance(host.settings, Limits) else Limits(
            frame_max=config.amqp_frame_max, heartbeat_s=config.amqp_heartbeat_s,
            max_connections=config.amqp_max_connections,
            max_message_bytes=host.max_message_bytes,
            total_pending_publish_bytes=config.amqp_max_pending_publish_mb << 20,
            max_topology_bytes=config.amqp_max_topology_mb << 20,
            max_connection_topology_bytes=config.amqp_max_topology_mb_per_connection << 20,
            max_principal_topology_bytes=config.amqp_max_topology_mb_per_principal << 20)
        if host.queries is None:
            raise TypeError("the AMQP front end needs the engine's queries")
        return OwnListener(AMQPFrontEnd(
            host.engine, host.queries, address, port,
            state_dir=Path(host.data_dir or ".") / "amqp", authorizer=host.authorizer,
            tls=host.tls, limits=limits))


PRODUCT = AMQP()
"""The object the `retry_gateway.products` entry point names."""
