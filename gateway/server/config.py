"""Server configuration: file, environment and flags, parsed once into a frozen value.

Precedence: command-line flag, then environment variable `GATEWAY_<KEY>`, then the TOML file,
then the default. Keys (TOML table.key -> flat key): server.listen -> listen, store.data_dir ->
data_dir, store.backend -> backend, store.cache_mb -> cache_mb, rabbitmq.url -> rabbitmq_url,
pulsar.service_url -> pulsar_service_url, server.* likewise.
"""

from __future__ import annotations

import ipaddress
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from gateway.errors import InvalidArgument

BACKENDS = ("embedded", "rabbitmq", "pulsar")


@dataclass(frozen=True, slots=True)
class ServeConfig:
    listen: str = "127.0.0.1:50051"
    data_dir: str = "./data"
    backend: str = "embedded"
    cache_mb: int = 64
    """Embedded store: memory for recently published messages, so fresh fetches skip the disk
    (0 turns it off)."""
    pulsar_listen: str = ""
    """Pulsar binary protocol front end address; "" leaves it off."""
    pulsar_advertised: str = ""
    rabbitmq_url: str = "amqp://guest:guest@127.0.0.1:5672/"
    pulsar_service_url: str = ""
    pulsar_token: str = ""
    max_message_bytes: int = 4 * 1024 * 1024
    max_unacked: int = 50_000
    """Most deliveries one push consumer holds unsettled (1..1000000; see EngineConfig)."""
    max_rpcs: int = 10_000
    """Calls (open streams included) the gRPC listener serves at once; more get
    RESOURCE_EXHAUSTED (1..1000000)."""
    grace_s: float = 10.0
    broadcast_idle_s: float = 3600.0
    """How long a broadcast consumer's own group outlives it (0..2592000 s; see EngineConfig)."""
    time_scale: float = 1.0
    auto_create: bool = True
    log_level: str = "info"
    rocketmq_access_key: str = ""
    rocketmq_secret_key: str = ""
    rocketmq_advertised: str = ""
    """host:port RocketMQ SDKs are told to connect to; "" echoes the address they dialled."""
    rocketmq_fifo_groups: tuple[str, ...] = ()
    """Consumer groups that consume in order (RocketMQ keeps this on the group)."""
    telemetry: bool = False
    gateway_id: str = "gateway"
    admin_listen: str = ""
    """Prometheus metrics endpoint HOST:PORT (/metrics); "" leaves it off."""
    tokens_file: str = ""
    """Bearer tokens and permissions (TOML, see gateway.server.auth); "" turns auth off."""
    principals: tuple[Mapping[str, Any], ...] = ()
    """Permissions from `[[auth.principals]]`, merged by name with the tokens file."""
    tls_cert: str = ""
    tls_key: str = ""
    tls_client_ca: str = ""
    """With a client CA, clients must present a certificate it signed (mTLS)."""
    allow_remote_unauthenticated: bool = False
    """Without auth the gateway listens on loopback only unless this is set."""

    def __post_init__(self) -> None:
        if not 1 <= self.max_rpcs <= 1_000_000:
            raise InvalidArgument("max_rpcs", self.max_rpcs, "1..1000000")
        for name in LISTENERS:
            address = getattr(self, name)
            if address or name == "listen":
                check_listener(name, address, self)
        if self.backend not in BACKENDS:
            raise InvalidArgument("backend", self.backend, "one of " + ", ".join(BACKENDS))
        if not 0 <= self.cache_mb <= 65536:
            raise InvalidArgument("cache_mb", self.cache_mb, "0..65536 MiB")
        if not 0 <= self.grace_s <= 3600:
            raise InvalidArgument("grace_s", self.grace_s, "0..3600 s")
        if not 0 <= self.broadcast_idle_s <= 2_592_000:
            raise InvalidArgument("broadcast_idle_s", self.broadcast_idle_s, "0..2592000 s")
        if bool(self.tls_cert) != bool(self.tls_key):
            raise InvalidArgument("tls_key", self.tls_key, "tls_cert and tls_key together")
        if self.tls_client_ca and not self.tls_cert:
            raise InvalidArgument("tls_client_ca", self.tls_client_ca, "only with tls_cert")
        if self.log_level not in ("debug", "info", "warning", "error"):
            raise InvalidArgument("log_level", self.log_level, "debug, info, warning, error")


LISTENERS = ("listen", "pulsar_listen", "admin_listen")
"""Every address the gateway listens on (RocketMQ SDKs share the gRPC `listen` port)."""


def check_listener(field: str, address: str, config: ServeConfig) -> tuple[str, int]:
    """(host, port) of a listener; without a tokens file it must be a loopback address unless
    `allow_remote_unauthenticated` is set. The one rule for every listener."""
    host, port = host_port(field, address)
    if not config.tokens_file and not config.allow_remote_unauthenticated and not _loopback(host):
        raise InvalidArgument(
            field, address,
            "a loopback address (127.0.0.0/8, ::1, localhost) while no tokens_file is "
            "configured (set allow_remote_unauthenticated to listen elsewhere without auth)",
        )
    return host, port


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def host_port(field: str, value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise InvalidArgument(field, value, "HOST:PORT with a port in 0..65535")
    return host.strip("[]"), int(port)


SECTIONS = {
    "server": {"listen", "max_message_bytes", "grace_s", "time_scale", "auto_create", "log_level",
               "pulsar_listen", "pulsar_advertised", "gateway_id", "telemetry", "admin_listen",
               "broadcast_idle_s", "max_unacked", "max_rpcs"},
    "store": {"backend", "data_dir", "cache_mb"},
    "rabbitmq": {"url"},
    "pulsar": {"service_url", "token"},
    "rocketmq": {"access_key", "secret_key", "advertised", "fifo_groups"},
    "auth": {"tokens_file", "principals", "tls_cert", "tls_key", "tls_client_ca",
             "allow_remote_unauthenticated"},
}
PREFIXED = {"rabbitmq", "pulsar", "rocketmq"}


def _flatten(doc: Mapping[str, Any]) -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for section, table in doc.items():
        if section not in SECTIONS or not isinstance(table, dict):
            raise InvalidArgument("config", section, "sections " + ", ".join(SECTIONS))
        for key, value in table.items():
            if key not in SECTIONS[section]:
                raise InvalidArgument(f"{section}.{key}", value,
                                      "keys " + ", ".join(sorted(SECTIONS[section])))
            name = f"{section}_{key}" if section in PREFIXED else key
            if section == "pulsar" and key == "service_url":
                name = "pulsar_service_url"
            if name == "rocketmq_fifo_groups":
                if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                    raise InvalidArgument("rocketmq.fifo_groups", value, "a list of group names")
                value = tuple(value)
            if name == "principals":
                if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
                    raise InvalidArgument("auth.principals", value, "a list of tables")
                value = tuple(value)
            flat[name] = value
    return flat


def _coerce(name: str, value: Any, kind: Any) -> Any:
    if name == "principals":
        return value
    if name == "rocketmq_fifo_groups":
        items = value.split(",") if isinstance(value, str) else value
        return tuple(str(v).strip() for v in items if str(v).strip())
    text = str(value)
    try:
        if kind in (int, "int"):
            return int(text)
        if kind in (float, "float"):
            return float(text)
        if kind in (bool, "bool"):
            if isinstance(value, bool):
                return value
            if text.lower() in ("1", "true", "yes", "on"):
                return True
            if text.lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError(text)
    except ValueError:
        raise InvalidArgument(name, value, f"a {kind if isinstance(kind, str) else kind.__name__}"
                              ) from None
    return text


def load(
    path: str | None = None,
    env: Mapping[str, str] | None = None,
    flags: Mapping[str, Any] | None = None,
) -> ServeConfig:
    values: dict[str, Any] = {}
    if path:
        try:
            values.update(_flatten(tomllib.loads(Path(path).read_text())))
        except OSError as exc:
            allowed = f"a readable TOML file ({exc.strerror})"
            raise InvalidArgument("config", path, allowed) from None
        except tomllib.TOMLDecodeError as exc:
            raise InvalidArgument("config", path, f"valid TOML ({exc})") from None
    environ = os.environ if env is None else env
    types = {f.name: f.type for f in fields(ServeConfig)}
    for name in types:
        key = f"GATEWAY_{name.upper()}"
        if key in environ:
            values[name] = environ[key]
    for name, value in (flags or {}).items():
        if value is not None:
            values[name] = value
    return ServeConfig(**{k: _coerce(k, v, types[k]) for k, v in values.items()})
