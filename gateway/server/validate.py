"""Every value of every gateway.v1 request, range-checked in one place before the engine sees it.

The servicers (`gateway.server.api`) call one function per request (or stream frame) first;
a bad value raises `InvalidArgument` naming the field and the allowed range. Policies check
their own narrower ranges afterwards (e.g. rocketmq-simple's invisible duration), before
anything changes. Requests that do not even decode are refused earlier, by
`gateway.server.errors.DecodeGuard`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from gateway.backend import OutMessage
from gateway.core.options import FALSE
from gateway.core.properties import TIME_MAX_MS
from gateway.core.registry import SUBSCRIPTION_TYPE
from gateway.core.selector import MessageSelector, SelectorError
from gateway.engine.base import BROADCAST
from gateway.errors import InvalidArgument
from gateway.limits import (
    MAX_BATCH,
    MAX_CREDIT,
    MAX_DELAY_MS,
    MAX_NAME_BYTES,
    MAX_OPTIONS,
    MAX_PUBLISH_PROPERTIES,
    MAX_RECEIVE,
    MAX_WAIT_MS,
    check_batch,
    check_deliver_at,
    check_name,
    check_properties,
    check_publish_properties,
    check_tag,
    check_text,
    too_long,
)
from gateway.server.convert import CONSUMER_TYPES
from gateway.v1 import admin_pb2 as admin
from gateway.v1 import gateway_pb2 as pb

MAX_RECEIPT_BYTES = 1024
"""Longest receipt a settlement may carry (the gateway's own are far shorter)."""
MAX_PAGE = 1000
"""Largest page of dead letters."""
DEFAULT_PAGE = 100
MAX_POSITION = (1 << 53) - 1
"""Largest position a page token may name: beyond any position a back end hands out (the
embedded store's are below 2**40), and far enough below 2**63 that a store's arithmetic on it
(its topic's base plus the position) stays an int64."""
MAX_ATTEMPT = 1_000_000
"""Largest attempt count a filter may name."""
MAX_TIME_MS = TIME_MAX_MS
"""Latest instant a filter may name: the end of year 9999 UTC."""
_TOKEN = re.compile(r"[0-9]{1,16}")


def _optional_name(field: str, value: str) -> None:
    if value:
        check_name(field, value)


def _range(field: str, value: int, low: int, high: int, unit: str = "") -> None:
    if not low <= value <= high:
        raise InvalidArgument(field, value, f"{low}..{high}{' ' + unit if unit else ''}")


def _options(field: str, options: Mapping[str, str]) -> None:
    if len(options) > MAX_OPTIONS:
        raise InvalidArgument(field, f"{len(options)} entries", f"at most {MAX_OPTIONS} options")
    for key in options:
        check_name(f"{field} key", key)
        check_text(f"{field}[{key!r}]", options[key])


def _subscription(msg: pb.Subscribe | pb.ReceiveRequest) -> None:
    check_name("topic", msg.topic)
    check_name("group", msg.group)
    if not msg.policy:
        raise InvalidArgument("policy", "", "a policy name (one an installed product registers)")
    check_name("policy", msg.policy)
    _options("policy_options", msg.policy_options)
    if msg.consumer_type not in CONSUMER_TYPES:
        raise InvalidArgument("consumer_type", msg.consumer_type,
                              "SHARED, KEY_SHARED, EXCLUSIVE, FAILOVER")
    _agree(msg)
    _optional_name("naming", msg.naming)
    check_text("tag_filter", msg.tag_filter)
    if not msg.tag_filter.isprintable():  # a NUL or line break matches no tag a publish can set
        raise InvalidArgument("tag_filter", msg.tag_filter, "printable text: tags joined by ||")
    if msg.selector:
        try:
            MessageSelector.compile(msg.selector)
        except SelectorError as exc:
            raise InvalidArgument("selector", msg.selector,
                                  f"an SQL92 condition ({exc})") from None


def _agree(msg: pb.Subscribe | pb.ReceiveRequest) -> None:
    """A policy option that says what a field of the request says must agree with it: a
    conflict would otherwise be settled one way or the other without a word."""
    options = msg.policy_options
    raw = options.get(BROADCAST)
    if raw is not None and raw.lower() not in FALSE:
        if not isinstance(msg, pb.Subscribe):
            raise InvalidArgument(f"policy_options[{BROADCAST!r}]", raw,
                                  "false or left out: a pull receive does not broadcast (a "
                                  "push consumer's Subscribe.broadcast does)")
    elif raw is not None and isinstance(msg, pb.Subscribe) and msg.broadcast:
        raise InvalidArgument(f"policy_options[{BROADCAST!r}]", raw,
                              "true or left out: the request's broadcast is true")
    kind = options.get(SUBSCRIPTION_TYPE)
    if kind is not None and msg.consumer_type != pb.CONSUMER_TYPE_SHARED \
            and kind.lower() != CONSUMER_TYPES[msg.consumer_type].value:
        name = pb.ConsumerType.Name(msg.consumer_type)
        raise InvalidArgument(f"policy_options[{SUBSCRIPTION_TYPE!r}]", kind,
                              f"{CONSUMER_TYPES[msg.consumer_type].value} or left out: the "
                              f"request's consumer_type is {name}")


# ------------------------------------------------------------------------------ Gateway


def publish(request: pb.PublishRequest, now_ms: int) -> list[OutMessage]:
    """Check a publish and return its messages for the engine (a delay becomes a time), in one
    pass: each field of each message is read from the request once. The properties are counted
    as they are read, so a publish with too many stops at the first message over the limit."""
    check_name("topic", request.topic)
    messages = request.messages
    check_batch("messages", len(messages))
    out: list[OutMessage] = []
    append = out.append
    left = MAX_PUBLISH_PROPERTIES
    for i, message in enumerate(messages):
        properties = message.properties
        if properties:
            left -= len(properties)
            if left < 0:
                check_publish_properties("messages", sum(len(m.properties) for m in messages))
            # A comprehension: dict(map) goes through the map's Python-level view (slower).
            props = {k: properties[k] for k in properties}
            check_properties(f"messages[{i}].properties", props)
        else:
            props = {}
        delay, deliver_at = message.delay_ms, message.deliver_at_ms
        if delay or deliver_at:
            deliver_at = _deliver_at(i, delay, deliver_at, now_ms)
        tag = message.tag
        if tag:
            check_tag(f"messages[{i}].tag", tag)
        append(OutMessage(message.body, props, message.key, tag, deliver_at))
    return out


def _deliver_at(index: int, delay: int, deliver_at: int, now_ms: int) -> int:
    """The delivery time of a message with a relative delay or an absolute time (not both);
    what can be told from the message alone (its size is the engine's: it knows the limit,
    and counts it the same for every front end)."""
    if delay and deliver_at:
        raise InvalidArgument(f"messages[{index}].delay_ms", delay,
                              "not together with deliver_at_ms")
    if delay:
        _range(f"messages[{index}].delay_ms", delay, 0, MAX_DELAY_MS, "ms (400 days)")
        return now_ms + delay
    check_deliver_at(f"messages[{index}].deliver_at_ms", deliver_at, now_ms)
    return deliver_at


def receive(request: pb.ReceiveRequest) -> None:
    _subscription(request)
    _range("max_messages", request.max_messages, 1, MAX_RECEIVE)
    _range("invisible_ms", request.invisible_ms, 0, MAX_DELAY_MS, "ms (0: the policy's default)")
    _range("wait_ms", request.wait_ms, 0, MAX_WAIT_MS, "ms")


def subscribe(sub: pb.Subscribe) -> None:
    _subscription(sub)
    _range("prefetch", sub.prefetch, 0, MAX_CREDIT)
    _optional_name("consumer_id", sub.consumer_id)


def settle(request: pb.SettleRequest) -> None:
    """All or nothing: the first bad settlement fails the request."""
    check_batch("settlements", len(request.settlements))
    for i, s in enumerate(request.settlements):
        settlement(s, i)


def settle_batch(batch: pb.SettleBatch) -> None:
    """The batch as a whole (its settlements are checked one by one, see `settlement`)."""
    count = len(batch.settlements) + len(batch.acks) + len(batch.fails)
    if count > MAX_BATCH:
        raise InvalidArgument("settle", count,
                              f"at most {MAX_BATCH} settlements, acks and fails")
    _range("settle.credit", batch.credit, 0, MAX_CREDIT)


def credit(msg: pb.Credit) -> None:
    _range("credit.messages", msg.messages, 1, MAX_CREDIT)


def settlement(msg: pb.Settlement, index: int) -> None:
    field = f"settlements[{index}]"
    receipt(f"{field}.receipt", msg.receipt)
    kind = msg.WhichOneof("action")
    if kind == "fail":
        fail = msg.fail
        if fail.HasField("delay_ms"):
            _range(f"{field}.fail.delay_ms", fail.delay_ms, 0, MAX_DELAY_MS, "ms")
        if fail.HasField("delay_level") and fail.delay_level < 1:
            raise InvalidArgument(f"{field}.fail.delay_level", fail.delay_level,
                                  "1 or more (the policy's delay table sets the highest)")
        check_text(f"{field}.fail.reason", fail.reason)
    elif kind == "change_invisible":
        _range(f"{field}.change_invisible.invisible_ms", msg.change_invisible.invisible_ms, 1,
               MAX_DELAY_MS, "ms")
    elif kind == "dead_letter":
        check_text(f"{field}.dead_letter.reason", msg.dead_letter.reason)
    elif kind != "ack":
        raise InvalidArgument(f"{field}.action", None,
                              "one of ack, fail, change_invisible, dead_letter")


def receipt(field: str, value: str) -> None:
    if not value:
        raise InvalidArgument(field, "", "the receipt of a delivery")
    if too_long(value, MAX_RECEIPT_BYTES):
        raise InvalidArgument(field, value, f"a receipt of at most {MAX_RECEIPT_BYTES} bytes")


# -------------------------------------------------------------------------------- Admin


def group(
    request: admin.DescribeGroupRequest | admin.PurgeRequest | admin.ListWaitingRetriesRequest,
) -> None:
    check_name("topic", request.topic)
    check_name("group", request.group)


def list_groups(request: admin.ListGroupsRequest) -> None:
    """Both filters are optional; a given one is a name."""
    if request.topic:
        check_name("topic", request.topic)
    if request.group:
        check_name("group", request.group)


def list_dead_letters(request: admin.ListDeadLettersRequest) -> tuple[int, int]:
    """The page size and the position to continue after (-1: from the start)."""
    check_name("topic", request.topic)
    check_name("group", request.group)
    _range("limit", request.limit, 0, MAX_PAGE, f"(0: {DEFAULT_PAGE})")
    dead_letter_filter(request.filter)
    return request.limit or DEFAULT_PAGE, page_token(request.page_token)


def dead_letter_filter(where: admin.DeadLetterFilter) -> None:
    for name in ("reason", "text"):
        if too_long(getattr(where, name), MAX_NAME_BYTES):
            raise InvalidArgument(f"filter.{name}", getattr(where, name),
                                  f"at most {MAX_NAME_BYTES} bytes (UTF-8)")
    _range("filter.min_attempt", where.min_attempt, 0, MAX_ATTEMPT, "(0: no bound)")
    _range("filter.max_attempt", where.max_attempt, 0, MAX_ATTEMPT, "(0: no bound)")
    if where.max_attempt and where.max_attempt < where.min_attempt:
        raise InvalidArgument("filter.max_attempt", where.max_attempt,
                              f"0 (no bound) or at least min_attempt ({where.min_attempt})")
    _range("filter.since_ms", where.since_ms, 0, MAX_TIME_MS, "ms since the Unix epoch")
    _range("filter.until_ms", where.until_ms, 0, MAX_TIME_MS, "ms since the Unix epoch")
    if where.until_ms and where.until_ms <= where.since_ms:
        raise InvalidArgument("filter.until_ms", where.until_ms,
                              f"0 (no bound) or after since_ms ({where.since_ms})")


def one_message(
    request: admin.GetDeadLetterRequest | admin.GetTimelineRequest,
) -> None:
    check_name("topic", request.topic)
    check_name("group", request.group)
    _message_id("message_id", request.message_id)


def _message_id(field: str, value: str) -> None:
    if not value or too_long(value, MAX_NAME_BYTES):
        raise InvalidArgument(field, value, f"a message id of 1..{MAX_NAME_BYTES} bytes")


def delete(request: admin.DeleteDeadLettersRequest) -> None:
    resend(request)
    if not (request.message_ids or request.all or (request.HasField("filter")
            and request.filter != admin.DeadLetterFilter())):
        raise InvalidArgument("all", False, "message_ids, a non-empty filter, or all = true "
                                            "(to delete every dead letter of the group)")


def page_token(token: str) -> int:
    if not token:
        return -1
    if _TOKEN.fullmatch(token) is None or int(token) > MAX_POSITION:
        raise InvalidArgument("page_token", token, "\"\" or the next_page_token of a page")
    return int(token)


def resend(request: admin.ResendDeadLettersRequest | admin.DeleteDeadLettersRequest) -> None:
    check_name("topic", request.topic)
    check_name("group", request.group)
    ids = request.message_ids
    if len(ids) > MAX_BATCH:
        raise InvalidArgument("message_ids", f"{len(ids)} ids", f"at most {MAX_BATCH}")
    for i, message_id in enumerate(ids):
        _message_id(f"message_ids[{i}]", message_id)
    dead_letter_filter(request.filter)
