"""The Pulsar back end's pure parts: the attempt rule, the property codec, topic names."""

from __future__ import annotations

import pytest

from adapters.pulsar.backend_codec import (
    ATTEMPT_PROP,
    ID_PROP,
    RETRIES_PROP,
    decode,
    encode,
    pulsar_topic,
    reconcile_attempt,
)
from gateway.backend.base import OutMessage


@pytest.mark.parametrize(
    ("stated", "redeliveries", "remembered", "expected"),
    [
        (0, 0, None, 0),  # first delivery of a fresh message
        (5, 0, None, 5),  # a retry copy published after five deliveries
        (0, 3, None, 3),  # native consumers negatively acked it three times
        (5, 1, None, 6),  # the copy went out once and its consumer vanished
        (5, 0, 7, 8),  # redelivery count reset by the broker: what we handed out still counts
        (5, 4, 7, 9),  # the broker knows more than we remember
        (2, 0, 2, 3),  # we handed out attempt 2, the broker gives it again after a reconnect
    ],
)
def test_attempt_is_max_of_property_plus_redeliveries_and_remembered(
    stated: int, redeliveries: int, remembered: int | None, expected: int
) -> None:
    assert reconcile_attempt(stated, redeliveries, remembered) == expected


def test_redelivery_count_reset_never_lowers_the_attempt() -> None:
    handed_out = reconcile_attempt(3, 2, None)
    assert handed_out == 5
    after_reset = reconcile_attempt(3, 0, handed_out)
    assert after_reset == 6


def test_negative_redelivery_count_is_ignored() -> None:
    assert reconcile_attempt(4, -1, None) == 4


def test_encode_then_decode_keeps_every_field() -> None:
    message = OutMessage(
        body=b"b",
        properties={"color": "red", "x-gateway-origin-topic": "orders", ID_PROP: "spoofed"},
        key="k",
        tag="t",
        deliver_at_ms=1234,
        attempt=3,
        retries=2,
    )
    props = encode(message, "mid-1", 999)
    assert props[ID_PROP] == "mid-1"
    assert "x-gateway-origin-topic" not in props  # carried under its own name, see below
    assert props["gateway-x-origin-topic"] == "orders"
    assert (props[ATTEMPT_PROP], props[RETRIES_PROP]) == ("3", "2")
    env = decode(props, "k", "1:2:-1:-1", 5555)
    assert env.message_id == "mid-1"
    assert env.properties == {"color": "red", "x-gateway-origin-topic": "orders"}
    assert (env.key, env.tag, env.publish_ms, env.deliver_at_ms) == ("k", "t", 999, 1234)
    assert (env.stated_attempt, env.retries) == (3, 2)


def test_native_message_gets_pulsar_id_and_time() -> None:
    env = decode({"a": "1", ATTEMPT_PROP: "junk"}, "", "7:8:-1:-1", 4242)
    assert (env.message_id, env.publish_ms, env.stated_attempt, env.retries) == (
        "7:8:-1:-1",
        4242,
        0,
        0,
    )
    assert env.properties == {"a": "1"}


def test_topic_names() -> None:
    assert pulsar_topic("orders") == "persistent://public/default/orders"
    assert pulsar_topic("acme/billing/orders") == "persistent://acme/billing/orders"
    assert pulsar_topic("non-persistent://a/b/c") == "non-persistent://a/b/c"
