"""Gateway message fields as Pulsar message properties, and the one attempt counter.

A message the Pulsar back end publishes carries the gateway's fields as ordinary Pulsar
properties, so native consumers see them and native producers can set them:

* `gateway-id` (the stable message id), `gateway-tag`, `gateway-attempt`, `gateway-retries`,
  `gateway-publish-ms` (first publish time, kept on retry copies) and `gateway-deliver-at` (the
  deliver-at time also given to Pulsar's delayed delivery);
* the key travels as the Pulsar partition key and ordering key, not as a property;
* the engine's own `x-gateway-*` properties (origin topic, dead-letter reason) travel as
  `gateway-x-*`: a gateway front end in front of the topic (the Pulsar front end of another
  gateway) keeps `x-gateway-*` to itself and would drop them.

Everything here is pure: no client, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.backend.base import OutMessage
from gateway.backend.envelope import Envelope
from gateway.core.properties import COUNT_MAX, RESERVED_PREFIX, TIME_MAX_MS, read_count

ID_PROP = "gateway-id"
TAG_PROP = "gateway-tag"
ATTEMPT_PROP = "gateway-attempt"
RETRIES_PROP = "gateway-retries"
PUBLISH_PROP = "gateway-publish-ms"
DELIVER_AT_PROP = "gateway-deliver-at"
CARRIED_PREFIX = "gateway-x-"
OWN_PROPS = frozenset(
    {ID_PROP, TAG_PROP, ATTEMPT_PROP, RETRIES_PROP, PUBLISH_PROP, DELIVER_AT_PROP}
)
DEFAULT_NAMESPACE = "persistent://public/default/"


def pulsar_topic(topic: str) -> str:
    """The fully qualified Pulsar topic of a gateway topic.

    `orders` is `persistent://public/default/orders`; `tenant/ns/orders` is
    `persistent://tenant/ns/orders`; a name with a domain (`persistent://…`) is used as given.
    """
    if "://" in topic:
        return topic
    if "/" in topic:
        return "persistent://" + topic
    return DEFAULT_NAMESPACE + topic


def count(text: str | None, limit: int = COUNT_MAX) -> int:
    """A count or time read from a property value (`read_count`); 0 when it cannot be read."""
    return read_count(text, limit) or 0


def encode(message: OutMessage, message_id: str, publish_ms: int) -> dict[str, str]:
    """The Pulsar properties of `message`: its own properties plus the gateway fields."""
    props = {_carried(k): v for k, v in message.properties.items() if k not in OWN_PROPS}
    props[ID_PROP] = message_id
    props[PUBLISH_PROP] = str(publish_ms)
    if message.tag:
        props[TAG_PROP] = message.tag
    if message.attempt:
        props[ATTEMPT_PROP] = str(message.attempt)
    if message.retries:
        props[RETRIES_PROP] = str(message.retries)
    if message.deliver_at_ms:
        props[DELIVER_AT_PROP] = str(message.deliver_at_ms)
    return props


def _carried(name: str) -> str:
    if name.startswith(RESERVED_PREFIX):
        return CARRIED_PREFIX + name[len(RESERVED_PREFIX) :]
    return name


def _internal(name: str) -> str:
    if name.startswith(CARRIED_PREFIX):
        return RESERVED_PREFIX + name[len(CARRIED_PREFIX) :]
    return name


def decode(
    properties: Mapping[str, str], key: str, pulsar_id: str, pulsar_publish_ms: int
) -> Envelope:
    """Read a received message; messages of native producers get their Pulsar id and time."""
    return Envelope(
        message_id=properties.get(ID_PROP) or pulsar_id,
        properties={_internal(k): v for k, v in properties.items() if k not in OWN_PROPS},
        key=key,
        tag=properties.get(TAG_PROP, ""),
        publish_ms=count(properties.get(PUBLISH_PROP), TIME_MAX_MS) or pulsar_publish_ms,
        deliver_at_ms=count(properties.get(DELIVER_AT_PROP), TIME_MAX_MS),
        stated_attempt=count(properties.get(ATTEMPT_PROP)),
        retries=count(properties.get(RETRIES_PROP)),
    )


def reconcile_attempt(stated: int, redelivery_count: int, remembered: int | None) -> int:
    """Deliveries before this one: `max(stated + redelivery_count, remembered + 1)`.

    * `stated`: `x-gateway-attempt` of this copy, the deliveries before the gateway published it;
    * `redelivery_count`: Pulsar's count of earlier deliveries of this very copy on this
      subscription that ended without an ack (negative ack, ack timeout, consumer gone). The
      gateway gives messages back by publishing a fresh copy with a new `stated` count, so this
      only counts deliveries no property recorded (a consumer that went away with the message);
    * `remembered`: the attempt this back end last handed out for the same message on the same
      subscription while it holds it, or None.

    Pulsar resets the redelivery count when every consumer of the subscription goes offline
    (a broker restart does this), so the first term alone can fall back; a delivery this back
    end made itself is never forgotten while it runs, and the max keeps the count from going
    down. Neither term counts a delivery twice: a fresh copy starts at redelivery count 0.
    """
    derived = stated + max(redelivery_count, 0)
    if remembered is None:
        return derived
    return max(derived, remembered + 1)


def id_text(message_id: Any) -> str:
    """A Pulsar message id as `ledger:entry:partition:batch`."""
    return str(message_id).strip("()").replace(",", ":")
