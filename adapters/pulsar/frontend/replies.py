"""Builders for the commands the front end sends, and the one map from gateway errors to Pulsar.

Every reply sets all proto2 required fields: a client drops the connection on a reply that misses
one.
"""

from __future__ import annotations

from adapters.pulsar.frontend.edge import COMMAND_FIELDS
from adapters.pulsar.frontend.schemas import IncompatibleSchema
from adapters.pulsar.wire import wire_pb2 as pb
from adapters.pulsar.wire.frames import encode_command
from gateway.errors import (
    AlreadyExists,
    GatewayError,
    InvalidArgument,
    MessageTooLarge,
    NotFound,
    PermissionDenied,
    TooManyGroups,
    TooManyTopics,
    Unauthenticated,
    Unavailable,
    Unimplemented,
)

Cmd = pb.BaseCommand

_ERRORS: tuple[tuple[type[GatewayError], int], ...] = (
    (Unavailable, pb.ServiceNotReady),
    (Unauthenticated, pb.AuthenticationError),
    (PermissionDenied, pb.AuthorizationError),
    (NotFound, pb.TopicNotFound),
    (AlreadyExists, pb.ConsumerBusy),
    (MessageTooLarge, pb.NotAllowedError),
    (TooManyGroups, pb.NotAllowedError),  # as Pulsar's maxSubscriptionsPerTopic
    (TooManyTopics, pb.NotAllowedError),  # as Pulsar's maxTopicsPerNamespace
    (IncompatibleSchema, pb.IncompatibleSchema),
    (InvalidArgument, pb.NotAllowedError),
    (Unimplemented, pb.NotAllowedError),
)
NO_REQUEST = 2**64 - 1
"""The request id of an ERROR that answers no request (a refused CONNECT or connection)."""
MAX_TEXT_CHARS = 1000
"""Longest error message sent (values in it are cut shorter where they are checked)."""
RETRYABLE = frozenset({pb.ServiceNotReady, pb.UnknownError, pb.TooManyRequests})
"""Errors after which the client retries (it needs the connection closed to do so)."""
CPP_CLIENT = "Pulsar-CPP-"
"""How clients built on Pulsar's C++ library (pulsar-client for Python and Node, C++) name
themselves in CONNECT's `client_version`."""


def send_failure(code: int, client_version: str) -> int:
    """The SEND_ERROR code that fails just the one refused send of this client, for a refusal
    a resend cannot cure (a bad value, a message too large, a denied topic).

    The C++ library fails a single send only on ChecksumError; on any other SEND_ERROR it closes
    the connection, reconnects and sends the same frame again, for ever (its `send()` never
    returns). Java clients fail the send on NotAllowedError. Retryable codes stay as they are:
    there the reconnect and resend is what should happen."""
    if code in RETRYABLE or not client_version.startswith(CPP_CLIENT):
        return code
    return pb.ChecksumError


def server_error(exc: BaseException) -> int:
    """The Pulsar ServerError for an exception raised by the engine."""
    for kind, code in _ERRORS:
        if isinstance(exc, kind):
            return code
    return pb.UnknownError


def error_text(exc: BaseException) -> str:
    """A message for an ERROR reply."""
    return exc.message if isinstance(exc, GatewayError) else f"{type(exc).__name__}: {exc}"


def refusal(cmd: pb.BaseCommand, code: int, message: str) -> bytes | None:
    """The reply that refuses `cmd`; None when the command has no way to answer."""
    kind = cmd.type
    if kind == Cmd.SEND:
        return send_error(cmd.send.producer_id, cmd.send.sequence_id, code, message)
    if kind == Cmd.LOOKUP:
        return lookup_failed(cmd.lookupTopic.request_id, code, message)
    if kind == Cmd.PARTITIONED_METADATA:
        return partitions_failed(cmd.partitionMetadata.request_id, code, message)
    if kind == Cmd.ACK:
        ack = cmd.ack
        return ack_response(ack.consumer_id, ack.request_id, code, message) if ack.HasField(
            "request_id"
        ) else None
    if kind == Cmd.CONNECT:
        return error(NO_REQUEST, code, message)
    name = COMMAND_FIELDS.get(kind)
    body = getattr(cmd, name) if name is not None else None
    if body is None or "request_id" not in body.DESCRIPTOR.fields_by_name:
        return None
    if not body.HasField("request_id"):
        return None
    return error(body.request_id, code, message)


def _cut(message: str) -> str:
    return message if len(message) <= MAX_TEXT_CHARS else message[:MAX_TEXT_CHARS] + "…"


def pong() -> bytes:
    cmd = Cmd(type=Cmd.PONG)
    cmd.pong.SetInParent()
    return encode_command(cmd)


def ping() -> bytes:
    cmd = Cmd(type=Cmd.PING)
    cmd.ping.SetInParent()
    return encode_command(cmd)


def connected(server_version: str, protocol_version: int, max_message_size: int) -> bytes:
    cmd = Cmd(type=Cmd.CONNECTED)
    cmd.connected.server_version = server_version
    cmd.connected.protocol_version = protocol_version
    cmd.connected.max_message_size = max_message_size
    return encode_command(cmd)


def success(request_id: int) -> bytes:
    cmd = Cmd(type=Cmd.SUCCESS)
    cmd.success.request_id = request_id
    return encode_command(cmd)


def error(request_id: int, code: int, message: str) -> bytes:
    cmd = Cmd(type=Cmd.ERROR)
    cmd.error.request_id = request_id
    cmd.error.error = code  # type: ignore[assignment]
    cmd.error.message = _cut(message)
    return encode_command(cmd)


def lookup(request_id: int, service_url: str) -> bytes:
    cmd = Cmd(type=Cmd.LOOKUP_RESPONSE)
    reply = cmd.lookupTopicResponse
    reply.request_id = request_id
    reply.brokerServiceUrl = service_url
    reply.brokerServiceUrlTls = service_url  # what a client on TLS connects to
    reply.response = pb.CommandLookupTopicResponse.Connect
    reply.authoritative = True
    reply.proxy_through_service_url = False
    return encode_command(cmd)


def lookup_failed(request_id: int, code: int, message: str) -> bytes:
    cmd = Cmd(type=Cmd.LOOKUP_RESPONSE)
    reply = cmd.lookupTopicResponse
    reply.request_id = request_id
    reply.response = pb.CommandLookupTopicResponse.Failed
    reply.error = code  # type: ignore[assignment]
    reply.message = _cut(message)
    return encode_command(cmd)


def partitions(request_id: int, count: int) -> bytes:
    cmd = Cmd(type=Cmd.PARTITIONED_METADATA_RESPONSE)
    reply = cmd.partitionMetadataResponse
    reply.request_id = request_id
    reply.partitions = count
    reply.response = pb.CommandPartitionedTopicMetadataResponse.Success
    return encode_command(cmd)


def partitions_failed(request_id: int, code: int, message: str) -> bytes:
    cmd = Cmd(type=Cmd.PARTITIONED_METADATA_RESPONSE)
    reply = cmd.partitionMetadataResponse
    reply.request_id = request_id
    reply.response = pb.CommandPartitionedTopicMetadataResponse.Failed
    reply.error = code  # type: ignore[assignment]
    reply.message = _cut(message)
    return encode_command(cmd)


def producer_success(
    request_id: int, name: str, last_sequence_id: int, schema_version: bytes = b""
) -> bytes:
    cmd = Cmd(type=Cmd.PRODUCER_SUCCESS)
    reply = cmd.producer_success
    reply.request_id = request_id
    reply.producer_name = name
    reply.last_sequence_id = last_sequence_id
    if schema_version:
        reply.schema_version = schema_version
    reply.producer_ready = True
    return encode_command(cmd)


def send_receipt(
    producer_id: int, sequence_id: int, highest: int, ledger: int, entry: int
) -> bytes:
    cmd = Cmd(type=Cmd.SEND_RECEIPT)
    reply = cmd.send_receipt
    reply.producer_id = producer_id
    reply.sequence_id = sequence_id
    reply.highest_sequence_id = highest
    reply.message_id.ledgerId = ledger
    reply.message_id.entryId = entry
    return encode_command(cmd)


def send_error(producer_id: int, sequence_id: int, code: int, message: str) -> bytes:
    cmd = Cmd(type=Cmd.SEND_ERROR)
    reply = cmd.send_error
    reply.producer_id = producer_id
    reply.sequence_id = sequence_id
    reply.error = code  # type: ignore[assignment]
    reply.message = _cut(message)
    return encode_command(cmd)


def ack_response(consumer_id: int, request_id: int, code: int | None, message: str) -> bytes:
    cmd = Cmd(type=Cmd.ACK_RESPONSE)
    reply = cmd.ackResponse
    reply.consumer_id = consumer_id
    reply.request_id = request_id
    if code is not None:
        reply.error = code  # type: ignore[assignment]
        reply.message = _cut(message)
    return encode_command(cmd)


def last_message_id(
    request_id: int, last: tuple[int, int], mark_delete: tuple[int, int]
) -> bytes:
    cmd = Cmd(type=Cmd.GET_LAST_MESSAGE_ID_RESPONSE)
    reply = cmd.getLastMessageIdResponse
    reply.request_id = request_id
    reply.last_message_id.ledgerId, reply.last_message_id.entryId = last
    mark = reply.consumer_mark_delete_position
    mark.ledgerId, mark.entryId = mark_delete
    return encode_command(cmd)


def topics_of_namespace(request_id: int, topics: list[str]) -> bytes:
    """A namespace's topics, unfiltered (the client applies its pattern) and without a hash."""
    cmd = Cmd(type=Cmd.GET_TOPICS_OF_NAMESPACE_RESPONSE)
    reply = cmd.getTopicsOfNamespaceResponse
    reply.request_id = request_id
    reply.topics.extend(topics)
    reply.filtered = False
    return encode_command(cmd)


def schema_not_found(request_id: int, topic: str) -> bytes:
    return schema_refused(request_id, pb.TopicNotFound, f"no schema stored for {topic}")


def schema_refused(request_id: int, code: int, message: str) -> bytes:
    cmd = Cmd(type=Cmd.GET_SCHEMA_RESPONSE)
    reply = cmd.getSchemaResponse
    reply.request_id = request_id
    reply.error_code = code  # type: ignore[assignment]
    reply.error_message = _cut(message)
    return encode_command(cmd)


def schema_found(request_id: int, schema: pb.Schema, version: bytes) -> bytes:
    cmd = Cmd(type=Cmd.GET_SCHEMA_RESPONSE)
    reply = cmd.getSchemaResponse
    reply.request_id = request_id
    reply.schema.CopyFrom(schema)
    reply.schema_version = version
    return encode_command(cmd)


def schema_version(
    request_id: int, version: bytes, code: int | None = None, message: str = ""
) -> bytes:
    cmd = Cmd(type=Cmd.GET_OR_CREATE_SCHEMA_RESPONSE)
    reply = cmd.getOrCreateSchemaResponse
    reply.request_id = request_id
    reply.schema_version = version
    if code is not None:
        reply.error_code = code  # type: ignore[assignment]
        reply.error_message = _cut(message)
    return encode_command(cmd)


def close_consumer(consumer_id: int) -> bytes:
    """The server closes a consumer (the client subscribes it again)."""
    cmd = Cmd(type=Cmd.CLOSE_CONSUMER)
    cmd.close_consumer.consumer_id = consumer_id
    cmd.close_consumer.request_id = NO_REQUEST
    return encode_command(cmd)


def active_consumer(consumer_id: int, active: bool) -> bytes:
    cmd = Cmd(type=Cmd.ACTIVE_CONSUMER_CHANGE)
    cmd.active_consumer_change.consumer_id = consumer_id
    cmd.active_consumer_change.is_active = active
    return encode_command(cmd)
