"""Translation between the gateway.v1 messages and the engine's types."""

from __future__ import annotations

from gateway.backend import OutMessage
from gateway.engine.api import (
    ConsumerType,
    Delivery,
    SettleAction,
    Settlement,
    SettleResult,
    SubscriptionSpec,
)
from gateway.errors import InvalidArgument
from gateway.v1 import gateway_pb2 as pb

CONSUMER_TYPES: dict[int, ConsumerType] = {
    pb.CONSUMER_TYPE_SHARED: ConsumerType.SHARED,
    pb.CONSUMER_TYPE_KEY_SHARED: ConsumerType.KEY_SHARED,
    pb.CONSUMER_TYPE_EXCLUSIVE: ConsumerType.EXCLUSIVE,
    pb.CONSUMER_TYPE_FAILOVER: ConsumerType.FAILOVER,
}
MAX_DELAY_MS = 400 * 24 * 3_600_000


def consumer_type(value: int) -> ConsumerType:
    try:
        return CONSUMER_TYPES[value]
    except KeyError:
        allowed = "SHARED, KEY_SHARED, EXCLUSIVE, FAILOVER"
        raise InvalidArgument("consumer_type", value, allowed) from None


def out_message(message: pb.Message, now_ms: int, index: int) -> OutMessage:
    if message.deliver_at_ms and message.delay_ms:
        raise InvalidArgument(f"messages[{index}].delay_ms", message.delay_ms,
                              "not together with deliver_at_ms")
    if message.delay_ms < 0 or message.delay_ms > MAX_DELAY_MS:
        raise InvalidArgument(f"messages[{index}].delay_ms", message.delay_ms,
                              f"0..{MAX_DELAY_MS} ms")
    if message.deliver_at_ms < 0:
        raise InvalidArgument(f"messages[{index}].deliver_at_ms", message.deliver_at_ms,
                              "0 (now) or a wall-clock time in ms")
    deliver_at = message.deliver_at_ms or (now_ms + message.delay_ms if message.delay_ms else 0)
    return OutMessage(
        body=message.body,
        properties=dict(message.properties),
        key=message.key,
        tag=message.tag,
        deliver_at_ms=deliver_at,
    )


def subscription(msg: pb.Subscribe | pb.ReceiveRequest) -> SubscriptionSpec:
    if not msg.policy:
        raise InvalidArgument("policy", "", "a policy name such as rocketmq, rabbitmq, pulsar")
    broadcast = bool(getattr(msg, "broadcast", False))
    return SubscriptionSpec(
        topic=msg.topic,
        group=msg.group,
        policy=msg.policy,
        options=dict(msg.policy_options),
        consumer_type=consumer_type(msg.consumer_type),
        broadcast=broadcast,
        naming=msg.naming,
        consumer_id=getattr(msg, "consumer_id", ""),
        tag_filter=msg.tag_filter,
    )


def settlement(msg: pb.Settlement, index: int) -> Settlement:
    if not msg.receipt:
        raise InvalidArgument(f"settlements[{index}].receipt", "", "the receipt of a delivery")
    kind = msg.WhichOneof("action")
    if kind == "ack":
        return Settlement(msg.receipt, SettleAction.ACK)
    if kind == "fail":
        fail = msg.fail
        return Settlement(
            msg.receipt,
            SettleAction.FAIL,
            delay_ms=fail.delay_ms if fail.HasField("delay_ms") else None,
            delay_level=fail.delay_level if fail.HasField("delay_level") else None,
            reason=fail.reason,
        )
    if kind == "change_invisible":
        return Settlement(msg.receipt, SettleAction.EXTEND,
                          invisible_ms=msg.change_invisible.invisible_ms)
    if kind == "dead_letter":
        return Settlement(msg.receipt, SettleAction.DEAD_LETTER, reason=msg.dead_letter.reason)
    raise InvalidArgument(f"settlements[{index}].action", None,
                          "one of ack, fail, change_invisible, dead_letter")


def delivery(d: Delivery) -> pb.Delivery:
    msg = pb.Delivery(
        receipt=d.receipt,
        message_id=d.message_id,
        topic=d.topic,
        original_topic=d.original_topic,
        body=d.body,
        attempt=d.attempt,
        deadline_ms=d.deadline_ms,
        publish_ms=d.publish_ms,
        group=d.group,
    )
    # Fields at their proto3 default are left unset (same message, less work per delivery).
    if d.properties:
        msg.properties.update(d.properties)
    if d.key:
        msg.key = d.key
    if d.tag:
        msg.tag = d.tag
    if d.retries:
        msg.retries = d.retries
    if d.deliver_at_ms:
        msg.deliver_at_ms = d.deliver_at_ms
    return msg


def result(r: SettleResult) -> pb.SettleResult:
    return pb.SettleResult(
        receipt=r.receipt,
        ok=r.ok,
        error_code=r.error_code,
        error=r.error,
        receipt_next=r.new_receipt,
        deadline_ms=r.deadline_ms,
    )
