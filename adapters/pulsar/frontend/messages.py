"""Translation between Pulsar message metadata and the engine's messages and deliveries.

Pulsar-only metadata without an engine field (the producer's name and sequence id, the event
time, the ordering key, whether the partition key is base64 of a binary key, whether the value
or the key is null) travels in
properties under a reserved prefix and is taken off again on delivery; a client may not set
properties of that prefix (`edge`).

The engine's key is the one a Key_Shared subscription routes by and a back end keeps order by:
Pulsar's sticky key, the bytes `Commands.peekStickyKey` hashes: the ordering key when the message
has one, else the partition key, decoded when it is the base64 of a binary key
(`partition_key_b64_encoded`); as text, or as base64 when the bytes are not UTF-8. So a binary key
and the text key of the same bytes are one key. A message whose partition key is not its engine
key (it has an ordering key, or its key is binary) keeps the partition key as sent in a reserved
property and gets it back on delivery.
"""

from __future__ import annotations

import base64
import binascii
import contextlib

from adapters.pulsar.wire import wire_pb2 as pb
from adapters.pulsar.wire.batch import Entry
from gateway.backend.base import OutMessage
from gateway.engine.api import Delivery

RESERVED = "x-pulsar-"
PRODUCER = RESERVED + "producer"
SEQUENCE = RESERVED + "sequence-id"
EVENT_TIME = RESERVED + "event-time"
ORDERING_KEY = RESERVED + "ordering-key"
"""The ordering key's bytes, in base64."""
PARTITION_KEY = RESERVED + "partition-key"
"""The partition key of a message with an ordering key (whose engine key is the ordering key)."""
KEY_B64 = RESERVED + "key-b64"
"""Set ("true") when the partition key is the base64 of a binary key."""
NULL_VALUE = RESERVED + "null-value"
NULL_KEY = RESERVED + "null-key"
"""Set ("true") for a null value (a tombstone) / a null key, told from empty ones."""
SCHEMA_VERSION = RESERVED + "schema-version"
"""The schema version the producer set (`schemas`), in hex."""
MAX_SCHEMA_VERSION_BYTES = 64
"""Longest schema version a SEND may carry (the front end gives 8 bytes)."""
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
    properties.update(carried(entry))
    if metadata.schema_version:
        properties[SCHEMA_VERSION] = metadata.schema_version.hex()
    deliver_at = metadata.deliver_at_time if metadata.HasField("deliver_at_time") else 0
    return OutMessage(
        body=entry.payload,
        properties=properties,
        key=sticky_key(entry),
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
    ordering = props.get(ORDERING_KEY)
    if PARTITION_KEY in props:
        partition_key = props[PARTITION_KEY]
    else:  # none, or the engine key (stored before binary keys were decoded, too)
        partition_key = "" if ordering else delivery.key
    if partition_key:
        meta.partition_key = partition_key
        if props.get(KEY_B64) == "true":
            meta.partition_key_b64_encoded = True
    event_time = _int(props.get(EVENT_TIME, "0"))
    if event_time:
        meta.event_time = event_time
    if props.get(NULL_VALUE) == "true":
        meta.null_value = True
    if props.get(NULL_KEY) == "true":
        meta.null_partition_key = True
    if ordering:
        with contextlib.suppress(ValueError):  # not written by this front end
            meta.ordering_key = base64.b64decode(ordering, validate=True)
    version = props.get(SCHEMA_VERSION, "")
    if 0 < len(version) <= 2 * MAX_SCHEMA_VERSION_BYTES:
        with contextlib.suppress(ValueError):  # not written by this front end
            meta.schema_version = bytes.fromhex(version)
    return meta


def sticky_key(entry: Entry) -> str:
    """The engine key of an entry: its ordering key when it has one, else its partition key
    (the bytes of a binary one); bytes as their text, or their base64 when not UTF-8."""
    if entry.ordering_key:
        return _as_text(entry.ordering_key)
    if entry.key_b64 and entry.partition_key:
        with contextlib.suppress(ValueError):  # the edge refuses such a key
            return _as_text(key_bytes(entry.partition_key))
    return entry.partition_key


def key_bytes(text: str) -> bytes:
    """The bytes of a partition key sent as base64, decoded as the broker decodes it (Java's
    basic decoder: the standard alphabet, padding optional but complete when present);
    ValueError when it is not base64."""
    if "=" not in text:
        text += "=" * (-len(text) % 4)
    try:
        return base64.b64decode(text, validate=True)
    except binascii.Error as exc:
        raise ValueError(str(exc)) from None


def _as_text(key: bytes) -> str:
    try:
        return key.decode()
    except UnicodeDecodeError:
        return base64.b64encode(key).decode()


def carried(entry: Entry) -> dict[str, str]:
    """The reserved properties that carry an entry's ordering key, its partition key as sent
    when that is not the engine key (with an ordering key, or a binary key) and key encoding."""
    out: dict[str, str] = {}
    if entry.ordering_key:
        out[ORDERING_KEY] = base64.b64encode(entry.ordering_key).decode()
    if entry.partition_key and (entry.ordering_key or entry.key_b64):
        out[PARTITION_KEY] = entry.partition_key
    if entry.key_b64 and entry.partition_key:
        out[KEY_B64] = "true"
    if entry.null_value:
        out[NULL_VALUE] = "true"
    if entry.null_key:
        out[NULL_KEY] = "true"
    return out


def _int(text: str) -> int:
    """A uint64 metadata field from a property any front end may have set: 0 unless in range."""
    try:
        value = int(text)
    except ValueError:
        return 0
    return value if 0 <= value < 2**64 else 0
