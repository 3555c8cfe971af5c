"""RabbitMQ names: the retry queue, the dead-letter exchange and the dead-letter queue.

Templates take `{topic}` (the queue) and `{group}`; `rabbitmq_scheme()` builds one from config.
The dead-letter exchange template takes `{topic}` only: it is a property of the queue, shared by
every consumer of it, and the RabbitMQ back end derives it from the queue alone.
"""

from __future__ import annotations

from gateway.core.naming import NamingScheme, check_template
from gateway.errors import InvalidArgument

DEFAULT_RETRY = "{topic}.retry"
DEFAULT_DLX = "{topic}.dlx"
DEFAULT_DLQ = "{topic}.dlq"
DLX_KEY = "dead_letter_exchange"


def rabbitmq_scheme(
    retry_queue: str = DEFAULT_RETRY,
    dead_letter_exchange: str = DEFAULT_DLX,
    dead_letter_queue: str = DEFAULT_DLQ,
) -> NamingScheme:
    if "{group}" in dead_letter_exchange:
        raise InvalidArgument(
            "naming.rabbitmq.dead_letter_exchange", dead_letter_exchange, "{topic} only, no {group}"
        )
    return NamingScheme(
        "rabbitmq",
        check_template("naming.rabbitmq.retry_queue", retry_queue),
        check_template("naming.rabbitmq.dead_letter_queue", dead_letter_queue),
        ((DLX_KEY, check_template("naming.rabbitmq.dead_letter_exchange", dead_letter_exchange)),),
    )


RABBITMQ = rabbitmq_scheme()


AMQP_FRONT_END = NamingScheme(
    "amqp",
    "amqp-retries/{group}/{topic}",
    "amqp-dead-letters/{group}/{topic}",
    ((DLX_KEY, "amqp-dead-letters/{topic}.dlx"),),
)
"""The names of queues served by the gateway's AMQP 0-9-1 front end. Retries stay in the queue
(document 001: its retry topic is never written); a dead letter goes to the queue's own
dead-letter topic, from which the front end routes it through the queue's dead-letter exchange
(`x-dead-letter-exchange`) to the queues bound there. The dead-letter exchange template only
serves the RabbitMQ back end, which publishes dead letters through an exchange of its own."""


def dead_letter_exchange(scheme: NamingScheme, queue: str) -> str:
    """The dead-letter exchange of `queue` under `scheme`."""
    return scheme.extra(DLX_KEY, queue, "")
