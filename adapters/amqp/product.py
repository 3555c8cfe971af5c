"""The AMQP product: the RabbitMQ dialect and naming scheme, and the RabbitMQ back end.

The back end needs aio-pika and aiormq (the `rabbitmq` extra); `--backend rabbitmq` without them
is refused with one sentence naming the extra. This module imports without them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from adapters.amqp import dialect
from gateway.core.registry import Registry
from gateway.product import OptionFlag, Product, setting

if TYPE_CHECKING:
    from gateway.backend import Backend
    from gateway.engine.clock import Clock


@dataclass(frozen=True, slots=True)
class AMQPConfig:
    """`[rabbitmq]` in the TOML file."""

    rabbitmq_url: str = setting("amqp://guest:guest@127.0.0.1:5672/", toml="rabbitmq.url",
                                flag="--rabbitmq-url")
    """The broker of `--backend rabbitmq`."""


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

    def register(self, registry: Registry) -> None:
        dialect.register(registry)

    def open_backend(self, name: str, config: AMQPConfig, clock: Clock) -> Backend:
        self.require("rabbitmq back end", {"aio_pika": "aio-pika", "aiormq": "aiormq"})
        from adapters.amqp.backend import RabbitMQBackend

        return RabbitMQBackend(config.rabbitmq_url, clock=clock)


PRODUCT = AMQP()
"""The object the `retry_gateway.products` entry point names."""
