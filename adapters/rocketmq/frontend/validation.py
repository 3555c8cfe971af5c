"""Range checks of every MessagingService request, in one place, before the engine sees it.

`RequestChecks.check(request)` raises `codec.Rejected` (the field, the value cut short, the
allowed range, and the RocketMQ v2 status code that names the problem) or `Unimplemented`.
Names, sizes and times follow the RocketMQ 5 protocol and its proxy's documented defaults;
message count and the furthest delivery time are the gateway's own limits, the same as on its
gRPC API. The whole message's size and the reserved property names are checked on the message
the engine gets (`sending`), by the engine's own rules. Values the gateway ignores (born host,
...) are not checked: they never reach the engine.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rocketmq.grpc_protocol import definition_pb2

from adapters.rocketmq.dialect import INVISIBLE_RANGE_MS
from gateway.core.properties import TIME_MAX_MS
from gateway.core.selector import MessageSelector, SelectorError
from gateway.errors import Unimplemented
from gateway.limits import MAX_BATCH, MAX_DELAY_MS, MAX_PUBLISH_PROPERTIES

from . import codec
from .codec import NANOS_MAX, Rejected
from .codec import duration_ms as _duration_ms
from .settings import RECEIVE_BATCH_MAX
from .transactions import transactional

Code = definition_pb2.Code
MessageType = definition_pb2.MessageType
FilterType = definition_pb2.FilterType
ClientType = definition_pb2.ClientType
Encoding = definition_pb2.Encoding
Resolution = definition_pb2.TransactionResolution
TransactionSource = definition_pb2.TransactionSource
AddressScheme = definition_pb2.AddressScheme

TOPIC_MAX_CHARS = 127
GROUP_MAX_CHARS = 255
NAMESPACE_MAX_CHARS = 64
NAME_CHARS = "a-z A-Z 0-9 % | _ -"
MESSAGE_ID_MAX_CHARS = 128
MESSAGE_GROUP_MAX_BYTES = 63
"""RocketMQ refuses message groups of 64 UTF-8 bytes and more."""
MAX_KEYS = 128
MAX_USER_PROPERTIES = 128
PROPERTIES_MAX_BYTES = 16 * 1024
"""Tag, keys and user properties together (RocketMQ's `maxUserPropertySize`)."""
RECEIPT_HANDLE_MAX_CHARS = 512
FILTER_MAX_CHARS = 16 * 1024
LONG_POLLING_MAX_MS = 3_600_000
"""Longest long-polling time a client may ask for; a receive waits at most 60 s of it."""
PUSH_RETRY_MAX_MS = 86_400_000
"""Longest back-off step a push consumer may report (its ChangeInvisibleDuration)."""
MAX_ADDRESSES = 16
HOST_MAX_CHARS = 255
MAX_SETTINGS_ENTRIES = 1024
"""Topics a producer or subscriptions a consumer may declare in its Settings."""
DAY_MS = 86_400_000

_NAME = re.compile(r"[%|a-zA-Z0-9_-]+")
_NAMESPACE = re.compile(r"[a-zA-Z0-9_-]*")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_ACCEPTED_TYPES = (MessageType.MESSAGE_TYPE_UNSPECIFIED, MessageType.NORMAL, MessageType.FIFO,
                   MessageType.DELAY, MessageType.TRANSACTION)
_UNSUPPORTED_TYPES = (MessageType.LITE,)
_ENCODINGS = (Encoding.ENCODING_UNSPECIFIED, Encoding.IDENTITY)
_FILTERS = (FilterType.FILTER_TYPE_UNSPECIFIED, FilterType.TAG, FilterType.SQL)
TAGS = "TAGS"
"""The name an SQL92 filter gives a message's tag."""


@dataclass(frozen=True, slots=True)
class Limits:
    """The configured sizes the checks hold requests to."""

    max_body_bytes: int
    """Largest message body (the front end's `max_body_size`). The whole message's size
    (the gateway's `max_message_bytes`) is checked on the message the engine gets
    (`sending.out_messages`), by the engine's own rule."""


def _utf8_len(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8"))


def _has_control(text: str) -> bool:
    return _CONTROL.search(text) is not None


def _name(resource: Any, field: str, code: int, max_chars: int) -> None:
    """A topic or group `Resource`: its name and namespace."""
    name = resource.name
    if not name or len(name) > max_chars or not _NAME.fullmatch(name):
        raise Rejected(code, f"{field}.name", name, f"1..{max_chars} characters of {NAME_CHARS}")
    namespace = resource.resource_namespace
    if len(namespace) > NAMESPACE_MAX_CHARS or not _NAMESPACE.fullmatch(namespace):
        raise Rejected(
            code,
            f"{field}.resource_namespace",
            namespace,
            f"0..{NAMESPACE_MAX_CHARS} characters of a-z A-Z 0-9 _ -",
        )


def _topic(resource: Any, field: str) -> None:
    _name(resource, field, Code.ILLEGAL_TOPIC, TOPIC_MAX_CHARS)


def _group(resource: Any, field: str = "group") -> None:
    _name(resource, field, Code.ILLEGAL_CONSUMER_GROUP, GROUP_MAX_CHARS)


def _optional_group(request: Any) -> None:
    if request.HasField("group") and (request.group.name or request.group.resource_namespace):
        _group(request.group)


def _receipt(handle: str, field: str) -> None:
    if not handle or len(handle) > RECEIPT_HANDLE_MAX_CHARS or _has_control(handle):
        raise Rejected(
            Code.INVALID_RECEIPT_HANDLE,
            field,
            handle,
            f"a receipt handle of 1..{RECEIPT_HANDLE_MAX_CHARS} characters from a delivery",
        )


def _message_id(message_id: str, field: str, required: bool) -> None:
    blank = not message_id.strip()
    if (required and blank) or len(message_id) > MESSAGE_ID_MAX_CHARS or _has_control(message_id):
        allowed = f"{'1' if required else '0'}..{MESSAGE_ID_MAX_CHARS} printable characters"
        raise Rejected(Code.ILLEGAL_MESSAGE_ID, field, message_id, allowed)


def _no_lite_topic(request: Any) -> None:
    if request.lite_topic:
        raise Rejected(
            Code.ILLEGAL_LITE_TOPIC, "lite_topic", request.lite_topic, "empty: no lite topics"
        )


def _endpoints(endpoints: Any, field: str) -> None:
    code = Code.ILLEGAL_ACCESS_POINT
    if endpoints.scheme not in AddressScheme.values():
        raise Rejected(code, f"{field}.scheme", endpoints.scheme, "IPv4, IPv6 or DOMAIN_NAME")
    if len(endpoints.addresses) > MAX_ADDRESSES:
        raise Rejected(
            code, f"{field}.addresses", len(endpoints.addresses), f"at most {MAX_ADDRESSES}"
        )
    for index, address in enumerate(endpoints.addresses):
        host = address.host
        if not host or len(host) > HOST_MAX_CHARS or _has_control(host) or " " in host:
            raise Rejected(
                code, f"{field}.addresses[{index}].host", host, f"1..{HOST_MAX_CHARS} characters"
            )
        if not 0 <= address.port <= 65_535:
            raise Rejected(code, f"{field}.addresses[{index}].port", address.port, "0..65535")


def _filter(expression: Any, field: str) -> None:
    code = Code.ILLEGAL_FILTER_EXPRESSION
    if expression.type not in _FILTERS:
        raise Rejected(code, f"{field}.type", expression.type, "TAG or SQL")
    text = expression.expression
    if expression.type == FilterType.SQL:
        try:
            MessageSelector.compile(text, TAGS)
        except SelectorError as exc:
            raise Rejected(code, f"{field}.expression", text,
                           f"an SQL92 condition ({exc})") from None
        return
    if len(text) > FILTER_MAX_CHARS or _has_control(text):
        raise Rejected(
            code,
            f"{field}.expression",
            text,
            f"tags joined by '||', at most {FILTER_MAX_CHARS} characters",
        )


def _delivery_time(props: Any, field: str, now_ms: int) -> None:
    code = Code.ILLEGAL_DELIVERY_TIME
    stamp = props.delivery_timestamp
    if not 0 <= stamp.nanos <= NANOS_MAX:
        raise Rejected(code, f"{field}.nanos", stamp.nanos, f"0..{NANOS_MAX}")
    at_ms = codec.to_ms(stamp)
    if at_ms - now_ms > MAX_DELAY_MS:
        raise Rejected(
            code,
            field,
            f"{stamp.seconds} s",
            f"at most {MAX_DELAY_MS // DAY_MS} days ({MAX_DELAY_MS} ms) after now; "
            "a time in the past means now",
        )


def _tag_and_keys(props: Any, field: str) -> int:
    """Checks the tag and keys; returns their size in bytes."""
    size = 0
    if props.HasField("tag") and props.tag:
        tag = props.tag
        if not tag.strip() or "|" in tag or _has_control(tag):
            raise Rejected(
                Code.ILLEGAL_MESSAGE_TAG,
                f"{field}.tag",
                tag,
                "a non-blank tag without '|' or control characters",
            )
        size += _utf8_len(tag)
    keys = props.keys
    if len(keys) > MAX_KEYS:
        raise Rejected(Code.ILLEGAL_MESSAGE_KEY, f"{field}.keys", len(keys), f"0..{MAX_KEYS} keys")
    for index, key in enumerate(keys):
        if not key.strip() or " " in key or _has_control(key):
            raise Rejected(
                Code.ILLEGAL_MESSAGE_KEY,
                f"{field}.keys[{index}]",
                key,
                "a non-blank key without spaces or control characters",
            )
        size += _utf8_len(key) + 1
    return size


def _message_group(props: Any, message_type: int, field: str) -> None:
    group = props.message_group if props.HasField("message_group") else ""
    if message_type == MessageType.FIFO and not group:
        raise Rejected(
            Code.BAD_REQUEST, f"{field}.message_group", "", "a message group for FIFO messages"
        )
    size = _utf8_len(group)
    if group and (not group.strip() or size > MESSAGE_GROUP_MAX_BYTES or _has_control(group)):
        raise Rejected(
            Code.ILLEGAL_MESSAGE_GROUP,
            f"{field}.message_group",
            group,
            f"1..{MESSAGE_GROUP_MAX_BYTES} UTF-8 bytes, not blank, no control characters",
        )


def _user_properties(message: Any, field: str) -> int:
    """Checks the user properties; returns their size in bytes."""
    properties = message.user_properties
    if len(properties) > MAX_USER_PROPERTIES:
        raise Rejected(
            Code.MESSAGE_PROPERTIES_TOO_LARGE,
            f"{field}.user_properties",
            f"{len(properties)} properties",
            f"at most {MAX_USER_PROPERTIES}",
        )
    size = 0
    for key in properties:
        if not key or _has_control(key):
            raise Rejected(
                Code.ILLEGAL_MESSAGE_PROPERTY_KEY,
                f"{field}.user_properties",
                key,
                "non-empty keys without control characters",
            )
        if key in codec.SYSTEM_PROPERTIES:
            raise Rejected(
                Code.ILLEGAL_MESSAGE_PROPERTY_KEY,
                f"{field}.user_properties",
                key,
                "a name RocketMQ does not use itself: this one is a system property "
                f"({codec.KEYS_PROPERTY!r} carries the message keys, 'TAGS' the tag, ...)",
            )
        size += _utf8_len(key) + _utf8_len(properties[key])
    return size


class RequestChecks:
    """Checks each MessagingService request (and Telemetry command) before it is served."""

    def __init__(self, limits: Limits, now_ms: Callable[[], int]) -> None:
        self._limits = limits
        self._now_ms = now_ms
        self._by_type: dict[str, Callable[[Any], None]] = {
            "apache.rocketmq.v2.QueryRouteRequest": self._query_route,
            "apache.rocketmq.v2.QueryAssignmentRequest": self._query_assignment,
            "apache.rocketmq.v2.HeartbeatRequest": self._heartbeat,
            "apache.rocketmq.v2.NotifyClientTerminationRequest": _optional_group,
            "apache.rocketmq.v2.TelemetryCommand": self._telemetry,
            "apache.rocketmq.v2.SendMessageRequest": self._send,
            "apache.rocketmq.v2.ReceiveMessageRequest": self._receive,
            "apache.rocketmq.v2.AckMessageRequest": self._ack,
            "apache.rocketmq.v2.ChangeInvisibleDurationRequest": self._change_invisible,
            "apache.rocketmq.v2.ForwardMessageToDeadLetterQueueRequest": self._forward,
            "apache.rocketmq.v2.EndTransactionRequest": _end_transaction,
        }

    def check(self, request: Any) -> None:
        """Raise `Rejected` / `Unimplemented` for a value out of range; return otherwise."""
        checker = self._by_type.get(request.DESCRIPTOR.full_name)
        if checker is not None:
            checker(request)

    # --- routes, heartbeats, settings ----------------------------------------------------

    def _query_route(self, request: Any) -> None:
        _topic(request.topic, "topic")
        _endpoints(request.endpoints, "endpoints")

    def _query_assignment(self, request: Any) -> None:
        _topic(request.topic, "topic")
        _group(request.group)
        _endpoints(request.endpoints, "endpoints")

    def _heartbeat(self, request: Any) -> None:
        _optional_group(request)
        _client_type(request.client_type, "client_type")

    def _telemetry(self, command: Any) -> None:
        if not command.HasField("settings"):
            return
        settings = command.settings
        _client_type(settings.client_type, "settings.client_type")
        _endpoints(settings.access_point, "settings.access_point")
        topics = settings.publishing.topics
        _count(len(topics), "settings.publishing.topics")
        for index, topic in enumerate(topics):
            _topic(topic, f"settings.publishing.topics[{index}]")
        if not settings.HasField("subscription"):
            return
        subscription = settings.subscription
        if subscription.group.name or subscription.group.resource_namespace:
            _group(subscription.group, "settings.subscription.group")
        entries = subscription.subscriptions
        _count(len(entries), "settings.subscription.subscriptions")
        for index, entry in enumerate(entries):
            field = f"settings.subscription.subscriptions[{index}]"
            _topic(entry.topic, f"{field}.topic")
            _filter(entry.expression, f"{field}.expression")
        if subscription.HasField("long_polling_timeout"):
            _duration_ms(subscription.long_polling_timeout,
                         "settings.subscription.long_polling_timeout",
                         Code.ILLEGAL_POLLING_TIME, 0, LONG_POLLING_MAX_MS)

    # --- publishing ----------------------------------------------------------------------

    def _send(self, request: Any) -> None:
        count = len(request.messages)
        if not 1 <= count <= MAX_BATCH:
            raise Rejected(Code.BAD_REQUEST, "messages", count, f"1..{MAX_BATCH} per request")
        # Keys cost what properties cost: 10,000 messages of 128 keys held the loop for 1.3 s.
        total = sum(len(m.user_properties) + len(m.system_properties.keys)
                    for m in request.messages)
        if total > MAX_PUBLISH_PROPERTIES:
            raise Rejected(Code.BAD_REQUEST, "messages", f"{total} user properties and keys",
                           f"at most {MAX_PUBLISH_PROPERTIES} in one request, all messages "
                           "together")
        now_ms = self._now_ms()
        for index, message in enumerate(request.messages):
            self._message(message, f"messages[{index}]", now_ms)

    def _message(self, message: Any, field: str, now_ms: int) -> None:
        _topic(message.topic, f"{field}.topic")
        props = message.system_properties
        system = f"{field}.system_properties"
        message_type = props.message_type
        if message_type in _UNSUPPORTED_TYPES:
            raise Unimplemented(
                f"{MessageType.Name(message_type)} messages are not supported by the gateway"
            )
        if message_type not in _ACCEPTED_TYPES:
            raise Rejected(
                Code.BAD_REQUEST, f"{system}.message_type", message_type,
                "NORMAL, FIFO, DELAY or TRANSACTION")
        if message_type == MessageType.TRANSACTION:
            transactional(props, system)
        if props.body_encoding not in _ENCODINGS:
            raise Unimplemented(
                f"{system}.body_encoding={props.body_encoding}: only IDENTITY (uncompressed) "
                "bodies are supported"
            )
        _message_id(props.message_id, f"{system}.message_id", required=True)
        body = len(message.body)
        if not body:
            raise Rejected(Code.MESSAGE_BODY_EMPTY, f"{field}.body", b"", "a non-empty body")
        limits = self._limits
        if body > limits.max_body_bytes:
            raise Rejected(Code.MESSAGE_BODY_TOO_LARGE, f"{field}.body", f"<{body} bytes>",
                           f"at most {limits.max_body_bytes} bytes")
        if props.HasField("born_timestamp"):  # kept: deliveries show it (`codec.born_ms`)
            _duration_ms(props.born_timestamp, f"{system}.born_timestamp", Code.BAD_REQUEST, 0,
                         TIME_MAX_MS)
        if props.HasField("delivery_timestamp"):
            _delivery_time(props, f"{system}.delivery_timestamp", now_ms)
        elif message_type == MessageType.DELAY:
            raise Rejected(
                Code.ILLEGAL_DELIVERY_TIME,
                f"{system}.delivery_timestamp",
                None,
                "a delivery time for DELAY messages",
            )
        extra = _tag_and_keys(props, system) + _user_properties(message, field)
        if extra > PROPERTIES_MAX_BYTES:
            raise Rejected(
                Code.MESSAGE_PROPERTIES_TOO_LARGE,
                f"{field}: tag + keys + user_properties",
                f"{extra} bytes",
                f"at most {PROPERTIES_MAX_BYTES} bytes",
            )
        _message_group(props, message_type, system)

    # --- consuming -----------------------------------------------------------------------

    def _receive(self, request: Any) -> None:
        _group(request.group)
        _topic(request.message_queue.topic, "message_queue.topic")
        _filter(request.filter_expression, "filter_expression")
        if not 0 <= request.batch_size <= RECEIVE_BATCH_MAX:
            raise Rejected(Code.BAD_REQUEST, "batch_size", request.batch_size,
                           f"0..{RECEIVE_BATCH_MAX} (0 means 1)")
        if not request.auto_renew:
            low, high = INVISIBLE_RANGE_MS
            if not request.HasField("invisible_duration"):
                raise Rejected(
                    Code.ILLEGAL_INVISIBLE_TIME,
                    "invisible_duration",
                    None,
                    f"required for a simple consumer: {low}..{high} ms",
                )
            _duration_ms(
                request.invisible_duration, "invisible_duration", Code.ILLEGAL_INVISIBLE_TIME,
                low, high,
            )
        if request.HasField("long_polling_timeout"):
            _duration_ms(request.long_polling_timeout, "long_polling_timeout",
                         Code.ILLEGAL_POLLING_TIME, 0, LONG_POLLING_MAX_MS)

    def _settle_target(self, request: Any) -> None:
        _group(request.group)
        _topic(request.topic, "topic")

    def _ack(self, request: Any) -> None:
        self._settle_target(request)
        count = len(request.entries)
        if not 1 <= count <= MAX_BATCH:
            raise Rejected(Code.BAD_REQUEST, "entries", count, f"1..{MAX_BATCH} per request")
        for index, entry in enumerate(request.entries):
            field = f"entries[{index}]"
            _receipt(entry.receipt_handle, f"{field}.receipt_handle")
            _message_id(entry.message_id, f"{field}.message_id", required=False)
            _no_lite_topic(entry)

    def _change_invisible(self, request: Any) -> None:
        self._settle_target(request)
        _receipt(request.receipt_handle, "receipt_handle")
        _message_id(request.message_id, "message_id", required=False)
        _no_lite_topic(request)
        kind, _ = codec.unwrap_receipt(request.receipt_handle)
        low, high = INVISIBLE_RANGE_MS if kind == codec.SIMPLE else (0, PUSH_RETRY_MAX_MS)
        _duration_ms(
            request.invisible_duration, "invisible_duration", Code.ILLEGAL_INVISIBLE_TIME,
            low, high,
        )

    def _forward(self, request: Any) -> None:
        self._settle_target(request)
        _receipt(request.receipt_handle, "receipt_handle")
        _message_id(request.message_id, "message_id", required=False)
        _no_lite_topic(request)
        for field in ("delivery_attempt", "max_delivery_attempts"):
            value = getattr(request, field)
            if value < 0:
                raise Rejected(Code.BAD_REQUEST, field, value, "0 or more")


def _end_transaction(request: Any) -> None:
    _topic(request.topic, "topic")
    _message_id(request.message_id, "message_id", required=True)
    _message_id(request.transaction_id, "transaction_id", required=True)
    if request.resolution not in (Resolution.COMMIT, Resolution.ROLLBACK):
        raise Rejected(Code.BAD_REQUEST, "resolution", request.resolution, "COMMIT or ROLLBACK")
    if request.source not in TransactionSource.values():
        raise Rejected(Code.BAD_REQUEST, "source", request.source, "a TransactionSource")


def _client_type(value: int, field: str) -> None:
    if value not in ClientType.values():
        raise Rejected(Code.UNRECOGNIZED_CLIENT_TYPE, field, value, "a ClientType of the protocol")


def _count(count: int, field: str) -> None:
    if count > MAX_SETTINGS_ENTRIES:
        raise Rejected(Code.BAD_REQUEST, field, count, f"at most {MAX_SETTINGS_ENTRIES} entries")
