"""RabbitMQ names: the retry queue, the dead-letter exchange and the dead-letter queue.

Templates take `{topic}` (the queue) and `{group}`; `rabbitmq_scheme()` builds one from config.
"""

from __future__ import annotations

from gateway.core.naming import NamingScheme, check_template

DEFAULT_RETRY = "{topic}.retry"
DEFAULT_DLX = "{topic}.dlx"
DEFAULT_DLQ = "{topic}.dlq"
DLX_KEY = "dead_letter_exchange"


def rabbitmq_scheme(
    retry_queue: str = DEFAULT_RETRY,
    dead_letter_exchange: str = DEFAULT_DLX,
    dead_letter_queue: str = DEFAULT_DLQ,
) -> NamingScheme:
    return NamingScheme(
        "rabbitmq",
        check_template("naming.rabbitmq.retry_queue", retry_queue),
        check_template("naming.rabbitmq.dead_letter_queue", dead_letter_queue),
        ((DLX_KEY, check_template("naming.rabbitmq.dead_letter_exchange", dead_letter_exchange)),),
    )


RABBITMQ = rabbitmq_scheme()
