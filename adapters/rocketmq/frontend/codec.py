"""Translation between RocketMQ 5 protocol messages and the engine's shapes."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from rocketmq.grpc_protocol import definition_pb2

from adapters.rocketmq.naming import with_namespace
from gateway.backend.base import OutMessage
from gateway.core.properties import TRACEPARENT, TRACESTATE
from gateway.engine.api import Delivery
from gateway.errors import GatewayError, InvalidArgument, MessageTooLarge
from gateway.tracing.context import carry

Code = definition_pb2.Code
MessageType = definition_pb2.MessageType

KEYS_PROPERTY = "KEYS"
"""Property that carries the SDK's message keys (space separated, as RocketMQ 4.x stores them)."""
DLQ_ORIGIN_TOPIC = "DLQ_ORIGIN_TOPIC"
DLQ_ORIGIN_MESSAGE_ID = "DLQ_ORIGIN_MESSAGE_ID"

SYSTEM_PROPERTIES = frozenset({
    "TRACE_ON", "MSG_REGION", KEYS_PROPERTY, "TAGS", "WAIT", "DELAY", "RETRY_TOPIC",
    "REAL_TOPIC", "REAL_QID", "TRAN_MSG", "PGROUP", "MIN_OFFSET", "MAX_OFFSET", "BUYER_ID",
    "ORIGIN_MESSAGE_ID", "TRANSFER_FLAG", "CORRECTION_FLAG", "MQ2_FLAG", "RECONSUME_TIME",
    "UNIQ_KEY", "MAX_RECONSUME_TIMES", "CONSUME_START_TIME", "POP_CK", "POP_CK_OFFSET",
    "1ST_POP_TIME", "TRAN_PREPARED_QUEUE_OFFSET", "DUP_INFO", "EXTEND_UNIQ_INFO", "INSTANCE_ID",
    "CORRELATION_ID", "REPLY_TO_CLIENT", "TTL", "ARRIVE_TIME", "PUSH_REPLY_TIME", "CLUSTER",
    "MSG_TYPE", "INNER_MULTI_QUEUE_OFFSET", "TIMER_DELAY_MS", "TIMER_DELAY_SEC",
    "TIMER_DELIVER_MS", "TIMER_ENQUEUE_MS", "TIMER_DEQUEUE_MS", "TIMER_ROLL_TIMES",
    "TIMER_OUT_MS", "TIMER_DEL_UNIQKEY", "TIMER_DELAY_LEVEL", "__BORNHOST", "BORN_TIMESTAMP",
    DLQ_ORIGIN_TOPIC, DLQ_ORIGIN_MESSAGE_ID,
})
"""Property names RocketMQ keeps for itself (its `MessageConst.STRING_HASH_SET`): its proxy refuses
them as user properties (ILLEGAL_MESSAGE_PROPERTY_KEY) and never shows them to an SDK as user
properties. The gateway writes some of them on retry copies and dead letters (`dialect`), where
other front ends' consumers read them."""

PUSH = "p"
SIMPLE = "s"
"""Receipt-handle prefixes: which kind of consumer a delivery went to."""

_GATEWAY_CODES: Mapping[str, int] = {
    "INVALID_ARGUMENT": Code.BAD_REQUEST,
    "FAILED_PRECONDITION": Code.INVALID_RECEIPT_HANDLE,
    "NOT_FOUND": Code.NOT_FOUND,
    "ALREADY_EXISTS": Code.BAD_REQUEST,
    "RESOURCE_EXHAUSTED": Code.MESSAGE_BODY_TOO_LARGE,
    "UNAVAILABLE": Code.INTERNAL_SERVER_ERROR,
    "UNAUTHENTICATED": Code.UNAUTHORIZED,
    "PERMISSION_DENIED": Code.FORBIDDEN,
    "UNIMPLEMENTED": Code.UNSUPPORTED,
    "INTERNAL": Code.INTERNAL_ERROR,
}


STATUS_MAX_CHARS = 1024
NANOS_MAX = 999_999_999
"""Longest status message sent back (values in errors are cut by `gateway.errors`)."""



class Rejected(InvalidArgument):
    """A request value out of its range, refused with the RocketMQ status code that names it."""

    def __init__(self, status_code: int, field: str, value: object, allowed: str) -> None:
        super().__init__(field, value, allowed)
        self.status_code = status_code


def rocketmq_code(gateway_code: str) -> int:
    """RocketMQ status code for a `gateway.errors` code name."""
    return _GATEWAY_CODES.get(gateway_code, Code.INTERNAL_ERROR)


def cut(message: str) -> str:
    """An error message no longer than `STATUS_MAX_CHARS` (and a marker where it was cut)."""
    if len(message) > STATUS_MAX_CHARS:
        return message[:STATUS_MAX_CHARS] + "... (cut)"
    return message


def status(code: int = Code.OK, message: str = "OK") -> Any:
    """A `Status` message; every response needs one. Long messages are cut."""
    return definition_pb2.Status(code=code, message=cut(message))


def overall(statuses: Sequence[Any]) -> Any:
    """The status of a response with one status per entry: OK, the failure when every entry
    failed, MULTIPLE_RESULTS when some did."""
    failed = [s for s in statuses if s.code != Code.OK]
    if not failed:
        return status()
    if len(failed) == len(statuses):
        return failed[0]
    return status(Code.MULTIPLE_RESULTS, f"{len(failed)} of {len(statuses)} entries failed")


def error_status(error: GatewayError) -> Any:
    if isinstance(error, Rejected):
        return status(error.status_code, error.message)
    if error.code == "RESOURCE_EXHAUSTED" and not isinstance(error, MessageTooLarge):
        return status(Code.TOO_MANY_REQUESTS, error.message)  # a limit on groups or calls
    return status(rocketmq_code(error.code), error.message)


def wrap_receipt(kind: str, receipt: str) -> str:
    """Receipt handle handed to the SDK: the engine's receipt, tagged with the consumer kind."""
    return f"{kind}.{receipt}"


def unwrap_receipt(handle: str) -> tuple[str, str]:
    """(kind, engine receipt) of a receipt handle; unknown tags count as simple consumers."""
    kind, sep, receipt = handle.partition(".")
    if sep and kind in (PUSH, SIMPLE):
        return kind, receipt
    return SIMPLE, handle


def store_name(resource: Any) -> str:
    """The store's name of a topic or group `Resource`: its name within its namespace."""
    return with_namespace(resource.resource_namespace, resource.name)


def md5_hex(body: bytes) -> str:
    """Body digest the SDKs check: MD5 in uppercase hex, what a RocketMQ 5 proxy sends. (The SDKs
    do not agree on how a CRC32 digest is written: the Python SDK wants 8 hex digits, the Java
    SDK hex without leading zeros, the Node.js SDK decimal; a push consumer discards a message
    whose digest it does not match, to the dead-letter topic.)"""
    return hashlib.md5(body, usedforsecurity=False).hexdigest().upper()


def to_ms(stamp: Any) -> int:
    """Milliseconds of a protobuf Timestamp or Duration."""
    return int(stamp.seconds) * 1000 + int(stamp.nanos) // 1_000_000


def duration_ms(duration: Any, field: str, code: int, low_ms: int, high_ms: int) -> int:
    """A protobuf Duration within low..high ms."""
    allowed = f"{low_ms}..{high_ms} ms"
    seconds, nanos = duration.seconds, duration.nanos
    if seconds < 0 or not 0 <= nanos <= NANOS_MAX:
        raise Rejected(code, field, f"{seconds} s {nanos} ns", allowed)
    ms = to_ms(duration)
    if not low_ms <= ms <= high_ms:
        raise Rejected(code, field, f"{ms} ms", allowed)
    return ms


def set_to_ms(stamp: Any, ms: int) -> None:
    stamp.seconds = ms // 1000
    stamp.nanos = (ms % 1000) * 1_000_000


def out_message(message: Any, now_ms: int) -> OutMessage:
    """Engine message for one SDK message that `validation` accepted.

    A delivery time at or before `now_ms` means at once."""
    props = message.system_properties
    deliver_at_ms = 0
    if props.HasField("delivery_timestamp"):
        deliver_at_ms = to_ms(props.delivery_timestamp)
        if deliver_at_ms <= now_ms:
            deliver_at_ms = 0
    properties = dict(message.user_properties)
    if props.keys:
        properties[KEYS_PROPERTY] = " ".join(props.keys)
    if props.HasField("trace_context"):  # the SDK's W3C traceparent (valid ones only)
        carry(properties, props.trace_context, properties.get(TRACESTATE, ""))
    return OutMessage(
        body=bytes(message.body),
        properties=properties,
        key=props.message_group if props.HasField("message_group") else "",
        tag=props.tag if props.HasField("tag") else "",
        deliver_at_ms=deliver_at_ms,
        message_id=props.message_id,
    )


def born_ms(message: Any) -> int:
    """The send time the SDK gave a message (0: none): kept as its born time, which a RocketMQ
    consumer reads as `born_timestamp` (the store time is `store_timestamp`)."""
    props = message.system_properties
    return to_ms(props.born_timestamp) if props.HasField("born_timestamp") else 0


def producer_delivery_ms(delivery: Delivery) -> int:
    """The delivery time its producer gave the message (0: none). A retry copy's time is its
    back-off, not a delivery time: RocketMQ shows a retried message as it was sent."""
    if delivery.topic != delivery.original_topic:
        return 0
    return delivery.deliver_at_ms if delivery.deliver_at_ms > delivery.publish_ms else 0


def message_type_of(delivery: Delivery) -> int:
    if delivery.key:
        return int(MessageType.FIFO)
    if producer_delivery_ms(delivery):
        return int(MessageType.DELAY)
    return int(MessageType.NORMAL)


def sdk_message(delivery: Delivery, topic: Any, kind: str, invisible_ms: int, host: str) -> Any:
    """SDK message for a delivery, shown under the topic the consumer asked for."""
    msg = definition_pb2.Message()
    msg.topic.CopyFrom(topic)
    msg.body = delivery.body
    properties = dict(delivery.properties)
    keys = properties.pop(KEYS_PROPERTY, "")
    traceparent = properties.pop(TRACEPARENT, "")
    msg.user_properties.update(
        (name, value) for name, value in properties.items() if name not in SYSTEM_PROPERTIES
    )
    sp = msg.system_properties
    if traceparent:  # a RocketMQ consumer reads the trace context here, not in user properties
        sp.trace_context = traceparent
    sp.message_id = delivery.message_id
    if delivery.tag:
        sp.tag = delivery.tag
    if keys:
        sp.keys.extend(keys.split(" "))
    sp.body_digest.type = definition_pb2.DigestType.MD5
    sp.body_digest.checksum = md5_hex(delivery.body)
    sp.body_encoding = definition_pb2.Encoding.IDENTITY
    sp.message_type = message_type_of(delivery)
    set_to_ms(sp.born_timestamp, delivery.born_ms or delivery.publish_ms)
    set_to_ms(sp.store_timestamp, delivery.publish_ms)
    sp.store_host = host
    deliver_at_ms = producer_delivery_ms(delivery)
    if deliver_at_ms:
        set_to_ms(sp.delivery_timestamp, deliver_at_ms)
    sp.receipt_handle = wrap_receipt(kind, delivery.receipt)
    sp.queue_id = 0
    sp.invisible_duration.seconds = invisible_ms // 1000
    sp.invisible_duration.nanos = (invisible_ms % 1000) * 1_000_000
    sp.delivery_attempt = max(1, delivery.attempt)
    if delivery.key:
        sp.message_group = delivery.key
    origin_topic = properties.get(DLQ_ORIGIN_TOPIC)
    origin_id = properties.get(DLQ_ORIGIN_MESSAGE_ID)
    if origin_topic is not None and origin_id is not None:  # a dead letter: where it came from
        sp.dead_letter_queue.topic = origin_topic
        sp.dead_letter_queue.message_id = origin_id
    return msg
