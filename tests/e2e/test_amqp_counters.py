"""The attempt reconcile rule, delay buckets and header codec of the RabbitMQ back end (pure)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from adapters.amqp.codec import decode, encode
from adapters.amqp.counters import (
    header_int,
    reconcile_attempt,
    rejected_deliveries,
    stated_retries,
)
from adapters.amqp.delays import check_template, delay_bucket_ms, delay_queue
from gateway.backend.base import OutMessage
from gateway.core.properties import COUNT_MAX, TIME_MAX_MS
from gateway.errors import InvalidArgument

Q = "orders"


def death(queue: str, reason: str, count: object) -> dict[str, object]:
    return {"queue": queue, "reason": reason, "count": count, "exchange": "", "routing-keys": [Q]}


def test_fresh_message_has_no_attempts() -> None:
    assert reconcile_attempt(None, False, Q) == 0
    assert reconcile_attempt({}, False, Q) == 0


def test_header_is_the_truth_for_gateway_copies() -> None:
    assert reconcile_attempt({"x-gateway-attempt": 3}, False, Q) == 3


def test_redelivered_copy_counts_once_more_on_classic_queue() -> None:
    assert reconcile_attempt({"x-gateway-attempt": 3}, True, Q) == 4
    assert reconcile_attempt({}, True, Q) == 1


def test_quorum_delivery_count_counts_every_redelivery_of_the_copy() -> None:
    headers = {"x-gateway-attempt": 2, "x-delivery-count": 3}
    assert reconcile_attempt(headers, True, Q) == 5


def test_rejects_by_plain_consumers_count_when_no_header() -> None:
    headers = {"x-death": [death(Q, "rejected", 2), death(Q + ".retry", "expired", 2)]}
    assert reconcile_attempt(headers, False, Q) == 2


def test_rejects_already_in_the_header_are_not_counted_twice() -> None:
    headers = {"x-gateway-attempt": 4, "x-death": [death(Q, "rejected", 2)]}
    assert reconcile_attempt(headers, False, Q) == 4
    headers = {"x-gateway-attempt": 1, "x-death": [death(Q, "rejected", 3)]}
    assert reconcile_attempt(headers, True, Q) == 4


def test_delay_hops_are_not_deliveries() -> None:
    headers = {"x-gateway-attempt": 1, "x-death": [death(Q + ".delay.1000", "expired", 5)]}
    assert reconcile_attempt(headers, False, Q) == 1


def test_rejects_from_other_queues_do_not_count() -> None:
    headers = {"x-death": [death("elsewhere", "rejected", 7)]}
    assert rejected_deliveries(headers, Q) == 0


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("not a list", 0),
        (42, 0),
        (None, 0),
        ([], 0),
        (["junk", 3, None], 0),
        (death(Q, "rejected", 2), 2),  # a lone table instead of an array
        ([death(Q, "rejected", "3")], 3),  # count as text
        ([death(Q, "rejected", b"4")], 4),  # count as bytes
        ([death(Q, "rejected", None)], 1),  # entry without a usable count: once
        ([death(Q, "rejected", True)], 1),
        ([death(Q, "rejected", -5)], 0),
        ([death(Q, "rejected", 1.0)], 1),
        ([{"queue": Q.encode(), "reason": b"rejected", "count": 2}], 2),  # bytes fields
        ([{"reason": "rejected", "count": 2}], 0),  # no queue: not this queue
        ([death(Q, "rejected", 1), death(Q, "rejected", 2)], 3),  # split entries add up
    ],
)
def test_odd_x_death_shapes(raw: object, expected: int) -> None:
    assert rejected_deliveries({"x-death": raw}, Q) == expected
    assert reconcile_attempt({"x-death": raw}, False, Q) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [(3, 3), ("7", 7), (b"9", 9), (-2, 0), (True, None), ("x", None), (2.9, 2), (None, None),
     (" 8 ", 8), ("-4", 0),
     # Any AMQP client may write these headers: what int() refuses or a delivery cannot carry
     # reads as absent, never raises.
     ("²", None), ("٣", None), ("1_000", None), ("", None), (2**32, None), (str(2**32), None),
     ("9" * 40, None), (float("nan"), None), (float("inf"), None), (1e300, None),
     (COUNT_MAX, COUNT_MAX), (COUNT_MAX + 1, None)],
)
def test_header_int(value: object, expected: int | None) -> None:
    assert header_int(value) == expected


@pytest.mark.parametrize("value", ["²", 2**32, "9" * 40, -(2**70), 1e300, float("nan")])
def test_odd_counters_from_any_publisher_never_raise_or_overflow(value: object) -> None:
    headers = {"x-gateway-attempt": value, "x-gateway-retries": value,
               "x-delivery-count": value, "x-death": [death(Q, "rejected", value)] * 3}
    assert 0 <= reconcile_attempt(headers, True, Q) <= COUNT_MAX
    assert 0 <= stated_retries(headers) <= COUNT_MAX
    env = decode({**headers, "x-gateway-publish-ms": value, "x-gateway-deliver-at-ms": value},
                 "m1", None, 1234)
    assert 0 <= env.stated_attempt <= COUNT_MAX and 0 <= env.retries <= COUNT_MAX
    assert 0 <= env.publish_ms <= TIME_MAX_MS and 0 <= env.deliver_at_ms <= TIME_MAX_MS


def test_the_attempt_is_capped_where_many_rejects_add_up() -> None:
    headers = {"x-gateway-attempt": COUNT_MAX,
               "x-death": [death(Q, "rejected", COUNT_MAX)] * 5, "x-delivery-count": COUNT_MAX}
    assert reconcile_attempt(headers, True, Q) == COUNT_MAX


def test_odd_attempt_and_delivery_count_headers_fall_back() -> None:
    assert reconcile_attempt({"x-gateway-attempt": "junk"}, True, Q) == 1
    assert reconcile_attempt({"x-gateway-attempt": "2", "x-delivery-count": "x"}, True, Q) == 3
    assert stated_retries({"x-gateway-retries": b"5"}) == 5
    assert stated_retries({"x-gateway-retries": "nope"}) == 0
    assert stated_retries(None) == 0


@pytest.mark.parametrize(
    ("delay", "bucket"),
    [
        (0, 0),
        (-5, 0),
        (1, 10),
        (10, 10),
        (15, 20),
        (500, 500),
        (999, 1000),
        (1000, 1000),
        (1003, 1010),
        (10_003, 10_100),
        (59_999, 60_000),
        (3_600_001, 3_610_000),
    ],
)
def test_delay_buckets_round_up_to_three_digits(delay: int, bucket: int) -> None:
    assert delay_bucket_ms(delay) == bucket
    if delay > 0:
        assert bucket >= delay
        assert bucket - delay <= max(9, delay // 100)


def test_delay_queue_name_and_arguments() -> None:
    queue = delay_queue("{queue}.delay.{ms}", Q, 1003)
    assert queue.name == "orders.delay.1010"
    args = queue.arguments()
    assert args["x-message-ttl"] == 1010
    assert args["x-dead-letter-exchange"] == ""
    assert args["x-dead-letter-routing-key"] == Q
    assert isinstance(args["x-expires"], int) and args["x-expires"] > 1010


@pytest.mark.parametrize("template", ["{queue}.delay", "{ms}", "{queue}.{other}.{ms}", "{"])
def test_bad_delay_templates_are_refused(template: str) -> None:
    with pytest.raises(InvalidArgument):
        check_template(template)


def test_codec_round_trip() -> None:
    out = OutMessage(
        body=b"b",
        properties={"color": "red"},
        key="k",
        tag="t",
        deliver_at_ms=123,
        message_id="m",
        attempt=2,
        retries=1,
    )
    amqp = encode(out, "m", 1_700_000_000_000)
    assert amqp.message_id == "m"
    assert amqp.delivery_mode == 2
    headers = dict(amqp.headers)
    assert headers["x-key"] == "k" and headers["x-tag"] == "t"
    assert headers["x-gateway-attempt"] == 2 and headers["x-gateway-retries"] == 1
    env = decode(headers, amqp.message_id, amqp.timestamp, 0)
    assert (env.message_id, env.key, env.tag) == ("m", "k", "t")
    assert env.properties == {"color": "red"}
    assert env.publish_ms == 1_700_000_000_000
    assert env.deliver_at_ms == 123


def test_codec_reads_plain_messages() -> None:
    stamp = datetime.fromtimestamp(1_700_000_000, tz=UTC)
    headers = {"n": 5, "flag": True, "raw": b"bytes", "x-death": [death(Q, "rejected", 1)]}
    env = decode(headers, None, stamp, 99)
    assert env.message_id == ""
    assert env.properties == {"n": "5", "flag": "true", "raw": "bytes"}
    assert env.publish_ms == 1_700_000_000_000
    assert decode(None, "x", None, 99).publish_ms == 99
