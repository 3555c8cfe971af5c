"""Pulsar dead letters in `gateway migrate copy` (`adapters.pulsar.migrate`), both ways.

Pulsar's client dead-letters a message by publishing a copy on the subscription's dead-letter
topic (`{topic}-{subscription}-DLQ` from 2.9, `{subscription}-DLQ` in 2.7, `{subscription}-dlq`
in 2.6) once its redeliveries reach `maxRedeliverCount`: the copy carries `REAL_TOPIC` (the
topic it came from), `ORIGIN_MESSAGE_ID` (its id there) and, when it went through
`reconsumeLater`, `RECONSUMETIMES` (its retries). No reason is written: reaching the limit is the
only one.

* Off a dead-letter topic (a source topic named so), each message comes as a dead letter would
  come off a RabbitMQ queue with `x-death`: its Pulsar properties kept, plus the gateway's
  dead-letter reason (`DLQ_REASON`) and time (the copy's publish time), its `ORIGIN_MESSAGE_ID`
  as its id, and its attempt count `RECONSUMETIMES` (else its redelivery count), so that stored
  with `part=dead-letter` it lists (`gateway dlq list`) as the gateway's own dead letters do.
* Onto Pulsar, a gateway dead letter (the dead-letter part of a gateway source) is sent with the
  properties Pulsar's own dead letters carry, where it has none of its own: `REAL_TOPIC` (its
  origin topic), `ORIGIN_MESSAGE_ID` (its id) and `RECONSUMETIMES` (its retries). Its reason has
  no place there and is not sent.
"""

from __future__ import annotations

from collections.abc import Mapping

from gateway.backend.base import OutMessage
from gateway.core.properties import DEAD_AT, DEAD_REASON, ORIGIN_TOPIC, RESERVED_PREFIX
from gateway.limits import MAX_NAME_BYTES

REAL_TOPIC = "REAL_TOPIC"
ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
RECONSUMETIMES = "RECONSUMETIMES"
DLQ_SUFFIXES = ("-DLQ", "-dlq")
DLQ_REASON = "pulsar: maxRedeliverCount reached"
"""The reason a dead letter copied off a Pulsar dead-letter topic is given (Pulsar writes none)."""


def is_dead_letter_topic(topic: str) -> bool:
    """Whether `topic` (a short or full name) is named as a Pulsar dead-letter topic is."""
    return topic.rsplit("/", 1)[-1].endswith(DLQ_SUFFIXES)


def count_of(props: Mapping[str, str]) -> int:
    """`RECONSUMETIMES` as a count; 0 when absent or not a count."""
    try:
        return max(int(props.get(RECONSUMETIMES, "0")), 0)
    except ValueError:
        return 0


def as_dead_letter(out: OutMessage, publish_ms: int) -> OutMessage:
    """A message of a Pulsar dead-letter topic as the gateway's dead letter (module docstring)."""
    props = dict(out.properties)
    props[DEAD_REASON] = DLQ_REASON
    if publish_ms > 0:
        props[DEAD_AT] = str(publish_ms)
    origin_id = props.get(ORIGIN_MESSAGE_ID, "")
    usable = origin_id.isprintable() and len(origin_id.encode()) <= MAX_NAME_BYTES
    return OutMessage(out.body, props, out.key, out.tag, 0,
                      origin_id if usable else out.message_id, out.attempt, out.retries)


def sent_properties(message: OutMessage, dead_letter: bool) -> dict[str, str]:
    """The properties a copy is sent to Pulsar with: the gateway's reserved ones left out, and a
    dead letter given Pulsar's dead-letter properties where it has none of its own."""
    props = {k: v for k, v in message.properties.items() if not k.startswith(RESERVED_PREFIX)}
    if dead_letter:
        origin = message.properties.get(ORIGIN_TOPIC, "")
        if origin:
            props.setdefault(REAL_TOPIC, origin)
        if message.message_id:
            props.setdefault(ORIGIN_MESSAGE_ID, message.message_id)
        if message.retries:
            props.setdefault(RECONSUMETIMES, str(message.retries))
    return props
