"""Pure parts of the Pulsar front end: topic names, ids, dedup, subscription types, messages."""

from __future__ import annotations

import pytest

from adapters.pulsar.frontend import parse_listen
from adapters.pulsar.frontend.ids import DedupRegistry, IdAllocator
from adapters.pulsar.frontend.messages import (
    EVENT_TIME,
    PRODUCER,
    SEQUENCE,
    delivery_metadata,
    out_message,
)
from adapters.pulsar.frontend.replies import server_error
from adapters.pulsar.frontend.subscriptions import SubscriptionRegistry
from adapters.pulsar.frontend.topics import engine_topic
from adapters.pulsar.wire import wire_pb2 as pb
from adapters.pulsar.wire.batch import Entry
from gateway.engine.api import ConsumerType, Delivery
from gateway.errors import AlreadyExists, InvalidArgument, Unavailable


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("orders", "orders"),
        ("persistent://public/default/orders", "orders"),
        ("persistent://public/default/orders-sub-DLQ", "orders-sub-DLQ"),
        ("persistent://acme/billing/orders", "acme/billing/orders"),
        ("acme/billing/orders", "acme/billing/orders"),
    ],
)
def test_engine_topic_names(name: str, expected: str) -> None:
    assert engine_topic(name) == expected


@pytest.mark.parametrize(
    "name", ["", "persistent://", "a/b", "a//c", "persistent://public/default/",
             "non-persistent://public/default/orders"]
)
def test_bad_topic_names(name: str) -> None:
    with pytest.raises(InvalidArgument):
        engine_topic(name)


def test_ids_increase_under_one_ledger() -> None:
    ids = IdAllocator(ledger_id=42)
    assert [ids.next_entry() for _ in range(3)] == [0, 1, 2]
    assert ids.last_entry == 2
    assert ids.ledger_id == 42
    assert IdAllocator().ledger_id > 1_600_000_000_000


def test_dedup_registry_keeps_the_highest_sequence_per_topic_and_producer() -> None:
    dedup = DedupRegistry()
    assert dedup.last("t", "p") == -1
    dedup.record("t", "p", 5)
    dedup.record("t", "p", 3)
    dedup.record("t", "q", 1)
    dedup.record("u", "p", 2)
    assert (dedup.last("t", "p"), dedup.last("t", "q"), dedup.last("u", "p")) == (5, 1, 2)


def test_a_producer_name_is_held_by_one_producer_per_topic() -> None:
    dedup = DedupRegistry()
    assert dedup.attach("t", "p")
    assert not dedup.attach("t", "p")
    assert dedup.attach("u", "p")
    dedup.detach("t", "p")
    assert dedup.attach("t", "p")


def test_dedup_registry_forgets_the_oldest_unheld_names_beyond_its_limit() -> None:
    dedup = DedupRegistry(limit=2)
    assert dedup.attach("t", "held")
    dedup.record("t", "held", 9)
    dedup.record("t", "a", 1)
    dedup.record("t", "b", 2)
    assert (dedup.last("t", "held"), dedup.last("t", "a"), dedup.last("t", "b")) == (9, -1, 2)


def test_exclusive_takes_one_consumer() -> None:
    subs = SubscriptionRegistry()
    subs.join("t", "s", ConsumerType.EXCLUSIVE, "a")
    with pytest.raises(AlreadyExists):
        subs.join("t", "s", ConsumerType.EXCLUSIVE, "b")
    subs.leave("t", "s", "a")
    subs.join("t", "s", ConsumerType.EXCLUSIVE, "b")
    assert subs.count("t", "s") == 1


def test_shared_takes_many_but_not_another_type() -> None:
    subs = SubscriptionRegistry()
    subs.join("t", "s", ConsumerType.SHARED, "a")
    subs.join("t", "s", ConsumerType.SHARED, "b")
    with pytest.raises(AlreadyExists):
        subs.join("t", "s", ConsumerType.KEY_SHARED, "c")
    assert subs.count("t", "s") == 2
    subs.join("t", "other", ConsumerType.FAILOVER, "c")
    assert subs.count("t", "other") == 1


def test_errors_map_to_pulsar_server_errors() -> None:
    assert server_error(Unavailable("down")) == pb.ServiceNotReady
    assert server_error(AlreadyExists("busy")) == pb.ConsumerBusy
    assert server_error(RuntimeError("?")) == pb.UnknownError


def test_parse_listen() -> None:
    assert parse_listen("0.0.0.0:6650") == ("0.0.0.0", 6650)
    assert parse_listen(":7000") == ("127.0.0.1", 7000)
    assert parse_listen("[::1]:6650") == ("::1", 6650)
    with pytest.raises(InvalidArgument):
        parse_listen("localhost")
    with pytest.raises(InvalidArgument):
        parse_listen("h:70000")


def test_message_translation_round_trip() -> None:
    meta = pb.MessageMetadata(
        producer_name="prod", sequence_id=9, publish_time=1, deliver_at_time=5000
    )
    entry = Entry(
        payload=b"b", properties={"k": "v", PRODUCER: "spoof"}, partition_key="pk", event_time=77
    )
    out = out_message(entry, meta, "prod", 9)
    assert out.deliver_at_ms == 5000
    assert out.key == "pk"
    assert out.properties == {"k": "v", PRODUCER: "prod", SEQUENCE: "9", EVENT_TIME: "77"}
    delivery = Delivery(
        receipt="r",
        message_id="m",
        topic="t",
        original_topic="t",
        body=b"b",
        properties=out.properties,
        key="pk",
        tag="",
        attempt=1,
        retries=0,
        deadline_ms=0,
        publish_ms=1234,
        deliver_at_ms=5000,
    )
    back = delivery_metadata(delivery)
    assert back.IsInitialized()
    assert (back.producer_name, back.sequence_id, back.publish_time) == ("prod", 9, 1234)
    assert [(kv.key, kv.value) for kv in back.properties] == [("k", "v")]
    assert (back.partition_key, back.event_time) == ("pk", 77)


def test_delivery_metadata_never_fails_on_properties_set_elsewhere() -> None:
    delivery = Delivery(
        receipt="r",
        message_id="m",
        topic="t",
        original_topic="t",
        body=b"b",
        properties={SEQUENCE: str(2**64), EVENT_TIME: "-1", PRODUCER: ""},
        key="",
        tag="",
        attempt=1,
        retries=0,
        deadline_ms=0,
        publish_ms=1,
        deliver_at_ms=0,
    )
    back = delivery_metadata(delivery)
    assert (back.sequence_id, back.HasField("event_time")) == (0, False)
    assert back.IsInitialized()
