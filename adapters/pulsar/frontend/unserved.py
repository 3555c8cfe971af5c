"""Commands the front end does not serve: topic-list watching, consumer stats, transactions.
One that carries a request id is answered ERROR NotAllowedError naming the command, so the
client fails that call at once instead of waiting its operation timeout for an answer that never
comes; one without a request id is ignored, as before.

Pattern (regex) subscriptions are served by polling (`adapters.pulsar.frontend.namespaces`
answers GET_TOPICS_OF_NAMESPACE). CONNECTED does not announce `supports_topic_watchers`, so a
client does not send WATCH_TOPIC_LIST; one that does anyway is refused, and a pattern consumer
goes on polling.

These commands are not in the front end's `wire.proto` subset, so their bodies arrive as unknown
fields of BaseCommand (each under the field number equal to its type, as in Pulsar's
PulsarApi.proto), and each carries its request id as field 1 (a varint)."""

from __future__ import annotations

from google.protobuf.unknown_fields import UnknownFieldSet

from adapters.pulsar.frontend import replies
from adapters.pulsar.wire import wire_pb2 as pb

Cmd = pb.BaseCommand

_WATCH = ("topic-list watching is not served: pattern subscriptions poll "
          "GET_TOPICS_OF_NAMESPACE")
_TRANSACTIONS = "transactions are not served"
NOT_SERVED: dict[int, str] = {
    Cmd.CONSUMER_STATS: "consumer stats are not served",
    Cmd.WATCH_TOPIC_LIST: _WATCH,
    Cmd.WATCH_TOPIC_LIST_CLOSE: _WATCH,
    Cmd.NEW_TXN: _TRANSACTIONS,
    Cmd.ADD_PARTITION_TO_TXN: _TRANSACTIONS,
    Cmd.ADD_SUBSCRIPTION_TO_TXN: _TRANSACTIONS,
    Cmd.END_TXN: _TRANSACTIONS,
    Cmd.END_TXN_ON_PARTITION: _TRANSACTIONS,
    Cmd.END_TXN_ON_SUBSCRIPTION: _TRANSACTIONS,
    Cmd.TC_CLIENT_CONNECT_REQUEST: _TRANSACTIONS,
}
"""The commands answered with an error, and why."""


def refusal(cmd: pb.BaseCommand) -> bytes | None:
    """The ERROR for an unserved command with a request id; None for any other command."""
    if not cmd.HasField("type") or cmd.type not in NOT_SERVED:
        return None
    request_id = _request_id(cmd)
    if request_id is None:
        return None
    name = Cmd.Type.Name(cmd.type)
    return replies.error(request_id, pb.NotAllowedError, f"{name}: {NOT_SERVED[cmd.type]}")


def _request_id(cmd: pb.BaseCommand) -> int | None:
    """Field 1 (a varint) of the command's body, None when it has none."""
    unknown = UnknownFieldSet(cmd)
    for i in range(len(unknown)):
        item = unknown[i]
        if item.field_number == cmd.type and isinstance(item.data, bytes):
            return _field_one(item.data)
    return None


def _field_one(data: bytes) -> int | None:
    """The varint of field 1 in serialized message `data`, None when absent or malformed."""
    pos = 0
    while pos < len(data):
        tag, pos = _varint(data, pos)
        if tag is None:
            return None
        number, wire = tag >> 3, tag & 7
        if wire == 0:
            value, pos = _varint(data, pos)
            if value is None:
                return None
            if number == 1:
                return value
        elif wire == 1:
            pos += 8
        elif wire == 2:
            size, pos = _varint(data, pos)
            if size is None:
                return None
            pos += size
        elif wire == 5:
            pos += 4
        else:
            return None
    return None


def _varint(data: bytes, pos: int) -> tuple[int | None, int]:
    """A varint at `pos` (at most 10 bytes) and the position after it; None when cut short."""
    value = shift = 0
    for i in range(pos, min(pos + 10, len(data))):
        byte = data[i]
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value & (2**64 - 1), i + 1
        shift += 7
    return None, len(data)
