"""Gateway topic names as AMQP queue and exchange names, reversibly.

AMQP clients accept names of letters, digits and `-_.:@#,/+ ` only, while gateway topics come
from every product (RocketMQ's `%RETRY%group`, `%DLQ%group`). A name made of the safe characters
other than `+` is used as-is, so plain clients see `orders` and `orders.dlq` unchanged; every
other character becomes `+XX` per UTF-8 byte (`%DLQ%g1` -> `+25DLQ+25g1`). RabbitMQ refuses to
declare a name that begins with `amq.` (403 ACCESS_REFUSED, a reserved prefix), so there that
dot is written `+2E`: the AMQP front end's server-named queue `amq.gen-X` is the broker's queue
`amq+2Egen-X`.
"""

from __future__ import annotations

import re
import string
from functools import lru_cache

from gateway.errors import InvalidArgument

ESCAPE = "+"
RESERVED = "amq."
"""The prefix RabbitMQ keeps for its own queues and exchanges."""
SAFE = frozenset(string.ascii_letters + string.digits + "-_.:@#,/ ")
MAX_NAME_BYTES = 255
_ESCAPED = re.compile(r"\+([0-9A-F]{2})")


@lru_cache(maxsize=4096)
def queue_name(topic: str) -> str:
    """The AMQP name of `topic` (queues, and exchanges derived from topic names)."""
    if all(c in SAFE for c in topic):
        name = topic
    else:
        name = "".join(
            c if c in SAFE else "".join(f"{ESCAPE}{b:02X}" for b in c.encode()) for c in topic
        )
    if name.startswith(RESERVED):
        name = f"amq{ESCAPE}2E{name[len(RESERVED):]}"
    if len(name.encode()) > MAX_NAME_BYTES:
        raise InvalidArgument("topic", topic, f"at most {MAX_NAME_BYTES} bytes as an AMQP name")
    return name


def topic_name(queue: str) -> str:
    """The gateway topic an AMQP name stands for (inverse of `queue_name`)."""
    if ESCAPE not in queue:
        return queue
    out = bytearray()
    index = 0
    while index < len(queue):
        escaped = _ESCAPED.match(queue, index)
        if escaped is not None:
            out.append(int(escaped.group(1), 16))
            index = escaped.end()
        else:
            out += queue[index].encode()
            index += 1
    return out.decode(errors="replace")
