"""The Pulsar product: its dialect and naming schemes, the Pulsar back end and the Pulsar
binary-protocol front end (a listener of its own).

The back end needs pulsar-client, the front end crc32c and cramjam (all in the `pulsar`
extra); asking for either without them is refused with one sentence naming the extra. This module
imports without them.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING

from adapters.pulsar import dialect
from adapters.pulsar.backend_codec import pulsar_topic
from adapters.pulsar.service_url import check_advertised_url
from gateway.core.registry import Registry
from gateway.product import FrontEnd, Host, OptionFlag, OwnListener, Product, setting
from gateway.token_file import check_secret

if TYPE_CHECKING:
    from gateway.backend import Backend
    from gateway.engine.clock import Clock
    from gateway.migrate.endpoint import Destination, Source, Url


MIGRATION_PORTS = MappingProxyType({"pulsar": 6650, "pulsar+ssl": 6651})
"""The port a `pulsar://` or `pulsar+ssl://` URL without one means."""


@dataclass(frozen=True, slots=True)
class PulsarConfig:
    """`[pulsar]` in the TOML file, and the front end's keys in `[server]`."""

    pulsar_listen: str = setting(
        "", toml="server.pulsar_listen", flag="--pulsar-listen", listener=True,
        help="serve Pulsar's binary protocol on HOST:PORT (e.g. 127.0.0.1:6650)")
    """Pulsar binary protocol front end address; "" leaves it off."""
    pulsar_advertised: str = setting("", toml="server.pulsar_advertised")
    """The service URL lookups point clients at; "" for pulsar://HOST:PORT of the listener."""
    pulsar_service_url: str = setting(
        "", toml="pulsar.service_url", flag="--pulsar-service-url",
        help="--backend pulsar: the cluster's pulsar:// or pulsar+ssl:// URL (refused without "
             "--backend pulsar)")
    """The Pulsar cluster of `--backend pulsar`."""
    pulsar_token: str = setting("", toml="pulsar.token")

    def __post_init__(self) -> None:
        check_secret("pulsar_token", self.pulsar_token)
        if self.pulsar_advertised:
            check_advertised_url(self.pulsar_advertised)


class Pulsar(Product[PulsarConfig]):
    name = "pulsar"
    extra = "pulsar"
    config_type = PulsarConfig
    backends = ("pulsar",)
    plan_flags = (
        OptionFlag("--subscription-type", "subscription_type",
                   "pulsar: shared, key_shared, exclusive, failover"),
        OptionFlag("--nack-delay-ms", "nack_delay_ms", "pulsar-nack redelivery delay"),
        OptionFlag("--ack-timeout-ms", "ack_timeout_ms", "pulsar ack timeout"),
    )
    migration_schemes = ("pulsar", "pulsar+ssl")
    migration_ports = MIGRATION_PORTS

    def migration_side(self, url: Url, role: str, timeout_s: float = 30.0) -> Source | Destination:
        self.require("pulsar topic side of migrate copy", {"pulsar": "pulsar-client"})
        from adapters.pulsar.migrate import side

        return side(url, role, timeout_s)

    def migration_path(self, url: Url) -> str:
        return pulsar_topic(url.path)  # `orders` is persistent://public/default/orders

    def register(self, registry: Registry) -> None:
        dialect.register(registry)

    def open_backend(self, name: str, config: PulsarConfig, clock: Clock) -> Backend:
        self.require("pulsar back end", {"pulsar": "pulsar-client"})
        from adapters.pulsar.backend import PulsarBackend

        return PulsarBackend(config.pulsar_service_url, token=config.pulsar_token, clock=clock)

    def front_end(self, host: Host, config: PulsarConfig) -> FrontEnd | None:
        if not config.pulsar_listen:
            return None
        self.require("pulsar front end", {"crc32c": "crc32c", "cramjam": "cramjam"})
        from adapters.pulsar.frontend import PulsarFrontEnd

        address, port = host.listener("pulsar_listen", config.pulsar_listen)
        return OwnListener(PulsarFrontEnd(
            host.engine, address, port, advertised_url=config.pulsar_advertised or None,
            max_message_size=host.max_message_bytes, authorizer=host.authorizer,
            state_dir=f"{host.data_dir}/pulsar" if host.data_dir else None, tls=host.tls,
            queries=host.queries))


PRODUCT = Pulsar()
"""The object the `retry_gateway.products` entry point names."""
