"""Server configuration: file, environment and flags, parsed once into a frozen value.

Precedence: command-line flag, then environment variable `GATEWAY_<KEY>`, then the TOML file,
then the default. The gateway's own keys (TOML table.key -> flat key): server.listen -> listen,
store.data_dir -> data_dir, store.backend -> backend, store.cache_mb -> cache_mb, server.* and
auth.* likewise. Each installed product declares its own settings (`gateway.product.setting`:
flat key, place in the file, flag); they are parsed into its frozen section
(`ServeConfig.section`). A key no one declares is refused.
"""

from __future__ import annotations

import difflib
import os
import socket
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, TypeVar

from gateway.errors import InvalidArgument
from gateway.limits import MAX_NAME_BYTES, too_long
from gateway.product import AnyProduct, Product, installed, settings_of
from gateway.server.addresses import check_port_free, host_port, http_url, loopback
from gateway.server.config_keys import PRINCIPALS, coerce, flatten, keys_of
from gateway.token_file import read_toml

EMBEDDED = "embedded"
"""The gateway's own back end, the default; products add theirs (`Product.backends`)."""
S = TypeVar("S")


@dataclass(frozen=True, slots=True)
class ServeConfig:
    listen: str = "127.0.0.1:50051"
    data_dir: str = "./data"
    backend: str = EMBEDDED
    """`embedded` or a back end an installed product offers (checked by `build`)."""
    cache_mb: int = 64
    """Embedded store: memory for recently published messages, so fresh fetches skip the disk
    (0 turns it off)."""
    commit_timeout_s: float = 30.0
    """Embedded store: how long writes wait for a commit before its writer process counts as
    hung and is restarted (1..3600 s; `gateway.store.writer.COMMIT_TIMEOUT_S`)."""
    max_message_bytes: int = 4 * 1024 * 1024
    max_unacked: int = 50_000
    """Most deliveries one push consumer holds unsettled (1..1000000; see EngineConfig)."""
    max_unacked_mb: int = 64
    """Most MiB of message bodies one push consumer holds unsettled, at least one delivery
    (1..65536; see EngineConfig)."""
    max_held_mb: int = 256
    """Most MiB of bodies one principal's deliveries hold unsettled, its consumers and pulls
    together (1..65536; see EngineConfig.max_held_bytes)."""
    max_publish_mb: int = 128
    """Most MiB of messages of publishes stored at once, every front end together; more wait
    (1..65536; see EngineConfig.max_publish_bytes)."""
    max_groups: int = 20_000
    """Most (topic, group) subscriptions the engine runs at once (1..10000000; see
    EngineConfig)."""
    max_groups_per_principal: int = 0
    """Most of them one principal runs at once (0..max_groups; see EngineConfig). 0, the
    default, takes `groups_per_principal`: half of `max_groups` with a tokens file, all of it
    without (every caller is then the one anonymous principal)."""
    max_topics: int = 100_000
    """Most topics the back end holds for a new one to be created on first use (1..10000000;
    see EngineConfig)."""
    max_stored_groups: int = 100_000
    """Most groups the back end keeps for a new one to be created on first use (1..10000000;
    see EngineConfig)."""
    max_topics_per_principal: int = 0
    """Most new topics one principal makes (0..max_topics; see EngineConfig). 0, the default,
    takes `topics_per_principal`: half of `max_topics` with a tokens file, all of it without."""
    max_stored_groups_per_principal: int = 0
    """Most new groups one principal makes (0..max_stored_groups; see EngineConfig). 0, the
    default: half of `max_stored_groups` with a tokens file, all of it without."""
    max_rpcs: int = 10_000
    """Calls (open streams included) the gRPC listener serves at once; more get
    RESOURCE_EXHAUSTED (1..1000000)."""
    grace_s: float = 10.0
    broadcast_idle_s: float = 3600.0
    """How long a broadcast consumer's own group outlives it (0..2592000 s; see EngineConfig)."""
    time_scale: float = 1.0
    auto_create: bool = True
    log_level: str = "info"
    telemetry: bool = False
    gateway_id: str = field(default_factory=lambda: default_gateway_id())
    """This gateway's name in telemetry rows and trace resources (`service.instance.id`), so
    that several gateways writing into one table or one tracing back end are told apart: the
    host name by default (a pod's name in Kubernetes), 1..255 bytes of printable UTF-8."""
    admin_listen: str = ""
    """Prometheus metrics endpoint HOST:PORT (/metrics); "" leaves it off."""
    metrics_label_cap: int = 100
    """Distinct topics, and distinct groups, that get labels of their own in /metrics; later
    ones are counted under `_other` (1..100000)."""
    console_listen: str = ""
    """The web console on HOST:PORT (`gateway.console`); "" leaves it off."""
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
    tracing: bool = False
    """OpenTelemetry spans of every message (`gateway.tracing.spans`), exported over OTLP."""
    tracing_endpoint: str = ""
    """The OTLP collector (`http://host:4317` for gRPC, `http://host:4318/v1/traces` for
    HTTP); "" takes the exporter's default and the `OTEL_EXPORTER_OTLP_*` variables."""
    tracing_protocol: str = "grpc"
    """`grpc` or `http/protobuf`."""
    tracing_sample_ratio: float = 1.0
    """The share of traces kept (0..1) for messages without a sampled parent."""
    tracing_service_name: str = "retry-gateway"
    sections: Mapping[str, object] = field(default_factory=dict)
    """Each product's settings by product name, a value of its `config_type` (`build` fills in
    every installed product; `section` gives defaults for one missing here)."""

    def __post_init__(self) -> None:
        if not 1 <= self.max_rpcs <= 1_000_000:
            raise InvalidArgument("max_rpcs", self.max_rpcs, "1..1000000")
        if not 1 <= self.max_groups <= 10_000_000:
            raise InvalidArgument("max_groups", self.max_groups, "1..10000000")
        if not 1 <= self.max_topics <= 10_000_000:
            raise InvalidArgument("max_topics", self.max_topics, "1..10000000")
        if not 1 <= self.max_stored_groups <= 10_000_000:
            raise InvalidArgument("max_stored_groups", self.max_stored_groups, "1..10000000")
        if not 0 <= self.max_groups_per_principal <= self.max_groups:
            raise InvalidArgument("max_groups_per_principal", self.max_groups_per_principal,
                                  f"0..max_groups ({self.max_groups}); 0: half of max_groups "
                                  "with a tokens_file, max_groups without")
        for key, whole in (("max_topics_per_principal", "max_topics"),
                           ("max_stored_groups_per_principal", "max_stored_groups")):
            if not 0 <= getattr(self, key) <= getattr(self, whole):
                raise InvalidArgument(key, getattr(self, key),
                                      f"0..{whole} ({getattr(self, whole)}); 0: half of {whole} "
                                      f"with a tokens_file, {whole} without")
        if not 1 <= self.max_unacked_mb <= 65536:
            raise InvalidArgument("max_unacked_mb", self.max_unacked_mb, "1..65536 MiB")
        if not _usable_id(self.gateway_id):
            raise InvalidArgument("gateway_id", self.gateway_id,
                                  "1..255 bytes (UTF-8) of printable characters")
        if not 1 <= self.max_held_mb <= 65536:
            raise InvalidArgument("max_held_mb", self.max_held_mb, "1..65536 MiB")
        if not 1 <= self.max_publish_mb <= 65536:
            raise InvalidArgument("max_publish_mb", self.max_publish_mb, "1..65536 MiB")
        taken: list[tuple[str, str, str, int]] = []
        for name, address in self.listeners():
            if address or name == "listen":
                host, port = check_listener(name, address, self)
                check_port_free(name, address, host, port, taken)
        if not 1 <= self.metrics_label_cap <= 100_000:
            raise InvalidArgument("metrics_label_cap", self.metrics_label_cap, "1..100000")
        if not 0 <= self.cache_mb <= 65536:
            raise InvalidArgument("cache_mb", self.cache_mb, "0..65536 MiB")
        if not self.data_dir.strip():  # "" put the store in whatever directory it started in
            raise InvalidArgument("data_dir", self.data_dir, "a directory path")
        if not 1 <= self.commit_timeout_s <= 3600:
            raise InvalidArgument("commit_timeout_s", self.commit_timeout_s, "1..3600 s")
        if not 0 <= self.grace_s <= 3600:
            raise InvalidArgument("grace_s", self.grace_s, "0..3600 s")
        if not 0 <= self.broadcast_idle_s <= 2_592_000:
            raise InvalidArgument("broadcast_idle_s", self.broadcast_idle_s, "0..2592000 s")
        if bool(self.tls_cert) != bool(self.tls_key):
            raise InvalidArgument("tls_key", self.tls_key, "tls_cert and tls_key together")
        if self.principals and not self.tokens_file:
            raise InvalidArgument("principals", "[...]", "only with tokens_file (the principals "
                                  "it names get these permissions)")
        if self.tls_client_ca and not self.tls_cert:
            raise InvalidArgument("tls_client_ca", self.tls_client_ca, "only with tls_cert")
        if self.tracing_protocol not in TRACING_PROTOCOLS:
            raise InvalidArgument("tracing_protocol", self.tracing_protocol,
                                  ", ".join(TRACING_PROTOCOLS))
        if not 0 <= self.tracing_sample_ratio <= 1:
            raise InvalidArgument("tracing_sample_ratio", self.tracing_sample_ratio, "0..1")
        if self.tracing_endpoint and not http_url(self.tracing_endpoint):
            raise InvalidArgument("tracing_endpoint", self.tracing_endpoint,
                                  "an http:// or https:// URL with a host (and a port in "
                                  "1..65535)")
        if not _usable_id(self.tracing_service_name):  # no control characters, as gateway_id
            raise InvalidArgument("tracing_service_name", self.tracing_service_name,
                                  "1..255 bytes (UTF-8) of printable characters")
        if self.log_level not in ("debug", "info", "warning", "error"):
            raise InvalidArgument("log_level", self.log_level, "debug, info, warning, error")

    @property
    def groups_per_principal(self) -> int:
        """`max_groups_per_principal`, or for 0 its default: half of `max_groups` (rounded up)
        with a tokens file, so one client holding its groups in use leaves the other half to the
        rest; `max_groups` without one, where every caller is the one anonymous principal."""
        if self.max_groups_per_principal:
            return self.max_groups_per_principal
        return (self.max_groups + 1) // 2 if self.tokens_file else self.max_groups

    @property
    def topics_per_principal(self) -> int:
        """`max_topics_per_principal`, or for 0 its default (as `groups_per_principal`)."""
        return self._share(self.max_topics_per_principal, self.max_topics)

    @property
    def stored_groups_per_principal(self) -> int:
        """`max_stored_groups_per_principal`, or for 0 its default (as
        `groups_per_principal`)."""
        return self._share(self.max_stored_groups_per_principal, self.max_stored_groups)

    def _share(self, given: int, whole: int) -> int:
        return given or ((whole + 1) // 2 if self.tokens_file else whole)

    def listeners(self) -> Iterator[tuple[str, str]]:
        """(setting key, address) of every listener, the products' included ("" when off)."""
        for name in LISTENERS:
            yield name, getattr(self, name)
        for section in self.sections.values():
            for spec in settings_of(type(section)):
                if spec.setting.listener:
                    yield spec.key, str(getattr(section, spec.key))

    def section(self, product: Product[S]) -> S:
        """The product's settings (its defaults when this config was built without them)."""
        value = self.sections.get(product.name)
        if value is None:
            return product.config_type()
        if not isinstance(value, product.config_type):
            raise TypeError(f"section {product.name!r} is a {type(value).__name__}, not a "
                            f"{product.config_type.__name__}")
        return value

    def value(self, key: str) -> object:
        """A setting by its flat key (`listen`, or a product's such as `pulsar_listen`)."""
        if key in _OWN_KINDS:
            return getattr(self, key)
        for section in self.sections.values():
            if any(spec.key == key for spec in settings_of(type(section))):
                return getattr(section, key)
        raise KeyError(key)


TRACING_PROTOCOLS = ("grpc", "http/protobuf")
LISTENERS = ("listen", "admin_listen", "console_listen")
"""The gateway's own listeners; products declare theirs (`setting(listener=True)`). RocketMQ
SDKs, for one, share the gRPC `listen` port."""


def check_listener(field: str, address: str, config: ServeConfig) -> tuple[str, int]:
    """(host, port) of a listener; without a tokens file it must be a loopback address unless
    `allow_remote_unauthenticated` is set. The one rule for every listener."""
    host, port = host_port(field, address)
    if not config.tokens_file and not config.allow_remote_unauthenticated and not loopback(host):
        raise InvalidArgument(
            field, address,
            "a loopback address (127.0.0.0/8, ::1, localhost) while no tokens_file is "
            "configured (set allow_remote_unauthenticated to listen elsewhere without auth)",
        )
    return host, port


def default_gateway_id() -> str:
    """The host name, or `gateway` where it has none a gateway id may be."""
    name = socket.gethostname()
    return name if _usable_id(name) else "gateway"


def _usable_id(name: str) -> bool:
    """1..MAX_NAME_BYTES bytes of printable UTF-8, not only blanks (a gateway id)."""
    return bool(name.strip()) and name.isprintable() and not too_long(name, MAX_NAME_BYTES)


_TYPES: dict[str, object] = {"str": str, "int": int, "float": float, "bool": bool}
_OWN_KINDS: dict[str, object] = {
    f.name: _TYPES.get(str(f.type), PRINCIPALS) for f in fields(ServeConfig)
    if f.name != "sections"
}


def other_backends_settings(products: Sequence[AnyProduct], backend: str) -> dict[str, str]:
    """The settings of back ends other than `backend`, by flat key, each with the back end it
    serves: a product setting in a TOML section named after one of its back ends
    (`[B] key`)."""
    out: dict[str, str] = {}
    for product in products:
        for spec in settings_of(product.config_type):
            section = spec.setting.toml.partition(".")[0]
            if section in product.backends and section != backend:
                out[spec.key] = section
    return out


def backends(products: Sequence[AnyProduct]) -> tuple[str, ...]:
    """Every back end name `backend` may take: the embedded store's, then the products'."""
    return (EMBEDDED, *(name for product in products for name in product.backends))


def build(values: Mapping[str, Any], products: Sequence[AnyProduct] | None = None) -> ServeConfig:
    """A config from flat keys, the gateway's and the products' (text is converted as from the
    environment); every product gets its section. An unknown key is a TypeError (a caller's
    mistake, not a user's: users' keys go through `load`)."""
    products = installed() if products is None else products
    keys = keys_of(products, _OWN_KINDS)
    own: dict[str, Any] = {}
    by_product: dict[str, dict[str, Any]] = {product.name: {} for product in products}
    for name, value in values.items():
        if name not in keys.kinds:
            raise TypeError(f"unknown setting {name!r}")
        coerced = coerce(name, value, keys.kinds[name])
        if name in keys.owners:
            by_product[keys.owners[name]][name] = coerced
        else:
            own[name] = coerced
    allowed = backends(products)
    if own.get("backend", EMBEDDED) not in allowed:
        raise InvalidArgument("backend", own["backend"], "one of " + ", ".join(allowed))
    sections = {p.name: p.config_type(**by_product[p.name]) for p in products}
    return ServeConfig(**own, sections=sections)


def load(
    path: str | None = None,
    env: Mapping[str, str] | None = None,
    flags: Mapping[str, Any] | None = None,
    products: Sequence[AnyProduct] | None = None,
) -> ServeConfig:
    """The configuration from a TOML file, the environment and flags (see the module doc)."""
    products = installed() if products is None else products
    keys = keys_of(products, _OWN_KINDS)
    values: dict[str, Any] = {}
    if path is not None:  # `--config ""` (an unset variable) ran on defaults, unsaid
        values.update(flatten(read_toml("config", path, "TOML file"), keys))
    environ = os.environ if env is None else env
    from_env: set[str] = set()
    for name in keys.kinds:
        key = env_name(name)
        if key in environ:
            values[name] = environ[key]
            from_env.add(name)
    for name, value in (flags or {}).items():
        if value is not None:
            values[name] = value
            from_env.discard(name)
    try:
        _refuse_empty_guards(values)
        return build(values, products)
    except InvalidArgument as exc:
        if exc.field in from_env:  # name the variable the user set, not the internal key
            raise InvalidArgument(env_name(exc.field), exc.value, exc.allowed) from None
        raise


GUARDS = ("tokens_file", "tls_cert", "tls_key", "tls_client_ca")
"""Settings that turn a protection on: set to an empty value (`--tokens-file "$UNSET"`, an
empty `GATEWAY_TLS_CERT` in a manifest) each turned it off without a word."""


def _refuse_empty_guards(values: Mapping[str, Any]) -> None:
    for name in GUARDS:
        if name in values and isinstance(values[name], str) and not values[name].strip():
            raise InvalidArgument(name, values[name], "a file path (leave the setting out to "
                                  "serve without it)")


def env_name(key: str) -> str:
    """The environment variable of a setting's flat key: `GATEWAY_<KEY>`."""
    return f"GATEWAY_{key.upper()}"


COMMAND_VARIABLES = frozenset({"GATEWAY_TOKEN", "GATEWAY_TARGET", "GATEWAY_FROM_TOKEN",
                               "GATEWAY_TO_TOKEN"})
"""`GATEWAY_*` variables of the `gateway` commands (not settings of `serve`)."""


def unknown_env(environ: Mapping[str, str],
                products: Sequence[AnyProduct] | None = None) -> list[tuple[str, str | None]]:
    """The `GATEWAY_*` variables in `environ` that are no setting (a typo is otherwise ignored
    without a word), sorted, each with the setting's variable it most likely meant (or None)."""
    known = {env_name(name) for name in keys_of(installed() if products is None
                                                  else products, _OWN_KINDS).kinds}
    out: list[tuple[str, str | None]] = []
    allowed = known | COMMAND_VARIABLES
    for name in sorted(environ):
        if name.startswith("GATEWAY_") and name not in allowed:
            close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.8)
            out.append((name, close[0] if close else None))
    return out
