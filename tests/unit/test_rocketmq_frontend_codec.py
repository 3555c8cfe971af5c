"""Protocol shapes: SDK messages in and out, routes, Settings, configuration, renewal table."""

from __future__ import annotations

import hashlib

import pytest
from rocketmq import Message as SdkMessage
from rocketmq.grpc_protocol import definition_pb2
from rocketmq.v5.model.retry_policy import CustomizedBackoffRetryPolicy
from rocketmq.v5.model.topic_route import MessageQueue
from rocketmq.v5.util.misc import Misc

from adapters.rocketmq.dialect import BACKOFF_MS
from adapters.rocketmq.frontend import codec, topology
from adapters.rocketmq.frontend.renewal import RenewalTable
from adapters.rocketmq.frontend.settings import FrontendSettings
from gateway.engine.api import Delivery
from gateway.engine.clock import ManualClock, TimeBase
from gateway.errors import InvalidArgument

MT = definition_pb2.MessageType
CT = definition_pb2.ClientType


def _proto(message_type: int = MT.NORMAL, body: bytes = b"hi") -> definition_pb2.Message:
    msg = definition_pb2.Message(body=body)
    msg.topic.name = "t"
    msg.system_properties.message_id = "MID1"
    msg.system_properties.message_type = message_type
    return msg


def _delivery(**changes: object) -> Delivery:
    fields: dict[str, object] = dict(
        receipt="r1",
        message_id="MID1",
        topic="%RETRY%g",
        original_topic="t",
        body=b"payload",
        properties={"a": "b", codec.KEYS_PROPERTY: "k1 k2"},
        key="",
        tag="TagA",
        attempt=3,
        retries=2,
        deadline_ms=10_000,
        publish_ms=1_000,
        deliver_at_ms=0,
    )
    fields.update(changes)
    return Delivery(**fields)  # type: ignore[arg-type]


def test_the_body_digest_is_md5_as_a_proxy_sends_it() -> None:
    """MD5 in uppercase hex: what a RocketMQ 5 proxy sends and every SDK checks alike. A CRC32
    digest of 8 hex digits was read as corrupted by the Node.js SDK (it wants decimal) and, for a
    CRC32 below 0x10000000, by the Java SDK (hex without leading zeros): a push consumer sends
    such a message to the dead-letter topic without consuming it."""
    topic = definition_pb2.Resource(name="t")
    for body in (b"", b"hello", bytes(range(256)) * 3, b"payload"):
        assert codec.md5_hex(body) == Misc.md5_checksum(body)
        msg = codec.sdk_message(_delivery(body=body), topic, codec.PUSH, 30_000, "")
        digest = msg.system_properties.body_digest
        assert (digest.type, digest.checksum) == (definition_pb2.DigestType.MD5,
                                                  hashlib.md5(body).hexdigest().upper())
        assert not SdkMessage().fromProtobuf(msg).corrupted


def test_out_message_maps_group_tag_keys_delivery_time() -> None:
    msg = _proto(MT.FIFO)
    msg.system_properties.message_group = "G"
    msg.system_properties.tag = "T"
    msg.system_properties.keys.extend(["k1", "k2"])
    msg.user_properties["p"] = "v"
    out = codec.out_message(msg, 100)
    assert (out.key, out.tag, out.message_id) == ("G", "T", "MID1")
    assert out.properties == {"p": "v", codec.KEYS_PROPERTY: "k1 k2"}

    delayed = _proto(MT.DELAY)
    delayed.system_properties.delivery_timestamp.seconds = 1_800_000_000
    assert codec.out_message(delayed, 100).deliver_at_ms == 1_800_000_000_000


@pytest.mark.parametrize("seconds", [1_700_000_000, 0, -(2**62)])
def test_a_delivery_time_in_the_past_means_at_once(seconds: int) -> None:
    delayed = _proto(MT.DELAY)
    delayed.system_properties.delivery_timestamp.seconds = seconds
    assert codec.out_message(delayed, 1_700_000_000_000).deliver_at_ms == 0


def test_echoed_values_and_status_messages_are_cut_short() -> None:
    rejected = codec.Rejected(definition_pb2.Code.BAD_REQUEST, "topic", "x" * 100_000, "short")
    assert len(rejected.message) < 400 and "100000 characters" in rejected.message
    assert "1000 bytes" in codec.Rejected(definition_pb2.Code.BAD_REQUEST, "b", b"y" * 1000,
                                          "short").message
    long = codec.status(definition_pb2.Code.BAD_REQUEST, "z" * 10_000)
    assert len(long.message) <= codec.STATUS_MAX_CHARS + 20


def test_sdk_message_reads_back_through_the_sdk() -> None:
    topic = definition_pb2.Resource(name="t")
    delivery = _delivery(key="G", deliver_at_ms=5_000, topic="t")
    msg = SdkMessage().fromProtobuf(codec.sdk_message(delivery, topic, codec.PUSH, 30_000, "h:1"))
    assert not msg.corrupted
    assert (msg.topic, msg.body, msg.tag) == ("t", b"payload", "TagA")
    assert msg.keys == {"k1", "k2"}
    assert msg.properties == {"a": "b"}
    assert (msg.message_group, msg.delivery_attempt) == ("G", 3)
    assert msg.delivery_timestamp == 5_000
    assert msg.receipt_handle == "p.r1"
    assert codec.unwrap_receipt(msg.receipt_handle) == (codec.PUSH, "r1")


def test_first_delivery_attempt_is_at_least_one() -> None:
    topic = definition_pb2.Resource(name="t")
    msg = codec.sdk_message(_delivery(attempt=0), topic, codec.SIMPLE, 1000, "")
    assert msg.system_properties.delivery_attempt == 1


def test_message_type_is_inferred_from_group_and_delivery_time() -> None:
    assert codec.message_type_of(_delivery(key="G")) == MT.FIFO
    assert codec.message_type_of(_delivery(deliver_at_ms=9_000, topic="t")) == MT.DELAY
    assert codec.message_type_of(_delivery()) == MT.NORMAL


def test_a_retry_copy_is_shown_as_sent_not_as_delayed() -> None:
    """A retry copy's delivery time is its back-off: RocketMQ shows a retried NORMAL message as
    NORMAL, without a delivery timestamp."""
    topic = definition_pb2.Resource(name="t")
    retry = _delivery(deliver_at_ms=9_000)  # read from %RETRY%g
    assert codec.message_type_of(retry) == MT.NORMAL
    msg = codec.sdk_message(retry, topic, codec.PUSH, 30_000, "")
    assert not msg.system_properties.HasField("delivery_timestamp")


def test_rocketmqs_own_property_names_are_not_user_properties() -> None:
    """As a RocketMQ proxy: the names RocketMQ keeps (`MessageConst.STRING_HASH_SET`) that the
    gateway writes on retry copies and dead letters are not shown as user properties; a dead
    letter's origin is in `dead_letter_queue`."""
    topic = definition_pb2.Resource(name="%DLQ%g")
    properties = {"a": "b", "RECONSUME_TIME": "3", "RETRY_TOPIC": "t", "ORIGIN_MESSAGE_ID": "M",
                  "DLQ_ORIGIN_TOPIC": "t", "DLQ_ORIGIN_MESSAGE_ID": "M", "TAGS": "x"}
    dead = _delivery(topic="%DLQ%g", original_topic="%DLQ%g", properties=properties)
    msg = codec.sdk_message(dead, topic, codec.SIMPLE, 30_000, "")
    assert dict(msg.user_properties) == {"a": "b"}
    origin = msg.system_properties.dead_letter_queue
    assert (origin.topic, origin.message_id) == ("t", "M")
    plain = codec.sdk_message(_delivery(), topic, codec.SIMPLE, 30_000, "")
    assert not plain.system_properties.HasField("dead_letter_queue")


def test_foreign_receipt_counts_as_simple() -> None:
    assert codec.unwrap_receipt("abc.def") == (codec.SIMPLE, "abc.def")
    assert codec.unwrap_receipt(codec.wrap_receipt(codec.SIMPLE, "x.y")) == (codec.SIMPLE, "x.y")


def test_gateway_error_codes_map_to_rocketmq_codes() -> None:
    assert codec.rocketmq_code("FAILED_PRECONDITION") == definition_pb2.Code.INVALID_RECEIPT_HANDLE
    assert codec.rocketmq_code("INVALID_ARGUMENT") == definition_pb2.Code.BAD_REQUEST
    assert codec.rocketmq_code("SOMETHING_ELSE") == definition_pb2.Code.INTERNAL_ERROR


def test_route_queue_is_what_the_producer_accepts() -> None:
    endpoints = topology.endpoints_for("10.0.0.5:8081", definition_pb2.Endpoints())
    queue = MessageQueue(topology.message_queue(definition_pb2.Resource(name="t"), endpoints))
    assert queue.is_writable() and queue.is_readable() and queue.is_master_broker()
    assert {MT.NORMAL, MT.FIFO, MT.DELAY} <= queue.accept_message_types
    assert queue.endpoints.facade == "ipv4:10.0.0.5:8081"


def test_route_echoes_the_dialled_endpoint_without_advertised_one() -> None:
    dialled = definition_pb2.Endpoints(scheme=definition_pb2.AddressScheme.DOMAIN_NAME)
    dialled.addresses.add(host="gw.local", port=9000)
    assert topology.endpoints_for("", dialled) == dialled
    named = topology.endpoints_for("gw.svc:81", definition_pb2.Endpoints())
    assert named.scheme == definition_pb2.AddressScheme.DOMAIN_NAME


def _client(client_type: int, group: str = "g") -> definition_pb2.Settings:
    settings = definition_pb2.Settings(client_type=client_type)
    if client_type != CT.PRODUCER:
        settings.subscription.group.name = group
    return settings


def test_producer_settings_carry_max_body_size() -> None:
    reply = topology.settings_reply(
        _client(CT.PRODUCER), FrontendSettings(max_body_size=1234), definition_pb2.Endpoints()
    )
    assert reply.publishing.max_body_size == 1234
    assert reply.publishing.validate_message_type


def test_push_settings_carry_the_dialect_table_and_metrics() -> None:
    endpoints = topology.endpoints_for("127.0.0.1:9", definition_pb2.Endpoints())
    reply = topology.settings_reply(_client(CT.PUSH_CONSUMER), FrontendSettings(), endpoints)
    policy = CustomizedBackoffRetryPolicy(reply.backoff_policy, 0)
    assert policy.durations == [ms // 1000 for ms in BACKOFF_MS]
    assert policy.max_attempts == 17
    assert policy.get_next_attempt_delay(1) == 10 and policy.get_next_attempt_delay(16) == 7200
    assert not reply.subscription.fifo
    assert reply.subscription.long_polling_timeout.seconds == 20
    assert reply.metric.on and reply.metric.endpoints == endpoints


def test_a_clients_own_backoff_steps_are_replaced_not_extended() -> None:
    client = _client(CT.PUSH_CONSUMER)
    client.backoff_policy.customized_backoff.next.add(seconds=999)
    client.backoff_policy.customized_backoff.next.add(seconds=998)
    reply = topology.settings_reply(client, FrontendSettings(), definition_pb2.Endpoints())
    policy = CustomizedBackoffRetryPolicy(reply.backoff_policy, 0)
    assert policy.durations == [ms // 1000 for ms in BACKOFF_MS]


def test_fifo_group_gets_orderly_settings() -> None:
    settings = FrontendSettings(fifo_groups=frozenset({"fg"}), orderly_max_delivery_attempts=4)
    reply = topology.settings_reply(
        _client(CT.PUSH_CONSUMER, "fg"), settings, definition_pb2.Endpoints()
    )
    policy = CustomizedBackoffRetryPolicy(reply.backoff_policy, 0)
    assert reply.subscription.fifo
    assert (policy.durations, policy.max_attempts) == ([1], 4)


def test_simple_consumer_keeps_its_await_duration_and_no_metrics() -> None:
    client = _client(CT.SIMPLE_CONSUMER)
    client.subscription.long_polling_timeout.seconds = 7
    reply = topology.settings_reply(client, FrontendSettings(), definition_pb2.Endpoints())
    assert reply.subscription.long_polling_timeout.seconds == 7
    assert not reply.metric.on


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"advertised_endpoint": "nohost"}, "advertised_endpoint"),
        ({"advertised_endpoint": "h:70000"}, "advertised_endpoint"),
        ({"advertised_endpoint": "h:\u00b2"}, "advertised_endpoint"),
        ({"credentials": {"ak": ""}}, "credentials"),
        ({"max_delivery_attempts": 0}, "max_delivery_attempts"),
        ({"orderly_suspend_ms": 5}, "orderly_suspend_ms"),
        ({"backoff_s": ()}, "backoff_s"),
        ({"renew_interval_ms": 60_000}, "renew_interval_ms"),
        ({"push_invisible_ms": 500}, "push_invisible_ms"),
    ],
)
def test_bad_settings_fail_loudly(changes: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidArgument) as caught:
        FrontendSettings(**changes)  # type: ignore[arg-type]
    assert caught.value.field == field


def test_push_max_attempts_follows_configuration() -> None:
    assert FrontendSettings().push_max_attempts == 17
    assert FrontendSettings(max_delivery_attempts=5).push_max_attempts == 5


def test_renewal_renews_at_half_time_until_the_bound() -> None:
    table = RenewalTable(extend_ms=60_000, consume_bound_ms=150_000, time=TimeBase(ManualClock()))
    table.add("h1", "c1", delivered_ms=0, deadline_ms=60_000)
    assert table.next_check_ms(0) == 30_000
    assert table.due(10_000) == []
    assert table.due(30_000) == [("h1", "h1", 60_000)]
    table.renewed("h1", "r2", deadline_ms=90_000, now_ms=30_000)
    assert table.current("h1") == "r2"
    assert table.due(60_000) == [("h1", "r2", 60_000)]
    table.renewed("h1", "r3", deadline_ms=120_000, now_ms=60_000)
    assert table.due(90_000) == [("h1", "r3", 60_000)]
    table.renewed("h1", "r4", deadline_ms=150_000, now_ms=90_000)
    assert table.due(125_000) == []
    assert "h1" not in table
    assert table.next_check_ms(125_000) is None


def test_renewal_follows_the_engines_time_scale() -> None:
    # The engine runs 100 times faster: it granted 600 ms for the policy's 60 s.
    time = TimeBase(ManualClock(), scale=0.01)
    table = RenewalTable(extend_ms=60_000, consume_bound_ms=100_000, time=time)
    table.add("h1", "c1", delivered_ms=1_000, deadline_ms=1_600)
    assert table.due(1_200) == []
    assert table.due(1_300) == [("h1", "h1", 60_000)]
    table.renewed("h1", "r2", deadline_ms=1_900, now_ms=1_300)
    assert table.due(1_600) == [("h1", "r2", 40_000)]


def test_renewal_pop_and_forget() -> None:
    table = RenewalTable(extend_ms=60_000, consume_bound_ms=300_000, time=TimeBase(ManualClock()))
    table.add("late", "c1", 0, 30_000)
    table.add("acked", "c1", 0, 30_000)
    table.add("other", "c2", 0, 30_000)
    table.add("no-deadline", "c2", 0, 0)
    table.renewed("acked", "r9", 40_000, 10_000)
    assert table.pop("acked") == "r9"
    assert table.pop("untracked") == "untracked"
    assert len(table) == 2
    assert table.due(31_000) == []
    assert len(table) == 0
    table.add("a", "c1", 0, 30_000)
    table.add("b", "c2", 0, 30_000)
    table.discard_client("c1")
    assert table.due(25_000) == [("b", "b", 60_000)]
    table.forget("b")
    assert table.current("b") == "b"


def test_resource_limits_map_to_their_own_codes() -> None:
    """A message too large is MESSAGE_BODY_TOO_LARGE; another resource limit (groups, calls)
    is TOO_MANY_REQUESTS, not a body-size error."""
    from gateway.errors import MessageTooLarge, TooManyCalls, TooManyGroups

    code = definition_pb2.Code
    assert codec.error_status(MessageTooLarge(10, 5)).code == code.MESSAGE_BODY_TOO_LARGE
    assert codec.error_status(TooManyGroups(3)).code == code.TOO_MANY_REQUESTS
    assert codec.error_status(TooManyCalls("busy")).code == code.TOO_MANY_REQUESTS


@pytest.mark.parametrize(
    ("namespace", "name", "stored"),
    [
        ("", "orders", "orders"),
        ("prod", "orders", "prod%orders"),
        ("prod", "%DLQ%billing", "%DLQ%prod%billing"),
        ("prod", "%RETRY%billing", "%RETRY%prod%billing"),
        ("prod", "prod%orders", "prod%orders"),
        ("prod", "%DLQ%prod%billing", "%DLQ%prod%billing"),
        ("dev", "prod%orders", "dev%prod%orders"),
    ],
)
def test_a_namespaced_name_is_stored_as_a_rocketmq_proxy_wraps_it(
    namespace: str, name: str, stored: str
) -> None:
    resource = definition_pb2.Resource(name=name, resource_namespace=namespace)
    assert codec.store_name(resource) == stored
