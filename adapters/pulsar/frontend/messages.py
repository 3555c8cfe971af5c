"""Translation between Pulsar message metadata and the engine's messages and deliveries.

Pulsar-only metadata without an engine field travels in properties under a reserved prefix and
is taken off again on delivery.
"""

from __future__ import annotations

from adapters.pulsar.wire import wire_pb2 as pb
from adapters.pulsar.wire.batch import Entry
from gateway.backend.base import OutMessage
from gateway.engine.api import Delivery

RESERVED = "x-pulsar-"
PRODUCER = RESERVED + "producer"
SEQUENCE = RESERVED + "sequence-id"
EVENT_TIME = RESERVED + "event-time"
DEFAULT_PRODUCER = "gateway"


def out_message(
    entry: Entry, metadata: pb.MessageMetadata, producer: str, sequence_id: int
) -> OutMessage:
    """The engine message for one entry of a SEND frame."""
    properties = {k: v for k, v in entry.properties.items() if not k.startswith(RESERVED)}
    properties[PRODUCER] = producer
    properties[SEQUENCE] = str(sequence_id)
    if entry.event_time:
        properties[EVENT_TIME] = str(entry.event_time)
    deliver_at = metadata.deliver_at_time if metadata.HasField("deliver_at_time") else 0
    return OutMessage(
        body=entry.payload,
        properties=properties,
        key=entry.partition_key,
        deliver_at_ms=max(deliver_at, 0),
    )


def delivery_metadata(delivery: Delivery) -> pb.MessageMetadata:
    """The MessageMetadata sent with a delivery (all required fields set)."""
    props = delivery.properties
    meta = pb.MessageMetadata(
        producer_name=props.get(PRODUCER, DEFAULT_PRODUCER) or DEFAULT_PRODUCER,
        sequence_id=_int(props.get(SEQUENCE, "0")),
        publish_time=max(delivery.publish_ms, 0),
    )
    for key, value in props.items():
        if not key.startswith(RESERVED):
            meta.properties.add(key=key, value=value)
    if delivery.key:
        meta.partition_key = delivery.key
    event_time = _int(props.get(EVENT_TIME, "0"))
    if event_time:
        meta.event_time = event_time
    return meta


def _int(text: str) -> int:
    """A uint64 metadata field from a property any front end may have set: 0 unless in range."""
    try:
        value = int(text)
    except ValueError:
        return 0
    return value if 0 <= value < 2**64 else 0
