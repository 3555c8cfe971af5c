"""The product seam: what one product package offers the gateway.

A product (a broker family whose clients and semantics the gateway speaks) lives in one package
under `adapters/` and offers one `Product` object, found through the Python entry point group
`retry_gateway.products` (one line per product in pyproject.toml). The gateway names no product:
the composition root, the configuration loader and the CLI loop over `installed()`.

What a product offers (everything but `name`, `extra` and `register` is optional):

* `register(registry)`: its dialects, retry policies and naming schemes;
* `config_type`: a frozen dataclass, its section of the configuration. Each field is one setting,
  declared with `setting()`: the field name is the setting's flat key (environment variable
  `GATEWAY_<KEY>`, keyword of `running_gateway`), `toml` its place in the TOML file and `flag` its
  `gateway serve` flag. Keys nobody declares are refused;
* `backends` and `open_backend()`: back ends `--backend NAME` selects (the embedded store is the
  gateway's own);
* `front_end()`: a running front end (`FrontEnd`), mounted on the gateway's gRPC server or
  listening on its own;
* `principal_fields`: extra keys a `[[principal]]` of the tokens file may carry, read back with
  `Principal.extra(key)`;
* `plan_flags`: `gateway plan` flags that set one of its policies' options;
* `migration_schemes`, `migration_ports`, `migration_path()` and `migration_side()`: the URL
  schemes (their default ports, their paths spelled one way) of the brokers `gateway migrate
  copy` can copy from and to through it (a queue, a topic and subscription).

The product module must import without the product's optional dependencies (the pip extra
`extra`): it imports them where it uses them, after `require()` has named what is missing.
"""

from __future__ import annotations

import functools
import importlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping
from dataclasses import MISSING, dataclass, field, fields, is_dataclass
from importlib.metadata import entry_points
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from gateway.core.naming import custom_scheme
from gateway.core.registry import Registry
from gateway.errors import MissingExtra

if TYPE_CHECKING:
    import ssl

    import grpc

    from gateway.backend import Backend
    from gateway.engine.clock import Clock
    from gateway.engine.port import EnginePort, EngineQueries
    from gateway.limits import StreamSlots
    from gateway.migrate.endpoint import Destination, Source, Url
    from gateway.server.auth import Authorizer

DISTRIBUTION = "retry-gateway"
"""The distribution whose extras bring a product's optional dependencies."""
ENTRY_POINT_GROUP = "retry_gateway.products"
"""Entry point group naming each installed product (`name = "package.module:OBJECT"`)."""

T = TypeVar("T")
S = TypeVar("S")
_SETTING = "retry_gateway.setting"


@dataclass(frozen=True, slots=True)
class Setting:
    """How one field of a product's `config_type` is set (see `setting`)."""

    toml: str
    """`section.key` in the TOML file (a section may be shared, e.g. `server.pulsar_listen`)."""
    flag: str = ""
    """The `gateway serve` flag (`--pulsar-listen`); "" for none."""
    help: str = ""
    """The flag's help text."""
    listener: bool = False
    """An address the gateway listens on: loopback only while no tokens file is configured."""
    allowed: str = ""
    """What a value of the wrong shape should have been, for the error (lists of names)."""


def setting(default: T, *, toml: str, flag: str = "", help: str = "",
            listener: bool = False, allowed: str = "") -> T:
    """A field of a product's config dataclass that is a gateway setting. Its type follows its
    default: str, int, float, bool, or a tuple of str (a TOML list; comma-separated in the
    environment)."""
    section, dot, key = toml.partition(".")
    if not (section and dot and key):
        raise ValueError(f"setting toml={toml!r}: expected SECTION.KEY")
    meta = Setting(toml=toml, flag=flag, help=help, listener=listener, allowed=allowed)
    value: T = field(default=default, metadata={_SETTING: meta})
    return value


@dataclass(frozen=True, slots=True)
class SettingSpec:
    """One product setting, as the configuration loader and the CLI see it."""

    key: str
    """The flat key: field name, `GATEWAY_<KEY>` and keyword of `running_gateway`."""
    kind: type
    """str, int, float, bool or tuple (of str)."""
    default: object
    setting: Setting


def settings_of(config_type: type) -> tuple[SettingSpec, ...]:
    """The settings a product's config dataclass declares, in field order."""
    if not is_dataclass(config_type):
        raise TypeError(f"{config_type!r}: a product's config_type must be a dataclass")
    specs: list[SettingSpec] = []
    for f in fields(config_type):
        meta = f.metadata.get(_SETTING)
        if not isinstance(meta, Setting):
            continue
        if f.default is MISSING:
            raise TypeError(f"{config_type.__name__}.{f.name}: a setting needs a default")
        kind = next(k for k in (bool, int, float, str, tuple) if isinstance(f.default, k))
        specs.append(SettingSpec(f.name, kind, f.default, meta))
    return tuple(specs)


@dataclass(frozen=True, slots=True)
class OptionFlag:
    """A `gateway plan` flag that sets one policy option (`--suspend-ms` -> `suspend_ms`)."""

    flag: str
    option: str
    help: str = ""
    switch: bool = False
    """A flag without a value: given, it sets the option to "true"."""


class FrontEnd(Protocol):
    """A product's front end as the composition root drives it."""

    def mount(self, server: grpc.aio.Server) -> Iterable[str]:
        """Add its services to the gateway's gRPC server (called before the server starts)
        and return their full names, which reflection lists; a front end with a listener of
        its own adds nothing and returns ()."""
        ...

    async def start(self) -> None:
        """Start serving (after the gRPC server started): bind its own listener, if any."""
        ...

    async def stop(self) -> None:
        """Stop serving and close every connection (the engine is still open)."""
        ...


class OwnServer(Protocol):
    """A protocol server on a listener of its own (bound by `start`)."""

    @property
    def port(self) -> int: ...

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


class OwnListener:
    """A `FrontEnd` that serves on a listener of its own: it mounts nothing on the gRPC server
    and starts and stops its server with the gateway."""

    def __init__(self, server: OwnServer) -> None:
        self.front = server

    @property
    def port(self) -> int:
        """The bound port (after `start`)."""
        return self.front.port

    def mount(self, server: grpc.aio.Server) -> tuple[str, ...]:
        """Nothing to mount: it listens on its own."""
        return ()

    async def start(self) -> None:
        await self.front.start()

    async def stop(self) -> None:
        await self.front.stop()


ListenerCheck = Callable[[str, str], tuple[str, int]]
"""(setting key, HOST:PORT) -> (host, port), refusing what the gateway's listener rule refuses
(a non-loopback address while no tokens file is configured)."""


@dataclass(frozen=True, slots=True)
class Host:
    """What the composition root offers a product's front end."""

    engine: EnginePort
    authorizer: Authorizer | None
    """Who may do what; None while authentication is off."""
    max_message_bytes: int
    """The largest message body the engine accepts."""
    listener: ListenerCheck
    settings: object | None = None
    """Settings a caller (a test) gave for this product's front end, replacing those the
    product builds from its config section; the product checks their type."""
    queries: EngineQueries | None = None
    """Read-only views and admin verbs (a front end whose protocol shows queue depths or
    purges a queue)."""
    data_dir: str = ""
    """The gateway's data directory; a front end that keeps state of its own uses
    `DATA_DIR/<product>/`."""
    stream_slots: StreamSlots | None = None
    """The gRPC server's bound on streams no credentials admitted, for a front end mounted
    on it that holds a refused stream open a moment (to read its first frame)."""
    tls: ssl.SSLContext | None = None
    """The server TLS context of `--tls-cert` / `--tls-key` (and `--tls-client-ca`: client
    certificates required), for a front end on a listener of its own; None without TLS."""


class Product(ABC, Generic[S]):
    """One product package's offer to the gateway; `S` is its config section's type."""

    name: str
    """Short name: the key of its front end in `GatewayApp.front_ends` (`rocketmq`)."""
    extra: str
    """The pip extra of `retry-gateway` that brings its optional dependencies."""
    config_type: type[S]
    """A frozen dataclass whose `setting()` fields are its settings; built from defaults when a
    configuration does not mention the product."""
    backends: tuple[str, ...] = ()
    """Back-end names `--backend` may select (`open_backend` builds them)."""
    principal_fields: tuple[str, ...] = ()
    """Keys a `[[principal]]` may carry for this product (string values)."""
    plan_flags: tuple[OptionFlag, ...] = ()
    migration_schemes: tuple[str, ...] = ()
    """URL schemes of the `gateway migrate copy` sides it offers (`migration_side`)."""
    migration_ports: Mapping[str, int] = MappingProxyType({})
    """The port a URL of each of its `migration_schemes` means when it names none: its side's
    ledger name writes it, and `migrate copy` uses it to refuse a copy onto itself."""

    @abstractmethod
    def register(self, registry: Registry) -> None:
        """Add its dialects, policies and naming schemes."""

    def open_backend(self, name: str, config: S, clock: Clock) -> Backend:
        """The back end `name` (one of `backends`); `require()` its dependencies first."""
        raise NotImplementedError(f"{self.name} offers no back end {name!r}")

    def front_end(self, host: Host, config: S) -> FrontEnd | None:
        """Its front end for this configuration, not yet mounted or started; None when the
        configuration leaves it off. Called before anything starts: refuse bad settings and
        missing dependencies here."""
        return None

    def migration_side(self, url: Url, role: str, timeout_s: float = 30.0) -> Source | Destination:
        """The copy source (`role` "source") or destination ("destination") that `url`, of one
        of its `migration_schemes`, names; not opened yet; one call to the broker gives up after
        `timeout_s` (`--timeout-s`). `require()` its dependencies first;
        refuse a URL it cannot use with `InvalidArgument`."""
        raise NotImplementedError(f"{self.name} offers no migration side {url.scheme!r}")

    def migration_path(self, url: Url) -> str:
        """What the path of a URL of one of its `migration_schemes` names, spelled one way (a
        virtual host, a full topic name), for refusing a copy onto itself. Default: the path,
        percent-decoded."""
        return url.path

    def require(self, what: str, modules: Mapping[str, str]) -> None:
        """Raise MissingExtra naming the extra to install unless every module (import name ->
        distribution name) imports."""
        missing = [dist for module, dist in modules.items() if not importable(module)]
        if missing:
            raise MissingExtra(f"the {what} needs {' and '.join(missing)}: "
                               f"pip install '{DISTRIBUTION}[{self.extra}]'")


def importable(module: str) -> bool:
    """Whether `module` imports (an optional dependency is installed)."""
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True


AnyProduct = Product[Any]
"""A product of any config type, as the composition root holds them."""


@functools.cache
def installed() -> tuple[AnyProduct, ...]:
    """Every product the installed distributions declare, sorted by name."""
    found: dict[str, AnyProduct] = {}
    for point in entry_points(group=ENTRY_POINT_GROUP):
        product = point.load()
        if not isinstance(product, Product):
            raise TypeError(f"entry point {point.name} = {point.value}: not a Product")
        known = found.setdefault(product.name, product)
        if known is not product:
            raise TypeError(f"two products are named {product.name!r}")
    return tuple(found[name] for name in sorted(found))


def build_registry(
    products: Iterable[AnyProduct], custom: Mapping[str, tuple[str, str]] | None = None
) -> Registry:
    """A registry with every product's dialects, plus custom naming schemes by name
    (name -> (retry template, dead-letter template))."""
    registry = Registry()
    for product in products:
        product.register(registry)
    for name, (retry, dead_letter) in (custom or {}).items():
        registry.add_scheme(custom_scheme(retry, dead_letter, name))
    return registry
