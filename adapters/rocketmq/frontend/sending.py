"""SendMessage: the engine messages of one request, checked whole before any is published.

A request may hold messages for several topics; the engine publishes one topic at a time. So
every message is first checked here with the rules the engine applies (`gateway.limits`: the
reserved property names, the size of the very `OutMessage` that is published, the delivery
time), naming `messages[i]` by its index in the request: a request the engine would refuse
part of is refused whole, before anything is stored. If a later topic's publish still fails
(the store is away, say), the answer says entry by entry what was stored: the stored entries
OK with their ids, the others with the error, so a client retries only those.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from rocketmq.grpc_protocol import definition_pb2, service_pb2

from gateway.backend import OutMessage
from gateway.engine.port import EnginePort
from gateway.errors import GatewayError, InvalidArgument
from gateway.limits import check_deliver_at, check_properties, message_size

from . import codec
from .codec import Rejected
from .transactions import HALF_TOPIC

Code = definition_pb2.Code

SIZE_FIELDS = "body + keys + tag + message_group + user_properties + trace_context"
"""What counts against the maximum message size, as the SDK names the fields."""


def out_messages(request: Any, now_ms: int, max_message_bytes: int) -> list[OutMessage]:
    """The engine message of each message of `request` (which `validation` accepted), each
    checked as the engine checks it; raises `Rejected` naming `messages[i]`."""
    built = []
    for index, message in enumerate(request.messages):
        out = codec.out_message(message, now_ms)
        _check(out, f"messages[{index}]", now_ms, max_message_bytes)
        built.append(out)
    return built


def _check(out: OutMessage, field: str, now_ms: int, max_message_bytes: int) -> None:
    try:
        check_properties(f"{field}.user_properties", out.properties)
    except InvalidArgument as error:
        raise Rejected(Code.ILLEGAL_MESSAGE_PROPERTY_KEY, error.field, error.value,
                       error.allowed) from None
    if out.deliver_at_ms:
        try:
            check_deliver_at(f"{field}.system_properties.delivery_timestamp",
                             out.deliver_at_ms, now_ms)
        except InvalidArgument as error:
            raise Rejected(Code.ILLEGAL_DELIVERY_TIME, error.field, error.value,
                           error.allowed) from None
    size = message_size(out)
    if size > max_message_bytes:
        raise Rejected(Code.PAYLOAD_TOO_LARGE, f"{field}: {SIZE_FIELDS}", f"{size} bytes",
                       f"at most {max_message_bytes} bytes")


async def publish(
    engine: EnginePort,
    request: Any,
    messages: Sequence[OutMessage],
    check_publish: Callable[[str], str],
    halves: Mapping[int, int] | None = None,
) -> Any:
    """Publish `messages` (those of `request`, in its order) topic by topic; the response
    with one entry per message, in request order. The messages at the indexes of `halves` are
    half messages of transactions, grown by the bytes given there (their headers do not count
    against the size limit): stored on `HALF_TOPIC`, their store id is the transaction id.
    `check_publish` raises unless the caller may publish to a topic, and names its principal
    (whose share of new topics a new one takes)."""
    halves = halves or {}
    by_topic: dict[str, list[int]] = {}
    checked: set[str] = set()
    owner = ""
    for index, message in enumerate(request.messages):
        topic = codec.store_name(message.topic)
        if topic not in checked:
            owner = check_publish(topic)
            checked.add(topic)
        by_topic.setdefault(HALF_TOPIC if index in halves else topic, []).append(index)
    ids: dict[int, str] = {}
    failure: GatewayError | None = None
    for topic, indexes in by_topic.items():
        try:
            published = await engine.publish(
                topic, [messages[i] for i in indexes],
                grown=[halves[i] for i in indexes] if topic == HALF_TOPIC else (),
                born=[codec.born_ms(request.messages[i]) for i in indexes],
                owner=None if topic == HALF_TOPIC else owner)
        except GatewayError as error:
            failure = error
            break
        ids.update(zip(indexes, published, strict=True))
    response = service_pb2.SendMessageResponse()
    failed = codec.error_status(failure) if failure is not None else codec.status()
    statuses = []
    for index, message in enumerate(request.messages):
        if index in halves and index in ids:
            entry = response.entries.add(status=codec.status(),
                                         message_id=message.system_properties.message_id,
                                         transaction_id=ids[index])
        elif index in ids:
            entry = response.entries.add(status=codec.status(), message_id=ids[index])
        else:
            entry = response.entries.add(status=failed,
                                         message_id=message.system_properties.message_id)
        statuses.append(entry.status)
    response.status.CopyFrom(codec.overall(statuses))
    return response


def refused(request: Any, error: GatewayError) -> Any:
    """The response to a request refused whole: every entry failed with the error."""
    response = service_pb2.SendMessageResponse()
    failed = codec.error_status(error)
    response.status.CopyFrom(failed)
    for message in request.messages:
        response.entries.add(status=failed, message_id=message.system_properties.message_id)
    return response
