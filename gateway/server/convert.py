"""Translation between the gateway.v1 messages and the engine's types."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from gateway.engine.api import (
    ACK,
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


def consumer_type(value: int) -> ConsumerType:
    """The engine's type for a checked `ConsumerType` value (see `validate`)."""
    return CONSUMER_TYPES[value]


def subscription(msg: pb.Subscribe | pb.ReceiveRequest) -> SubscriptionSpec:
    """The engine's spec for a checked subscription (see `validate`)."""
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


def settlement(msg: pb.Settlement) -> Settlement:
    """The engine's settlement for a checked one (see `validate.settlement`)."""
    kind = msg.WhichOneof("action")
    if kind == "ack":
        return Settlement(msg.receipt, ACK)
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
    return Settlement(msg.receipt, SettleAction.DEAD_LETTER, reason=msg.dead_letter.reason)


def in_order(
    count: int, refused: dict[int, SettleResult], done: Sequence[SettleResult]
) -> list[SettleResult]:
    """The results of a batch of `count` settlements in its order: `refused` by position, and
    `done` (the engine's results for the others, in order) in the remaining places."""
    rest = iter(done)
    return [refused[i] if i in refused else next(rest) for i in range(count)]


def failed_acks(
    receipts: Sequence[str], failed: dict[int, SettleResult], field: str = "acks"
) -> list[SettleResult]:
    """The failures among `SettleBatch.acks` (or `fails`) in their order, from the engine's
    failures by position; an empty receipt is refused as INVALID_ARGUMENT."""
    out: list[SettleResult] = []
    for i in sorted(failed):
        if receipts[i]:
            out.append(failed[i])
        else:
            error = InvalidArgument(f"{field}[{i}]", "", "the receipt of a delivery")
            out.append(SettleResult("", False, error.code, error.message))
    return out


def delivery(d: Delivery) -> pb.Delivery:
    msg = pb.Delivery()
    fill_delivery(msg, d)
    return msg


def fill_delivery(msg: pb.Delivery, d: Delivery) -> None:
    """Set the fields of an empty `msg` from `d`. Fields at their proto3 default are left unset
    (the same message on the wire, less work per delivery)."""
    msg.receipt = d.receipt
    msg.message_id = d.message_id
    msg.topic = d.topic
    msg.original_topic = d.original_topic
    msg.body = d.body
    msg.attempt = d.attempt
    if d.deadline_ms:
        msg.deadline_ms = d.deadline_ms
    msg.publish_ms = d.publish_ms
    msg.group = d.group
    if d.properties:
        target = msg.properties  # item by item: the map's `update` is Python-level, and slower
        for k, v in d.properties.items():
            target[k] = v
    if d.key:
        msg.key = d.key
    if d.tag:
        msg.tag = d.tag
    if d.retries:
        msg.retries = d.retries
    if d.deliver_at_ms:
        msg.deliver_at_ms = d.deliver_at_ms


def add_deliveries(target: Any, deliveries: Iterable[Delivery]) -> None:
    """Append `deliveries` to a repeated pb.Delivery field, each built in place (building them
    apart and passing the list to a constructor copies every message once more)."""
    add = target.add
    for d in deliveries:
        fill_delivery(add(), d)


def result(r: SettleResult) -> pb.SettleResult:
    msg = pb.SettleResult()
    fill_result(msg, r)
    return msg


def fill_result(msg: pb.SettleResult, r: SettleResult) -> None:
    """Set the fields of an empty `msg` from `r`, leaving proto3 defaults unset."""
    msg.receipt = r.receipt
    if r.ok:
        msg.ok = True
    if r.error_code:
        msg.error_code = r.error_code
    if r.error:
        msg.error = r.error
    if r.new_receipt:
        msg.receipt_next = r.new_receipt
    if r.deadline_ms:
        msg.deadline_ms = r.deadline_ms


def add_results(target: Any, results: Iterable[SettleResult]) -> None:
    """Append `results` to a repeated pb.SettleResult field, each built in place."""
    add = target.add
    for r in results:
        fill_result(add(), r)
