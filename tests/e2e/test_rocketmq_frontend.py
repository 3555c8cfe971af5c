"""The official RocketMQ 5 Python SDK against the real gateway, changing only the endpoint.

The gateway (its real composition root, embedded store) runs in a thread with its own event loop
(the SDK is blocking and runs its own threads); engine time is shortened with `time_scale`, so a
10 s back-off step takes 100 ms.
Listeners report into queues and tests block on those queues: nothing sleeps for a timer.
"""

from __future__ import annotations

import asyncio
import itertools
import queue
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
from rocketmq import (
    ClientConfiguration,
    ConsumeResult,
    Credentials,
    FilterExpression,
    Message,
    MessageListener,
    Producer,
    PushConsumer,
    SimpleConsumer,
)
from rocketmq.grpc_protocol import definition_pb2, service_pb2, service_pb2_grpc
from rocketmq.v5.exception import BadRequestException
from rocketmq.v5.util.signature import Signature

from adapters.rocketmq.dialect import BACKOFF_MS
from adapters.rocketmq.frontend import FrontendSettings
from gateway.server.app import GatewayApp
from gateway.server.config import ServeConfig
from tests.e2e.sdk_cleanup import close_rocketmq_clients

pytestmark = pytest.mark.slow

TIME_SCALE = 0.01
WAIT_S = 20.0


class Gateway:
    """The real gateway with the RocketMQ front end, served from a background thread."""

    def __init__(
        self,
        data_dir: Path,
        settings: FrontendSettings,
        port: int = 0,
        time_scale: float = TIME_SCALE,
    ) -> None:
        self._time_scale = time_scale
        self._data_dir = data_dir
        self._settings = settings
        self.port = port
        self._ready = threading.Event()
        self._loop = asyncio.new_event_loop()
        self._stop: asyncio.Event | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        if not self._ready.wait(WAIT_S) or self._error is not None:
            raise RuntimeError(f"gateway did not start: {self._error!r}")

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _run(self) -> None:
        try:
            self._loop.run_until_complete(self._serve())
        except BaseException as error:  # reported to the starting test
            self._error = error
            self._ready.set()
        finally:
            self._loop.close()

    async def _serve(self) -> None:
        self._stop = asyncio.Event()
        config = ServeConfig(
            listen=f"127.0.0.1:{self.port}",
            data_dir=str(self._data_dir),
            time_scale=self._time_scale,
            grace_s=0.5,
        )
        app = GatewayApp(config, front_end_settings={"rocketmq": self._settings})
        await app.start()
        try:
            self.port = app.grpc_port
            self._ready.set()
            await self._stop.wait()
        finally:
            await app.stop(0.5)

    def stop(self) -> None:
        if self._stop is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(WAIT_S)


def _settings(**changes: Any) -> FrontendSettings:
    base: dict[str, Any] = dict(long_polling_timeout_s=2, renew_interval_ms=50)
    base.update(changes)
    return FrontendSettings(**base)


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Callable[..., Gateway]]:
    running: list[Gateway] = []

    def _start(
        settings: FrontendSettings | None = None, port: int = 0, time_scale: float = TIME_SCALE
    ) -> Gateway:
        gateway = Gateway(tmp_path / "data", settings or _settings(), port, time_scale)
        running.append(gateway)
        return gateway

    yield _start
    for gateway in running:
        gateway.stop()


@pytest.fixture
def clients() -> Iterator[list[Any]]:
    started: list[Any] = []
    yield started
    close_rocketmq_clients(reversed(started))


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _config(gateway: Gateway, ak: str = "", sk: str = "") -> ClientConfiguration:
    return ClientConfiguration(gateway.endpoint, Credentials(ak, sk))


def _message(topic: str, body: bytes, **fields: Any) -> Message:
    message = Message()
    message.topic = topic
    message.body = body
    for name, value in fields.items():
        if name == "properties":
            for key, item in value.items():
                message.add_property(key, item)
        else:
            setattr(message, name, value)
    return message


@dataclass(frozen=True)
class Seen:
    topic: str
    body: bytes
    message_id: str
    attempt: int
    group: str | None
    at: float


class Recorder(MessageListener):  # type: ignore[misc]
    """Puts every delivery in a queue; fails those whose body starts with `bad`."""

    def __init__(self) -> None:
        self.seen: queue.Queue[Seen] = queue.Queue()

    def consume(self, message: Any) -> Any:
        self.seen.put(
            Seen(
                message.topic,
                message.body,
                message.message_id,
                message.delivery_attempt,
                message.message_group,
                time.monotonic(),
            )
        )
        if message.body.startswith(b"bad"):
            return ConsumeResult.FAILURE
        return ConsumeResult.SUCCESS

    def take(self, count: int) -> list[Seen]:
        return [self.seen.get(timeout=WAIT_S) for _ in range(count)]


def _producer(clients: list[Any], config: ClientConfiguration, topic: str) -> Producer:
    producer = Producer(config, (topic,))
    producer.startup()
    clients.append(producer)
    return producer


def _push(
    clients: list[Any], config: ClientConfiguration, group: str, topic: str, expression: str = "*"
) -> Recorder:
    recorder = Recorder()
    consumer = PushConsumer(config, group, recorder, {topic: FilterExpression(expression)})
    consumer.startup()
    clients.append(consumer)
    return recorder


def _simple(
    clients: list[Any], config: ClientConfiguration, group: str, topic: str
) -> SimpleConsumer:
    consumer = SimpleConsumer(config, group, {topic: FilterExpression("*")}, await_duration=2)
    consumer.startup()
    clients.append(consumer)
    return consumer


def _receive(consumer: SimpleConsumer, count: int, invisible_s: int = 300) -> list[Any]:
    got: list[Any] = []
    deadline = time.monotonic() + WAIT_S
    while len(got) < count and time.monotonic() < deadline:
        try:
            got.extend(consumer.receive(count - len(got), invisible_s))
        except grpc.aio.AioRpcError as error:
            # Right after a gateway restart the SDK's channel may still be reconnecting, and a
            # receive fails at once (the SDK does not retry receives); poll the reconnect.
            if error.code() != grpc.StatusCode.UNAVAILABLE:
                raise
            time.sleep(0.1)
    assert len(got) == count, f"received {len(got)} of {count}"
    return got


def test_producer_kinds_reach_a_simple_consumer(
    start: Callable[..., Gateway], clients: list[Any]
) -> None:
    gateway = start()
    topic, group = _name("t"), _name("g")
    config = _config(gateway)
    producer = _producer(clients, config, topic)
    consumer = _simple(clients, config, group, topic)
    # At least 2 s ahead (`int` cuts up to 1 s off): a time already past when the send arrives
    # is "now", and the message comes as an ordinary one (without its delivery timestamp).
    deliver_at_s = int(time.time()) + 3
    normal = producer.send(_message(topic, b"normal", tag="TagA", keys="k1", properties={"p": "v"}))
    fifo = producer.send(_message(topic, b"fifo", message_group="G1"))
    delayed = producer.send(_message(topic, b"delayed", delivery_timestamp=deliver_at_s))

    got = {m.body: m for m in _receive(consumer, 3)}
    assert set(got) == {b"normal", b"fifo", b"delayed"}
    assert got[b"normal"].message_id == normal.message_id
    assert (got[b"normal"].tag, got[b"normal"].keys) == ("TagA", {"k1"})
    assert got[b"normal"].properties == {"p": "v"}
    assert got[b"fifo"].message_id == fifo.message_id
    assert got[b"fifo"].message_group == "G1"
    assert got[b"delayed"].message_id == delayed.message_id
    # Sent in seconds, read back in milliseconds; never delivered before its time.
    assert got[b"delayed"].delivery_timestamp == deliver_at_s * 1000
    assert time.time() >= deliver_at_s
    assert all(m.delivery_attempt == 1 and not m.corrupted for m in got.values())
    for message in got.values():
        consumer.ack(message)
    assert consumer.receive(3, 300) == []


def test_simple_consumer_extends_and_gets_redeliveries(
    start: Callable[..., Gateway], clients: list[Any]
) -> None:
    gateway = start()
    topic, group = _name("t"), _name("g")
    config = _config(gateway)
    _producer(clients, config, topic).send(_message(topic, b"work"))
    consumer = _simple(clients, config, group, topic)

    # 300 s (3 s scaled): a loaded machine still extends it before it is visible again.
    (first,) = _receive(consumer, 1, invisible_s=300)
    old_handle = first.receipt_handle
    consumer.change_invisible_duration(first, 600)
    assert first.receipt_handle, "ChangeInvisibleDuration must return a receipt handle"
    # Extended to 600 s (6 s scaled): a receive (2 s long polling) finds nothing.
    assert consumer.receive(1, 10) == []
    consumer.change_invisible_duration(first, 10)
    # Not acked: it comes back after its invisible time with the next attempt number.
    (again,) = _receive(consumer, 1, invisible_s=10)
    assert again.message_id == first.message_id
    assert again.delivery_attempt == 2
    with pytest.raises(BadRequestException):
        consumer.ack(_with_handle(first, old_handle))
    consumer.ack(again)
    assert consumer.receive(1, 300) == []


def _with_handle(message: Any, handle: str) -> Any:
    message.receipt_handle = handle
    return message


def test_push_consumer_tag_filter(start: Callable[..., Gateway], clients: list[Any]) -> None:
    gateway = start()
    topic, group = _name("t"), _name("g")
    config = _config(gateway)
    recorder = _push(clients, config, group, topic, "TagA||TagB")
    producer = _producer(clients, config, topic)
    for body, tag in ((b"c", "TagC"), (b"a", "TagA"), (b"b", "TagB"), (b"a2", "TagA")):
        producer.send(_message(topic, body, tag=tag))
    got = {seen.body for seen in recorder.take(3)}
    assert got == {b"a", b"b", b"a2"}
    assert recorder.seen.empty()


def test_failing_push_listener_backs_off_along_the_table_then_dead_letters(
    start: Callable[..., Gateway], clients: list[Any]
) -> None:
    gateway = start(_settings(max_delivery_attempts=4))
    topic, group = _name("t"), _name("g")
    config = _config(gateway)
    recorder = _push(clients, config, group, topic)
    dead = _push(clients, config, _name("dlq-reader"), f"%DLQ%{group}")
    sent = _producer(clients, config, topic).send(_message(topic, b"bad-always"))

    seen = recorder.take(4)
    assert [s.attempt for s in seen] == [1, 2, 3, 4]
    assert {s.message_id for s in seen} == {sent.message_id}
    gaps = [later.at - earlier.at for earlier, later in itertools.pairwise(seen)]
    for gap, step_ms in zip(gaps, BACKOFF_MS, strict=False):
        assert gap >= 0.8 * step_ms * TIME_SCALE / 1000, (gaps, step_ms)
    (letter,) = dead.take(1)
    assert letter.body == b"bad-always"
    assert recorder.seen.empty()


def test_failing_push_listener_walks_the_whole_table_to_the_dlq(
    start: Callable[..., Gateway], clients: list[Any]
) -> None:
    scale = 0.001
    gateway = start(time_scale=scale)
    topic, group = _name("t"), _name("g")
    config = _config(gateway)
    recorder = _push(clients, config, group, topic)
    dead = _push(clients, config, _name("dlq-reader"), f"%DLQ%{group}")
    _producer(clients, config, topic).send(_message(topic, b"bad-forever"))

    # Default policy: 16 retries, so 17 deliveries; then the DLQ.
    seen = [recorder.seen.get(timeout=60) for _ in range(17)]
    assert [s.attempt for s in seen] == list(range(1, 18))
    gaps = [later.at - earlier.at for earlier, later in itertools.pairwise(seen)]
    for gap, step_ms in zip(gaps, BACKOFF_MS, strict=True):
        assert 0.8 * step_ms * scale / 1000 <= gap <= step_ms * scale / 1000 + 3.0, (gaps, step_ms)
    (letter,) = dead.take(1)
    assert letter.body == b"bad-forever"


def test_push_consumer_keeps_a_slow_delivery_invisible(
    start: Callable[..., Gateway], clients: list[Any]
) -> None:
    gateway = start()
    topic, group = _name("t"), _name("g")
    config = _config(gateway)
    release = threading.Event()
    seen: queue.Queue[int] = queue.Queue()

    class Slow(MessageListener):  # type: ignore[misc]
        def consume(self, message: Any) -> Any:
            seen.put(message.delivery_attempt)
            release.wait(WAIT_S)
            return ConsumeResult.SUCCESS

    consumer = PushConsumer(config, group, Slow(), {topic: FilterExpression("*")})
    consumer.startup()
    clients.append(consumer)
    try:
        _producer(clients, config, topic).send(_message(topic, b"slow"))
        assert seen.get(timeout=WAIT_S) == 1
        # The push timeout is 60 s (0.6 s scaled): without renewal it would be redelivered.
        with pytest.raises(queue.Empty):
            seen.get(timeout=1.5)
    finally:
        release.set()


def test_push_renewal_is_bounded(start: Callable[..., Gateway], clients: list[Any]) -> None:
    gateway = start(_settings(push_consume_timeout_ms=120_000))
    topic, group = _name("t"), _name("g")
    config = _config(gateway)
    release = threading.Event()
    seen: queue.Queue[tuple[int, float]] = queue.Queue()

    class Stuck(MessageListener):  # type: ignore[misc]
        def consume(self, message: Any) -> Any:
            seen.put((message.delivery_attempt, time.monotonic()))
            release.wait(WAIT_S)
            return ConsumeResult.SUCCESS

    consumer = PushConsumer(config, group, Stuck(), {topic: FilterExpression("*")})
    consumer.startup()
    clients.append(consumer)
    try:
        _producer(clients, config, topic).send(_message(topic, b"stuck"))
        first, first_at = seen.get(timeout=WAIT_S)
        # Renewed past the 60 s push timeout, but not past the 120 s bound (1.2 s scaled).
        second, second_at = seen.get(timeout=WAIT_S)
        assert (first, second) == (1, 2)
        assert second_at - first_at >= 0.9 * 120_000 * TIME_SCALE / 1000
    finally:
        release.set()


def test_fifo_push_consumer_dead_letters_and_the_group_goes_on_in_order(
    start: Callable[..., Gateway], clients: list[Any]
) -> None:
    group = _name("fifo")
    gateway = start(_settings(fifo_groups=frozenset({group}), orderly_max_delivery_attempts=2))
    topic = _name("t")
    config = _config(gateway)
    recorder = _push(clients, config, group, topic)
    dead = _push(clients, config, _name("dlq-reader"), f"%DLQ%{group}")
    producer = _producer(clients, config, topic)
    for body in (b"bad-head", b"second", b"third"):
        producer.send(_message(topic, body, message_group="order-1"))

    bodies = [seen.body for seen in recorder.take(4)]
    assert bodies == [b"bad-head", b"bad-head", b"second", b"third"]
    (letter,) = dead.take(1)
    assert letter.body == b"bad-head"


def test_wrong_secret_is_rejected(start: Callable[..., Gateway], clients: list[Any]) -> None:
    gateway = start(_settings(credentials={"app": "s3cret"}))
    topic = _name("t")
    _producer(clients, _config(gateway, "app", "s3cret"), topic).send(_message(topic, b"ok"))

    request = service_pb2.QueryRouteRequest()
    request.topic.name = topic
    wrong = Signature.metadata(_config(gateway, "app", "guess"), "client-x")
    with grpc.insecure_channel(gateway.endpoint) as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        with pytest.raises(grpc.RpcError) as caught:
            stub.QueryRoute(request, metadata=wrong, timeout=5)
        assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert "signature mismatch for access key 'app'" in caught.value.details()
        with pytest.raises(grpc.RpcError) as missing:
            stub.QueryRoute(request, timeout=5)
        assert missing.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert "missing authorization header" in missing.value.details()

    intruder = Producer(_config(gateway, "app", "guess"), (topic,))
    intruder.startup()
    clients.append(intruder)
    with pytest.raises(Exception, match="route"):
        intruder.send(_message(topic, b"no"))


def test_unsupported_rpcs_answer_unimplemented(start: Callable[..., Gateway]) -> None:
    gateway = start()
    with grpc.insecure_channel(gateway.endpoint) as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        with pytest.raises(grpc.RpcError) as caught:
            stub.RecallMessage(service_pb2.RecallMessageRequest(), timeout=5)
    assert caught.value.code() == grpc.StatusCode.UNIMPLEMENTED
    assert "not supported" in caught.value.details()


def test_bad_requests_get_clear_statuses(start: Callable[..., Gateway]) -> None:
    gateway = start()
    code = definition_pb2.Code
    with grpc.insecure_channel(gateway.endpoint) as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)

        send = service_pb2.SendMessageRequest()
        message = send.messages.add(body=b"x")
        message.topic.name = _name("t")
        message.system_properties.message_id = "M1"
        message.system_properties.message_type = definition_pb2.MessageType.FIFO
        reply = stub.SendMessage(send, timeout=5)
        assert reply.status.code == code.BAD_REQUEST
        assert "message_group" in reply.status.message
        assert reply.entries[0].status.code == code.BAD_REQUEST

        message.system_properties.message_type = definition_pb2.MessageType.LITE
        reply = stub.SendMessage(send, timeout=5)
        assert reply.status.code == code.UNSUPPORTED

        # The SDKs name the group and topic of every settlement; the gateway requires them.
        ack = service_pb2.AckMessageRequest()
        ack.group.name, ack.topic.name = "g", message.topic.name
        ack.entries.add(message_id="M1", receipt_handle="s.no-such-receipt")
        reply = stub.AckMessage(ack, timeout=5)
        assert reply.status.code == code.INVALID_RECEIPT_HANDLE

        change = service_pb2.ChangeInvisibleDurationRequest(receipt_handle="s.no-such-receipt")
        change.group.CopyFrom(ack.group)
        change.topic.CopyFrom(ack.topic)
        change.invisible_duration.seconds = 30
        reply = stub.ChangeInvisibleDuration(change, timeout=5)
        assert reply.status.code == code.INVALID_RECEIPT_HANDLE
        assert reply.receipt_handle == "s.no-such-receipt"

        receive = service_pb2.ReceiveMessageRequest(batch_size=1)
        receive.group.name = _name("g")
        receive.message_queue.topic.name = _name("t")
        receive.filter_expression.type = definition_pb2.FilterType.SQL
        receive.filter_expression.expression = "a > "  # an SQL92 filter that does not parse
        (only,) = list(stub.ReceiveMessage(receive, timeout=5))
        assert only.status.code == code.ILLEGAL_FILTER_EXPRESSION


def test_metric_exports_are_accepted(start: Callable[..., Gateway]) -> None:
    # Push consumers are told to export OTLP metrics to the gateway; an export must succeed.
    gateway = start()
    with grpc.insecure_channel(gateway.endpoint) as channel:
        export = channel.unary_unary(
            "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export",
            request_serializer=None,
            response_deserializer=None,
        )
        assert export(b"", timeout=5) == b""


def test_clients_keep_working_after_a_gateway_restart(
    start: Callable[..., Gateway], clients: list[Any]
) -> None:
    gateway = start()
    topic, push_group, simple_group = _name("t"), _name("pg"), _name("sg")
    config = _config(gateway)
    producer = _producer(clients, config, topic)
    recorder = _push(clients, config, push_group, topic)
    simple = _simple(clients, config, simple_group, topic)
    producer.send(_message(topic, b"before"))
    assert [s.body for s in recorder.take(1)] == [b"before"]
    (before,) = _receive(simple, 1)
    simple.ack(before)

    port = gateway.port
    gateway.stop()
    start(port=port)

    producer.send(_message(topic, b"after"))
    assert [s.body for s in recorder.take(1)] == [b"after"]
    (after,) = _receive(simple, 1)
    assert after.body == b"after"
    simple.ack(after)


def test_a_delivery_in_flight_at_a_restart_comes_again(
    start: Callable[..., Gateway], clients: list[Any]
) -> None:
    gateway = start()
    topic, group = _name("t"), _name("g")
    config = _config(gateway)
    producer = _producer(clients, config, topic)
    simple = _simple(clients, config, group, topic)
    sent = producer.send(_message(topic, b"in-flight"))
    (first,) = _receive(simple, 1, invisible_s=3600)

    port = gateway.port
    gateway.stop()
    start(port=port)

    (again,) = _receive(simple, 1)
    assert (again.message_id, again.body) == (sent.message_id, b"in-flight")
    with pytest.raises(BadRequestException):
        simple.ack(first)
    simple.ack(again)


def test_access_keys_carry_topic_and_group_permissions(
    start: Callable[..., Gateway], clients: list[Any]
) -> None:
    from adapters.rocketmq.frontend.settings import Permissions
    from adapters.rocketmq.naming import ROCKETMQ
    from gateway.server.auth import Authorizer, Principal

    billing = Principal(name="billing", token_sha256="0" * 64, publish=("orders-*",),
                        consume=("orders-*",), groups=("billing-*",))
    authorizer = Authorizer([billing], [ROCKETMQ])
    gateway = start(_settings(credentials={"billing-ak": "billing-sk"},
                              permissions=Permissions(authorizer, {"billing-ak": billing})))
    config = _config(gateway, "billing-ak", "billing-sk")
    allowed, other = _name("orders"), _name("payments")
    _producer(clients, config, allowed).send(_message(allowed, b"ok"))
    refused = _producer(clients, config, other)
    with pytest.raises(Exception, match=r"(?i)forbidden|may not publish"):
        refused.send(_message(other, b"no"))
    group = _name("billing")
    got = _receive(_simple(clients, config, group, allowed), 1)
    assert [m.body for m in got] == [b"ok"]
    stranger = _simple(clients, config, _name("audit"), allowed)
    with pytest.raises(Exception, match=r"(?i)forbidden|may not consume"):
        stranger.receive(1, 30)
