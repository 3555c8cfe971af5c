"""Translation between the gateway.v1 messages and the engine's types."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

from gateway.core.registry import SUBSCRIPTION_TYPE
from gateway.core.selector import MessageSelector
from gateway.engine.api import (
    ACK,
    ConsumerType,
    Delivery,
    SettleAction,
    Settlement,
    SettleResult,
    SubscriptionSpec,
)
from gateway.errors import MESSAGE_CHARS, InvalidArgument, cut
from gateway.v1 import gateway_pb2 as pb

INVALID = InvalidArgument.code
SETTLEMENT_FIELDS = {
    "delay_ms": "fail.delay_ms",
    "delay_level": "fail.delay_level",
    "invisible_ms": "change_invisible.invisible_ms",
}
"""Where a field of the engine's `Settlement`, as the engine and the policies name it, is in a
gateway.v1 `Settlement` (`reason` is in whichever action it came with)."""
_ITEM = re.compile(r"settlements\[([0-9]+)\]\.(.+)", re.DOTALL)
"""How an atomic settle names its refused item (`Settling._decide_all`)."""
_FIELD = re.compile(r"([a-z_]+)=(.*)", re.DOTALL)
"""A bare field at the start of an `InvalidArgument` message: `delay_ms=0 is not allowed: ...`."""

CONSUMER_TYPES: dict[int, ConsumerType] = {
    pb.CONSUMER_TYPE_SHARED: ConsumerType.SHARED,
    pb.CONSUMER_TYPE_KEY_SHARED: ConsumerType.KEY_SHARED,
    pb.CONSUMER_TYPE_EXCLUSIVE: ConsumerType.EXCLUSIVE,
    pb.CONSUMER_TYPE_FAILOVER: ConsumerType.FAILOVER,
}


_BY_VALUE = {kind.value: kind for kind in ConsumerType}


def consumer_type(value: int) -> ConsumerType:
    """The engine's type for a checked `ConsumerType` value (see `validate`)."""
    return CONSUMER_TYPES[value]


def subscription(msg: pb.Subscribe | pb.ReceiveRequest, owner: str = "") -> SubscriptionSpec:
    """The engine's spec for a checked subscription (see `validate`), made by principal
    `owner` ("": anonymous)."""
    broadcast = bool(getattr(msg, "broadcast", False))
    kind = consumer_type(msg.consumer_type)
    option = msg.policy_options.get(SUBSCRIPTION_TYPE, "").lower()
    if kind is ConsumerType.SHARED and option in _BY_VALUE:
        # The type left at its default: the option names it (`validate` refused a conflict),
        # so that the engine holds the consumers to the type the policy runs as.
        kind = _BY_VALUE[option]
    return SubscriptionSpec(
        topic=msg.topic,
        group=msg.group,
        policy=msg.policy,
        options=dict(msg.policy_options),
        consumer_type=kind,
        broadcast=broadcast,
        naming=msg.naming,
        consumer_id=getattr(msg, "consumer_id", ""),
        tag_filter=msg.tag_filter,
        selector=MessageSelector.compile(msg.selector) if msg.selector else None,
        owner=owner,
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


def subscription_error(
    msg: pb.Subscribe | pb.ReceiveRequest, error: InvalidArgument
) -> InvalidArgument:
    """`error` (the engine's or the policy's refusal of a subscription) naming the request's
    field: a policy names an option it reads bare (`max_retries`), which the request sets as
    `policy_options['max_retries']`; the option `subscription_type`, when the request does not
    set it, is the one the engine derived from `consumer_type`. Other fields are the request's
    own already (`broadcast`, `invisible_ms`, `policy`, ...)."""
    field = error.field
    if field in msg.policy_options:
        path = f"policy_options[{field!r}]"
        return InvalidArgument(path, error.value, error.allowed)
    if field == SUBSCRIPTION_TYPE:
        kind = pb.ConsumerType.Name(msg.consumer_type)
        return InvalidArgument("consumer_type", kind, error.allowed)
    return error


def settlement_path(msg: pb.Settlement, index: int, field: str) -> str:
    """The request path of `field` (a field of the engine's `Settlement`, as the engine or a
    policy names it) of `msg`, the settlement at `index`."""
    if field == "reason":
        return f"settlements[{index}].{msg.WhichOneof('action')}.reason"
    return f"settlements[{index}].{SETTLEMENT_FIELDS.get(field, field)}"


def settle_error(request: pb.SettleRequest, error: InvalidArgument) -> InvalidArgument:
    """An atomic settle's refusal (`settlements[i].delay_ms`, in the engine's terms) naming the
    refused settlement's field by its request path (`settlements[i].fail.delay_ms`)."""
    item = _ITEM.fullmatch(error.field)
    if item is None or int(item[1]) >= len(request.settlements):
        return error
    index = int(item[1])
    path = settlement_path(request.settlements[index], index, item[2])
    return InvalidArgument(path, error.value, error.allowed)


def refused_at(msg: pb.Settlement, index: int, result: SettleResult) -> SettleResult:
    """`result` (the engine's, for the settlement `msg` at `index` of a batch) with an
    INVALID_ARGUMENT error that names the request path of the refused field
    (`settlements[3].fail.delay_ms=0 is not allowed: ...`), as the edge's own checks do."""
    if result.ok or result.error_code != INVALID:
        return result
    bare = _FIELD.fullmatch(result.error)
    if bare is not None:
        error = f"{settlement_path(msg, index, bare[1])}={bare[2]}"
    else:
        error = f"settlements[{index}]: {result.error}"
    return SettleResult(result.receipt, False, result.error_code, cut(error, MESSAGE_CHARS))


def batch_results(
    batch: Sequence[pb.Settlement], positions: Sequence[int], done: Sequence[SettleResult]
) -> Sequence[SettleResult]:
    """The engine's results `done` for the settlements of `batch` at `positions`, their
    INVALID_ARGUMENT errors naming each refused settlement's path (`refused_at`)."""
    for r in done:
        if not r.ok and r.error_code == INVALID:
            break
    else:
        return done
    return [refused_at(batch[i], i, r) for i, r in zip(positions, done, strict=True)]


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
