"""The edge of the Pulsar front end: every value a client sends is checked here, once, before the
engine, the front end's registries or a reply see it.

`check_command` checks a command (required fields present, every string valid UTF-8, names,
counts and flags in range); `messages` turns a SEND frame into engine messages, checking sizes,
counts, compression and delivery times. Both raise errors of `gateway.errors`, which the front
end answers with the protocol's ServerError (see `replies.refusal`); echoed values are cut to
`ECHO_CHARS`. Frames that cannot be decoded at all close the connection (`FrameError`).
"""

from __future__ import annotations

from typing import Any

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message
from google.protobuf.unknown_fields import UnknownFieldSet

from adapters.pulsar.frontend import access, ids
from adapters.pulsar.frontend.journal import MAX_SEQUENCE_ID
from adapters.pulsar.frontend.messages import (
    MAX_SCHEMA_VERSION_BYTES,
    RESERVED,
    SCHEMA_VERSION,
    carried,
    key_bytes,
    out_message,
    sticky_key,
)
from adapters.pulsar.frontend.topics import DEFAULT_PREFIX, PERSISTENT
from adapters.pulsar.wire import wire_pb2 as pb
from adapters.pulsar.wire.batch import Entry, entries
from adapters.pulsar.wire.frames import Frame
from gateway.backend.base import OutMessage
from gateway.errors import ECHO_CHARS, InvalidArgument, MessageTooLarge
from gateway.limits import (
    MAX_BATCH,
    MAX_DELAY_MS,
    MAX_NAME_BYTES,
    check_properties,
    check_publish_properties,
    utf8_len,
)

Cmd = pb.BaseCommand

MAX_MESSAGES_PER_SEND = MAX_BATCH
"""Messages one SEND frame may carry (a batch): the gateway's one batch cap."""
MAX_IDS_PER_COMMAND = 10_000
"""Most message ids one ACK or REDELIVER_UNACKNOWLEDGED_MESSAGES may carry."""

COMMAND_FIELDS: dict[int, str] = {
    Cmd.CONNECT: "connect",
    Cmd.PRODUCER: "producer",
    Cmd.SEND: "send",
    Cmd.SUBSCRIBE: "subscribe",
    Cmd.FLOW: "flow",
    Cmd.ACK: "ack",
    Cmd.REDELIVER_UNACKNOWLEDGED_MESSAGES: "redeliverUnacknowledgedMessages",
    Cmd.PARTITIONED_METADATA: "partitionMetadata",
    Cmd.LOOKUP: "lookupTopic",
    Cmd.CLOSE_PRODUCER: "close_producer",
    Cmd.CLOSE_CONSUMER: "close_consumer",
    Cmd.UNSUBSCRIBE: "unsubscribe",
    Cmd.PING: "ping",
    Cmd.PONG: "pong",
    Cmd.GET_LAST_MESSAGE_ID: "getLastMessageId",
    Cmd.GET_SCHEMA: "getSchema",
    Cmd.GET_OR_CREATE_SCHEMA: "getOrCreateSchema",
    Cmd.SEEK: "seek",
    Cmd.GET_TOPICS_OF_NAMESPACE: "getTopicsOfNamespace",
}
"""The commands the front end serves and the BaseCommand field that carries each."""


def echo(value: object) -> str:
    """A client's value as it may appear in an error: text, cut to `ECHO_CHARS`."""
    text = value.decode(errors="replace") if isinstance(value, bytes) else str(value)
    return text if len(text) <= ECHO_CHARS else text[:ECHO_CHARS] + "…"


def refused(field: str, value: object, allowed: str) -> InvalidArgument:
    return InvalidArgument(field, echo(value), allowed)


def command_body(cmd: pb.BaseCommand) -> Message | None:
    """The part of the command its type names; None for a command the front end does not serve."""
    name = COMMAND_FIELDS.get(cmd.type) if cmd.HasField("type") else None
    body: Message | None = None if name is None else getattr(cmd, name)
    return body


def check_command(cmd: pb.BaseCommand) -> None:
    """Raise InvalidArgument unless the command's values are all in range."""
    body = command_body(cmd)
    if body is None:
        return
    name = COMMAND_FIELDS[cmd.type]
    missing = _missing(body)
    if missing:
        raise _absent(body, name, missing[0])
    check_text(body, name)
    check = _CHECKS.get(cmd.type)
    if check is not None:
        check(body)


def _missing(message: Message) -> list[str]:
    """The paths of required fields `message` lacks."""
    found: list[str] = message.FindInitializationErrors()  # type: ignore[attr-defined]
    return found


def _absent(message: Message, prefix: str, path: str) -> InvalidArgument:
    """The error for required field `path` (dotted, below `message`) found missing: an enum
    field the client did send, with a value the enum does not know, is named with that value
    and the values allowed (proto2 keeps such a value among the unknown fields)."""
    owner = message
    parts = path.split(".")
    try:
        for part in parts[:-1]:
            name, _, index = part.partition("[")
            owner = getattr(owner, name)
            if index:
                owner = owner[int(index.rstrip("]"))]
        field = owner.DESCRIPTOR.fields_by_name[parts[-1]]
    except (AttributeError, KeyError, IndexError, ValueError):
        return InvalidArgument(f"{prefix}.{path}", None, "a required field")
    if field.enum_type is not None:
        value = declared_enum(owner, field.name)
        if value not in field.enum_type.values_by_number:
            allowed = " or ".join(v.name for v in field.enum_type.values)
            return refused(f"{prefix}.{path}", value, allowed)
    return InvalidArgument(f"{prefix}.{path}", None, "a required field")


def check_text(message: Message, path: str) -> None:
    """Every string field of `message`, nested ones too, must be valid UTF-8 (messages of a
    type with no string field anywhere inside, such as an ACK's message ids, are not read)."""
    for field, value in message.ListFields():
        values = value if field.is_repeated else (value,)
        if field.type == FieldDescriptor.TYPE_STRING:
            for item in values:
                if not isinstance(item, str):
                    raise refused(f"{path}.{field.name}", item, "valid UTF-8")
        elif field.type == FieldDescriptor.TYPE_MESSAGE and _has_text(field.message_type):
            for item in values:
                check_text(item, f"{path}.{field.name}")


_TEXT: dict[Any, bool] = {}
"""Per message type: whether it holds a string field, itself or in a message inside."""


def _has_text(descriptor: Any) -> bool:
    found = _TEXT.get(descriptor)
    if found is None:
        _TEXT[descriptor] = False  # while looking (a type that contains itself)
        found = _TEXT[descriptor] = any(
            field.type == FieldDescriptor.TYPE_STRING
            or (field.type == FieldDescriptor.TYPE_MESSAGE and _has_text(field.message_type))
            for field in descriptor.fields)
    return found


def check_name(field: str, value: str, *, required: bool = True) -> None:
    """A topic, subscription, producer or consumer name: printable, at most MAX_NAME_BYTES of
    UTF-8 (the gateway's one limit for names)."""
    if not value and not required:
        return
    if not value or utf8_len(value) > MAX_NAME_BYTES or not value.isprintable():
        raise refused(field, value, f"1..{MAX_NAME_BYTES} bytes of printable UTF-8")


def check_topic(field: str, value: str) -> None:
    """A topic name: the name the gateway keeps, without `persistent://` and `public/default/`
    (what a gRPC client names the topic by), is a name as `check_name` has it."""
    name = value.removeprefix(PERSISTENT).removeprefix(DEFAULT_PREFIX)
    if not name or utf8_len(name) > MAX_NAME_BYTES or not value.isprintable():
        raise refused(field, value, f"1..{MAX_NAME_BYTES} bytes of printable UTF-8 (not counting "
                                    f"{PERSISTENT}{DEFAULT_PREFIX})")


def _connect(body: Any) -> None:
    if body.protocol_version < 0:
        raise refused("connect.protocol_version", body.protocol_version, "0 or more")


def _producer(body: Any) -> None:
    check_topic("producer.topic", body.topic)
    if body.encrypted:  # a consumer would get the ciphertext as the message
        raise refused("producer.encrypted", True, NO_ENCRYPTION)
    wanted = access.mode(body)
    if wanted not in access.SERVED:
        raise refused("producer.producer_access_mode", access.NAMES.get(wanted, wanted),
                      "Shared or Exclusive")
    check_name("producer.producer_name", body.producer_name, required=False)
    check_name(
        "producer.initial_subscription_name", body.initial_subscription_name, required=False
    )


def declared_enum(message: Message, name: str) -> int:
    """The value the client sent for the enum field `name`, including one the enum does not
    know (proto2 keeps it among the unknown fields, and the field then reads as its default)."""
    number = message.DESCRIPTOR.fields_by_name[name].number
    unknown = UnknownFieldSet(message)
    for i in range(len(unknown)):
        item = unknown[i]
        if item.field_number == number and isinstance(item.data, int):
            return item.data
    return int(getattr(message, name))


def _check_enum(message: Message, name: str, path: str) -> None:
    enum = message.DESCRIPTOR.fields_by_name[name].enum_type
    assert enum is not None
    value = declared_enum(message, name)
    if value not in enum.values_by_number:
        allowed = " or ".join(v.name for v in enum.values)
        raise refused(path, value, allowed)


def _subscribe(body: Any) -> None:
    _check_enum(body, "initialPosition", "subscribe.initialPosition")
    check_topic("subscribe.topic", body.topic)
    check_name("subscribe.subscription", body.subscription)
    check_name("subscribe.consumer_name", body.consumer_name, required=False)
    if body.durable and body.start_message_rollback_duration_sec:  # a reader's option
        raise refused("subscribe.start_message_rollback_duration_sec",
                      body.start_message_rollback_duration_sec, "0 for a durable subscription")
    if body.HasField("keySharedMeta") and body.keySharedMeta.keySharedMode == pb.STICKY:
        raise refused("subscribe.keySharedMeta.keySharedMode", "STICKY",
                      "AUTO_SPLIT (keys are spread over the consumers by consistent hashing)")


def _send(body: Any) -> None:
    for name in ("sequence_id", "highest_sequence_id"):
        if getattr(body, name) > MAX_SEQUENCE_ID:
            raise refused(f"send.{name}", getattr(body, name), f"0..{MAX_SEQUENCE_ID} (int64)")
    if body.HasField("num_messages") and not 1 <= body.num_messages <= MAX_MESSAGES_PER_SEND:
        raise refused("send.num_messages", body.num_messages, f"1..{MAX_MESSAGES_PER_SEND}")
    for flag in ("txnid_least_bits", "txnid_most_bits"):
        if body.HasField(flag):
            raise refused(f"send.{flag}", getattr(body, flag), "unset: no transactions")
    for flag in ("is_chunk", "marker"):
        if getattr(body, flag):
            raise refused(f"send.{flag}", True, "false: no chunked messages or markers")


def _ack(body: Any) -> None:
    if not 1 <= len(body.message_id) <= MAX_IDS_PER_COMMAND:
        raise refused("ack.message_id", len(body.message_id), f"1..{MAX_IDS_PER_COMMAND} ids")
    for flag in ("txnid_least_bits", "txnid_most_bits"):
        if body.HasField(flag):  # acked now, it could not be undone by an abort
            raise refused(f"ack.{flag}", getattr(body, flag), "unset: no transactions")


def _redeliver(body: Any) -> None:
    if len(body.message_ids) > MAX_IDS_PER_COMMAND:
        count = len(body.message_ids)
        raise refused("message_ids", count, f"0..{MAX_IDS_PER_COMMAND} ids")


MAX_PUBLISH_TIME = 2**63 - 1


def _topics_of_namespace(body: Any) -> None:
    """A namespace is `tenant/namespace`: two non-empty parts of a topic's name."""
    field = "getTopicsOfNamespace.namespace"
    check_name(field, body.namespace)
    parts = body.namespace.split("/")
    if len(parts) != 2 or not all(parts):
        raise refused(field, body.namespace, "tenant/namespace")
    mode = declared_enum(body, "mode")
    if mode not in pb.CommandGetTopicsOfNamespace.Mode.values():
        raise refused("getTopicsOfNamespace.mode", mode, "PERSISTENT, NON_PERSISTENT or ALL")


def _seek(body: Any) -> None:
    has_id, has_time = body.HasField("message_id"), body.HasField("message_publish_time")
    if has_id == has_time:
        raise refused("seek", "both" if has_id else "neither",
                      "a message_id or a message_publish_time")
    if has_time and body.message_publish_time > MAX_PUBLISH_TIME:
        raise refused("seek.message_publish_time", body.message_publish_time,
                      f"0..{MAX_PUBLISH_TIME} ms")


def seek_target(body: pb.CommandSeek) -> dict[str, Any]:
    """The engine's `seek` arguments for a SEEK that passed `check_command`: a message id
    the front end gave, or a publish time (MessageId.earliest and .latest as times)."""
    if body.HasField("message_publish_time"):
        return {"publish_ms": body.message_publish_time}
    mid = body.message_id
    key = (mid.ledgerId, mid.entryId)
    if key == ids.EARLIEST:
        return {"publish_ms": 0}
    if key == ids.LATEST:
        return {"publish_ms": MAX_PUBLISH_TIME}
    # Message i of a batch: its first + i.
    engine_id = ids.engine_id((mid.ledgerId, mid.entryId), max(mid.batch_index, 0))
    if not engine_id:
        raise refused("seek.message_id", f"{mid.ledgerId}:{mid.entryId}",
                      "the id of a message of this topic")
    return {"message_id": engine_id}


def _topic(field: str) -> Any:
    return lambda body: check_topic(field, body.topic)


_CHECKS = {
    Cmd.CONNECT: _connect,
    Cmd.PRODUCER: _producer,
    Cmd.SUBSCRIBE: _subscribe,
    Cmd.SEND: _send,
    Cmd.ACK: _ack,
    Cmd.REDELIVER_UNACKNOWLEDGED_MESSAGES: _redeliver,
    Cmd.LOOKUP: _topic("lookupTopic.topic"),
    Cmd.PARTITIONED_METADATA: _topic("partitionMetadata.topic"),
    Cmd.GET_SCHEMA: _topic("getSchema.topic"),
    Cmd.SEEK: _seek,
    Cmd.GET_TOPICS_OF_NAMESPACE: _topics_of_namespace,
}

_CHUNK_FIELDS = ("uuid", "num_chunks_from_msg", "total_chunk_msg_size", "chunk_id")
NO_ENCRYPTION = "false: end-to-end encryption is not served"
ENCRYPTION_FIELDS = {13: "encryption_keys", 14: "encryption_algo", 15: "encryption_param"}
"""MessageMetadata's encryption fields (not in the front end's proto subset: unknown fields)."""


def _check_not_encrypted(metadata: pb.MessageMetadata) -> None:
    """Refuse an encrypted payload: it would be stored and delivered as if it were the message
    (no consumer could decrypt it: its keys would not travel with it)."""
    unknown = UnknownFieldSet(metadata)
    for i in range(len(unknown)):
        name = ENCRYPTION_FIELDS.get(unknown[i].field_number)
        if name is not None:
            raise refused(f"metadata.{name}", "set", "unset: end-to-end encryption is not served")


def messages(frame: Frame, *, producer: str, limit: int, now_ms: int) -> list[OutMessage]:
    """The engine messages of a checksummed SEND frame whose command passed `check_command`.

    Raises InvalidArgument or MessageTooLarge (each message's body + key + properties, in
    bytes, must fit `limit`), or FrameError for a payload that cannot be decoded.
    """
    metadata = frame.metadata
    assert metadata is not None
    missing = _missing(metadata)
    if missing:
        raise _absent(metadata, "metadata", missing[0])
    check_text(metadata, "metadata")
    _check_not_encrypted(metadata)
    for name in _CHUNK_FIELDS:
        if metadata.HasField(name):
            raise refused(f"metadata.{name}", getattr(metadata, name), "unset: no chunking")
    if metadata.HasField("marker_type"):
        raise refused("metadata.marker_type", metadata.marker_type, "unset: no markers")
    deliver_at = metadata.deliver_at_time
    if not 0 <= deliver_at <= now_ms + MAX_DELAY_MS:
        allowed = f"0..{now_ms + MAX_DELAY_MS} (at most {MAX_DELAY_MS} ms from now)"
        raise refused("metadata.deliver_at_time", deliver_at, allowed)
    version = len(metadata.schema_version)
    if version > MAX_SCHEMA_VERSION_BYTES:
        raise refused("metadata.schema_version", f"{version} bytes",
                      f"at most {MAX_SCHEMA_VERSION_BYTES} bytes")
    carried_version = len(SCHEMA_VERSION) + 2 * version if version else 0
    found = entries(metadata, frame.payload, limit=limit, max_count=MAX_MESSAGES_PER_SEND)
    check_publish_properties("messages", sum(len(entry.properties) for entry in found))
    send = frame.command.send
    if send.HasField("num_messages") and send.num_messages != len(found):
        raise refused("send.num_messages", send.num_messages, f"{len(found)}, as in the payload")
    if send.sequence_id + len(found) - 1 > MAX_SEQUENCE_ID:
        allowed = f"0..{MAX_SEQUENCE_ID + 1 - len(found)} for {len(found)} messages (int64 ids)"
        raise refused("send.sequence_id", send.sequence_id, allowed)
    out = []
    for i, entry in enumerate(found):
        _check_entry_text(entry, f"messages[{i}]")
        # Here, not only in the engine: a refusal there fails every frame stored with this one.
        check_properties(f"messages[{i}].properties", entry.properties)
        for key in entry.properties:
            if key.startswith(RESERVED):  # the front end's own: they would not be delivered
                raise refused(f"messages[{i}].properties", key,
                              f"keys that do not start with {RESERVED} (reserved for the "
                              "Pulsar front end)")
        size = len(entry.payload) + len(sticky_key(entry).encode()) + carried_version
        for key, value in [*entry.properties.items(), *carried(entry).items()]:
            size += len(key.encode()) + len(value.encode())
        if size > limit:
            raise MessageTooLarge(size, limit)
        sequence_id = send.sequence_id + i if entry.sequence_id is None else entry.sequence_id
        if sequence_id > MAX_SEQUENCE_ID:
            raise refused(f"messages[{i}].sequence_id", sequence_id, f"0..{MAX_SEQUENCE_ID}")
        out.append(out_message(entry, metadata, producer, sequence_id))
    return out


def _check_entry_text(entry: Entry, path: str) -> None:
    """A message's texts (a batch entry's come from its SingleMessageMetadata, which
    `check_text` on the outer metadata does not reach) must be valid UTF-8, and a partition key
    flagged as base64 base64 (the broker would fail to route it)."""
    texts: list[tuple[str, object]] = [("partition_key", entry.partition_key)]
    for key, value in entry.properties.items():
        texts += [("properties.key", key), ("properties.value", value)]
    for field, text in texts:
        if not isinstance(text, str):
            raise refused(f"{path}.{field}", text, "valid UTF-8")
    if entry.key_b64 and entry.partition_key:
        try:
            key_bytes(entry.partition_key)
        except ValueError:
            raise refused(f"{path}.partition_key", entry.partition_key,
                          "base64 (partition_key_b64_encoded is set)") from None
