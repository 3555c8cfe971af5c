"""The RocketMQ product: its dialect, its settings and the RocketMQ 5 gRPC front end.

The front end is mounted on the gateway's gRPC server (RocketMQ 5 SDKs dial the gateway's
`listen` address). It needs the SDK's protocol modules (the `rocketmq` extra); without them the
gateway serves on and says so once in its log. This module imports without them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import structlog

from adapters.rocketmq import dialect
from gateway.core.registry import Registry
from gateway.errors import InvalidArgument
from gateway.product import FrontEnd, Host, OptionFlag, Product, setting
from gateway.token_file import check_secret

if TYPE_CHECKING:
    import grpc

    from adapters.rocketmq.frontend import FrontendSettings, MessagingService
    from gateway.engine.port import EnginePort
    from gateway.limits import StreamSlots

log = structlog.get_logger("gateway.server")

SDK_MODULES = {"rocketmq.grpc_protocol": "rocketmq-python-client"}
ACCESS_KEY = "rocketmq_access_key"
SECRET_KEY = "rocketmq_secret_key"
CHECK_SECONDS = (dialect.INVISIBLE_RANGE_MS[0] // 1000, dialect.INVISIBLE_RANGE_MS[1] // 1000)
"""Transaction check times: the checker is a simple consumer, held to its invisible range."""
MAX_CHECKS = 1000


@dataclass(frozen=True, slots=True)
class RocketMQConfig:
    """`[rocketmq]` in the TOML file."""

    rocketmq_access_key: str = setting("", toml="rocketmq.access_key")
    """With `rocketmq_secret_key`: the one key pair SDKs sign with while auth is off."""
    rocketmq_secret_key: str = setting("", toml="rocketmq.secret_key")
    rocketmq_advertised: str = setting("", toml="rocketmq.advertised")
    """host:port RocketMQ SDKs are told to connect to; "" echoes the address they dialled."""
    rocketmq_fifo_groups: tuple[str, ...] = setting(
        (), toml="rocketmq.fifo_groups", allowed="a list of group names")
    """Consumer groups that consume in order (RocketMQ keeps this on the group)."""
    rocketmq_transaction_check_first_s: int = setting(
        10, toml="rocketmq.transaction_check_first_s")
    """Seconds after a transactional send that a producer is first asked about a transaction
    it has not ended (10..43200; a message's own recovery duration, if longer, wins)."""
    rocketmq_transaction_check_interval_s: int = setting(
        60, toml="rocketmq.transaction_check_interval_s")
    """Seconds between further checks of a transaction still open (10..43200)."""
    rocketmq_transaction_check_max: int = setting(15, toml="rocketmq.transaction_check_max")
    """Checks before an open transaction's half message is dead-lettered (1..1000)."""

    def __post_init__(self) -> None:
        for key in ("rocketmq_transaction_check_first_s", "rocketmq_transaction_check_interval_s"):
            seconds = getattr(self, key)
            if not CHECK_SECONDS[0] <= seconds <= CHECK_SECONDS[1]:
                raise InvalidArgument(key, seconds, f"{CHECK_SECONDS[0]}..{CHECK_SECONDS[1]} s")
        if not 1 <= self.rocketmq_transaction_check_max <= MAX_CHECKS:
            raise InvalidArgument("rocketmq_transaction_check_max",
                                  self.rocketmq_transaction_check_max, f"1..{MAX_CHECKS}")
        check_keys(ACCESS_KEY, self.rocketmq_access_key, SECRET_KEY, self.rocketmq_secret_key)
        # Half a pair turned nothing on: a secret key alone left signatures unchecked.
        for given, missing in ((self.rocketmq_secret_key, ACCESS_KEY),
                               (self.rocketmq_access_key, SECRET_KEY)):
            if given and not (self.rocketmq_access_key and self.rocketmq_secret_key):
                other = SECRET_KEY if missing == ACCESS_KEY else ACCESS_KEY
                raise InvalidArgument(missing, "", f"non-empty, given with {other} (the two "
                                                   "turn on signature checks together)")


def check_keys(access_field: str, access_key: str, secret_field: str, secret_key: str) -> None:
    """A key pair's characters: each a secret's (`check_secret`); the access key travels in
    the signature header as `Credential=AK,`, so it has no comma and no blank either."""
    check_secret(secret_field, secret_key)
    check_secret(access_field, access_key)
    if "," in access_key or " " in access_key:
        raise InvalidArgument(access_field, "***", "printable ASCII without a blank or comma "
                                                   "(it is sent as Credential=KEY,)")


class RocketMQFrontEnd:
    """The RocketMQ 5 service on the gateway's gRPC server."""

    def __init__(self, engine: EnginePort, settings: FrontendSettings,
                 stream_slots: StreamSlots | None = None) -> None:
        self.settings = settings
        """The settings in use."""
        self.service: MessagingService | None = None
        """The servicer, once mounted."""
        self._engine = engine
        self._stream_slots = stream_slots

    def mount(self, server: grpc.aio.Server) -> tuple[str, ...]:
        from adapters.rocketmq.frontend import SERVICE_NAMES, register

        self.service = register(server, self._engine, self.settings, self._stream_slots)
        return SERVICE_NAMES

    async def start(self) -> None:
        """Start checking transactions left open (it serves when the gRPC server does)."""
        if self.service is not None:
            await self.service.start()

    async def stop(self) -> None:
        if self.service is not None:
            await self.service.close()


class RocketMQ(Product[RocketMQConfig]):
    name = "rocketmq"
    extra = "rocketmq"
    config_type = RocketMQConfig
    principal_fields = (ACCESS_KEY, SECRET_KEY)
    """RocketMQ SDKs sign with an access key and secret instead of a bearer token."""
    plan_flags = (
        OptionFlag("--suspend-ms", "suspend_ms", "rocketmq-orderly suspendTimeMillis"),
        OptionFlag("--version", "version", "rocketmq client generation: 4 or 5"),
        OptionFlag("--broadcast", "broadcast", "rocketmq broadcasting mode", switch=True),
        OptionFlag("--ordered", "ordered", "rocketmq-http ordered messages", switch=True),
    )

    def register(self, registry: Registry) -> None:
        dialect.register(registry)

    def front_end(self, host: Host, config: RocketMQConfig) -> FrontEnd | None:
        from gateway.product import importable

        if not all(importable(module) for module in SDK_MODULES):
            log.info("rocketmq front end not available: install retry-gateway[rocketmq]")
            return None
        from adapters.rocketmq.frontend import FrontendSettings

        settings = host.settings
        if settings is None:
            settings = self._settings(host, config)
        elif not isinstance(settings, FrontendSettings):
            raise TypeError(f"rocketmq front end settings: {type(settings).__name__}, not "
                            "FrontendSettings")
        return RocketMQFrontEnd(host.engine, settings, host.stream_slots)

    @staticmethod
    def _settings(host: Host, config: RocketMQConfig) -> FrontendSettings:
        """From the config section; with a tokens file, SDKs must sign with a principal's keys
        and are held to its permissions like every other listener."""
        from adapters.rocketmq.frontend import FrontendSettings
        from adapters.rocketmq.frontend.settings import CheckTimes, Permissions

        credentials: dict[str, str] | None = None
        if config.rocketmq_access_key:
            credentials = {config.rocketmq_access_key: config.rocketmq_secret_key}
        permissions = None
        if host.authorizer is not None:
            keyed: dict[str, Any] = {}
            for principal in host.authorizer.by_digest.values():
                key = principal.extra(ACCESS_KEY)
                check_keys(f"principal[{principal.name}].{ACCESS_KEY}", key,
                           f"principal[{principal.name}].{SECRET_KEY}", principal.extra(SECRET_KEY))
                if bool(key) != bool(principal.extra(SECRET_KEY)):  # half a pair: as above
                    raise InvalidArgument(
                        f"principal[{principal.name}].{SECRET_KEY if key else ACCESS_KEY}", "",
                        f"non-empty, given with {ACCESS_KEY if key else SECRET_KEY}")
                if key and keyed.setdefault(key, principal) is not principal:
                    # The last one's, silently: the other principal's SDKs were refused.
                    raise InvalidArgument(
                        f"principal[{principal.name}].{ACCESS_KEY}", key,
                        f"an access key no other principal has ({keyed[key].name} has it)")
            credentials = {**(credentials or {}),
                           **{key: p.extra(SECRET_KEY) for key, p in keyed.items()}}
            permissions = Permissions(host.authorizer, keyed)
        return FrontendSettings(
            advertised_endpoint=config.rocketmq_advertised,
            credentials=credentials,
            fifo_groups=frozenset(config.rocketmq_fifo_groups),
            permissions=permissions,
            transaction_check=CheckTimes(
                first_ms=config.rocketmq_transaction_check_first_s * 1000,
                interval_ms=config.rocketmq_transaction_check_interval_s * 1000,
                max_checks=config.rocketmq_transaction_check_max),
        )


PRODUCT = RocketMQ()
"""The object the `retry_gateway.products` entry point names."""
