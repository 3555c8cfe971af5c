"""Unmodified pika against the gateway's AMQP front end and against the real RabbitMQ on
127.0.0.1:5672, the same steps on both: what the client observes must be the same (where the
gateway once answered otherwise). pika blocks, so each client session runs in a worker thread
while the gateway serves on the event loop."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import TypeVar

import pika
import pytest
from pamqp import commands

from tests.amqp_front import RawAmqp, amqp_gateway_on, unique

T = TypeVar("T")
RABBITMQ_URL = "amqp://guest:guest@127.0.0.1:5672/"


SERVERS = ["gateway", "gateway-on-rabbitmq", "rabbitmq"]


@contextlib.asynccontextmanager
async def server(kind: str, tmp_path: Path, **settings: float) -> AsyncIterator[str]:
    """The URL of the gateway on its embedded store, of the gateway with the real RabbitMQ as
    its back end, or of the real RabbitMQ itself."""
    if kind == "rabbitmq":
        yield RABBITMQ_URL
        return
    store = "rabbitmq" if kind == "gateway-on-rabbitmq" else "embedded"
    async with amqp_gateway_on(store, tmp_path / "data", **settings) as gateway:
        yield gateway.url


@pytest.fixture(params=SERVERS)
async def url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    """A server, the gateway's time 100 times faster (its waits are short)."""
    async with server(request.param, tmp_path) as found:
        yield found


@pytest.fixture(params=SERVERS)
async def url_real_time(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    """A server, the gateway's time not scaled: a delivery is not failed for want of an ack
    within the test. (On the RabbitMQ back end the gateway gave deliveries back after the
    messages its broker consumer already fetched.)"""
    async with server(request.param, tmp_path, time_scale=1.0) as found:
        yield found


async def session(url: str, fn: Callable[[pika.BlockingConnection], T]) -> T:
    """Run `fn` with a fresh blocking connection, in a thread."""
    def run() -> T:
        connection = pika.BlockingConnection(pika.URLParameters(url))
        try:
            return fn(connection)
        finally:
            if connection.is_open:
                connection.close()
    return await asyncio.to_thread(run)


def count_when(ch: pika.adapters.blocking_connection.BlockingChannel, queue: str,
               ready: int, consumers: int) -> tuple[int, int]:
    """The queue's (message count, consumer count) once they are as expected (or the last
    seen after 5 s)."""
    deadline = time.monotonic() + 5
    while True:
        ok = ch.queue_declare(queue, passive=True).method
        seen = (ok.message_count, ok.consumer_count)
        if seen == (ready, consumers) or time.monotonic() > deadline:
            return seen
        time.sleep(0.05)


# ---------------------------------------------------------------------- topic exchange
async def test_a_star_does_not_match_the_empty_routing_key(url: str) -> None:
    """The empty routing key has no words: `*` (exactly one word) does not match it, `#` and
    the empty binding key do. Before, the gateway took it for one empty word and routed it to
    a `*` binding."""
    exchange = unique("topic")

    def client(connection: pika.BlockingConnection) -> dict[str, list[bytes]]:
        ch = connection.channel()
        ch.exchange_declare(exchange, "topic", auto_delete=True)
        queues = {}
        for key in ("*", "#", "", "*.*", "#.*"):
            queue = ch.queue_declare("", exclusive=True).method.queue
            ch.queue_bind(queue, exchange, key)
            queues[key] = queue
        ch.confirm_delivery()
        for routing_key in ("", ".", "a"):
            ch.basic_publish(exchange, routing_key, routing_key.encode() or b"<empty>")
        got: dict[str, list[bytes]] = {}
        for key, queue in queues.items():
            got[key] = []
            while True:
                method, _, body = ch.basic_get(queue, auto_ack=True)
                if method is None:
                    break
                got[key].append(body)
        ch.exchange_delete(exchange)
        return got

    assert await session(url, client) == {
        "*": [b"a"], "#": [b"<empty>", b".", b"a"], "": [b"<empty>"], "*.*": [b"."],
        "#.*": [b".", b"a"]}


# ---------------------------------------------------------------------- queue.delete
async def test_delete_ok_leaves_out_what_a_consumer_holds_unacknowledged(url: str) -> None:
    """A consumer (prefetch 1) holds one message unacknowledged, one is ready: delete-ok
    counts the ready one only. Before, the gateway cancelled the consumer first, which gave
    its delivery back to the queue, and counted it too (2)."""
    name = unique("delete")

    def client(connection: pika.BlockingConnection) -> tuple[tuple[int, int], int, bool]:
        ch = connection.channel()
        ch.queue_declare(name)
        ch.confirm_delivery()
        for body in (b"m0", b"m1"):
            ch.basic_publish("", name, body)
        ch.basic_qos(prefetch_count=1)
        ch.basic_consume(name, lambda *_: None)
        admin = connection.channel()
        before = count_when(admin, name, 1, 1)
        deleted = admin.queue_delete(name).method.message_count
        again = admin.queue_declare(name).method.message_count == 0
        admin.queue_delete(name)
        return before, deleted, again

    assert await session(url, client) == ((1, 1), 1, True)


# ---------------------------------------------------------------------- server-named queues
async def test_a_server_named_queue_takes_messages_and_retries(url: str) -> None:
    """The queue an RPC client declares with an empty name (`amq.gen-...`) takes what is
    published to it, directly and through an exchange, and a nacked delivery comes again.
    Before, with the gateway on a RabbitMQ back end every such publish was nacked: the back
    end declared the broker queue of the same name, which RabbitMQ refuses (403, the reserved
    prefix `amq.`)."""
    def client(connection: pika.BlockingConnection) -> tuple[str, list[bytes], bool]:
        ch = connection.channel()
        queue = ch.queue_declare("", exclusive=True,
                                 arguments={"x-retry-interval": 10}).method.queue
        ch.queue_bind(queue, "amq.direct", "k")
        ch.confirm_delivery()
        ch.basic_publish("", queue, b"direct", mandatory=True)
        ch.basic_publish("amq.direct", "k", b"exchange", mandatory=True)
        bodies = []
        redelivered = False
        deadline = time.monotonic() + 10
        while len(bodies) < 3 and time.monotonic() < deadline:
            method, _, body = ch.basic_get(queue)
            if method is None:
                time.sleep(0.05)
                continue
            bodies.append(body)
            if len(bodies) == 1:
                ch.basic_nack(method.delivery_tag, requeue=True)
            else:
                redelivered = redelivered or method.redelivered
                ch.basic_ack(method.delivery_tag)
        return queue[:8], sorted(bodies), redelivered

    assert await session(url, client) == ("amq.gen-", [b"direct", b"direct", b"exchange"],
                                          True)


# ---------------------------------------------------------------------- direct reply-to
REPLY_TO = "amq.rabbitmq.reply-to"


async def test_direct_reply_to_carries_a_reply_to_the_requesting_channel(url: str) -> None:
    """RPC over RabbitMQ's direct reply-to: the requester consumes the pseudo-queue (no-ack),
    publishes its request with reply_to = the pseudo-queue, the responder (another connection)
    reads the name put there and publishes its reply to it through the default exchange; the
    reply arrives at the requester's consumer, once the requester is gone it is dropped.
    Before, the gateway refused the consume with 404 NOT_FOUND."""
    requests = unique("rpc")

    def client(connection: pika.BlockingConnection) -> list[object]:
        requester = connection.channel()
        requester.queue_declare(requests, auto_delete=True)
        replies: list[tuple[str, str, bool, str | None, bytes]] = []
        requester.basic_consume(REPLY_TO, lambda _ch, m, p, body: replies.append(
            (m.exchange, m.routing_key, m.redelivered, p.correlation_id, body)), auto_ack=True)
        requester.basic_publish("", requests, b"ping", pika.BasicProperties(
            reply_to=REPLY_TO, correlation_id="c1"))
        responder_connection = pika.BlockingConnection(pika.URLParameters(url))
        try:
            responder = responder_connection.channel()
            responder.confirm_delivery()
            request = None
            deadline = time.monotonic() + 5
            while request is None and time.monotonic() < deadline:
                method, properties, _ = responder.basic_get(requests, auto_ack=True)
                request = properties if method is not None else None
            assert request is not None
            name = str(request.reply_to)
            responder.basic_publish("", name, b"pong",
                                    pika.BasicProperties(correlation_id="c1"))
            deadline = time.monotonic() + 5
            while not replies and time.monotonic() < deadline:
                connection.process_data_events(0.1)
            requester.close()
            # The requester's channel is gone: a reply to it is dropped, the responder goes on.
            responder.basic_publish("", name, b"late")
            alive = responder.is_open
        finally:
            responder_connection.close()
        return [name.startswith(REPLY_TO + ".") and len(name) > len(REPLY_TO) + 1,
                replies == [("", name, False, "c1", b"pong")], alive]

    assert await session(url, client) == [True, True, True]


@pytest.mark.parametrize("case", ["ack-mode", "no-consumer"])
async def test_direct_reply_to_refusals(url: str, case: str) -> None:
    """The reply consumer must be no-ack, and a request may name the pseudo-queue only from a
    channel that consumes it: both 406 PRECONDITION_FAILED, the channel closes."""
    def client(connection: pika.BlockingConnection) -> tuple[int, str]:
        ch = connection.channel()
        try:
            if case == "ack-mode":
                ch.basic_consume(REPLY_TO, lambda *_: None, auto_ack=False)
            else:
                queue = ch.queue_declare("", exclusive=True).method.queue
                ch.basic_publish("", queue, b"x", pika.BasicProperties(reply_to=REPLY_TO))
                ch.queue_declare(queue, passive=True)  # the close comes before its answer
        except pika.exceptions.ChannelClosedByBroker as exc:
            return exc.reply_code, exc.reply_text
        return 0, "accepted"

    expected = {"ack-mode": "PRECONDITION_FAILED - reply consumer cannot acknowledge",
                "no-consumer": "PRECONDITION_FAILED - fast reply consumer does not exist"}
    assert await session(url, client) == (406, expected[case])


async def test_a_reply_too_large_for_the_requesters_frames_comes_without_its_largest_header(
    tmp_path: Path
) -> None:
    """Gateway only (a guard, not a comparison): the requester tuned frame_max 4096, the
    responder's reply has a header larger than that. The reply comes as any delivery does when
    its content header would not fit: without its largest headers, `x-headers-dropped` = 1; the
    requester's connection goes on."""
    async with amqp_gateway_on("embedded", tmp_path / "data") as gateway:
        def client(_: pika.BlockingConnection) -> tuple[object, ...]:
            params = pika.URLParameters(gateway.url)
            params.frame_max = 4096
            requester_connection = pika.BlockingConnection(params)
            try:
                requester = requester_connection.channel()
                queue = requester.queue_declare("", exclusive=True).method.queue
                replies: list[tuple[dict[str, object], bytes]] = []
                requester.basic_consume(REPLY_TO, lambda _ch, _m, p, body: replies.append(
                    (dict(p.headers or {}), body)), auto_ack=True)
                requester.basic_publish("", queue, b"ping",
                                        pika.BasicProperties(reply_to=REPLY_TO))
                _, request, _ = requester.basic_get(queue, auto_ack=True)
                responder_connection = pika.BlockingConnection(pika.URLParameters(gateway.url))
                try:
                    responder_connection.channel().basic_publish(
                        "", request.reply_to, b"pong",
                        pika.BasicProperties(headers={"big": "x" * 6000, "small": "s"}))
                finally:
                    responder_connection.close()
                deadline = time.monotonic() + 5
                while not replies and time.monotonic() < deadline:
                    requester_connection.process_data_events(0.1)
                requester.queue_declare(queue, passive=True)  # the connection goes on
                return tuple(replies)
            finally:
                requester_connection.close()

        assert await session(gateway.url, client) == (
            ({"small": "s", "x-headers-dropped": 1}, b"pong"),)


# ---------------------------------------------------------------------- basic.qos
@pytest.mark.parametrize(("steps", "expected"), [
    ([(2, True)], 2),
    ([(4, False), (2, True)], 2),
    ([(2, True), (4, False)], 4),
    ([(2, True), (0, False)], 10),
], ids=["global", "consumer-then-global", "global-then-consumer", "global-then-unlimited"])
async def test_a_consumer_qos_after_a_global_one_lifts_the_channel_limit(
    url: str, steps: list[tuple[int, bool]], expected: int
) -> None:
    """RabbitMQ's basic.qos with global=false also ends a channel-wide (global=true) limit set
    before it; a global one set after a consumer one bounds the channel. Before, the gateway
    kept the earlier global limit (2 unacknowledged deliveries instead of 4 and 10)."""
    def client(connection: pika.BlockingConnection) -> int:
        ch = connection.channel()
        queue = ch.queue_declare("", exclusive=True).method.queue
        ch.confirm_delivery()
        for _ in range(10):
            ch.basic_publish("", queue, b"x")
        for count, global_qos in steps:
            ch.basic_qos(prefetch_count=count, global_qos=global_qos)
        got: list[int] = []
        ch.basic_consume(queue, lambda _ch, m, _p, _b: got.append(m.delivery_tag))
        deadline = time.monotonic() + 1
        while time.monotonic() < deadline:
            connection.process_data_events(0.1)
        return len(got)

    assert await session(url, client) == expected


# ---------------------------------------------------------------------- single active consumer
async def test_a_single_active_consumer_hands_over_in_order(url_real_time: str) -> None:
    """`x-single-active-consumer`: the active consumer (prefetch 2) cancels while it holds two
    deliveries; the waiting consumer gets nothing until they are settled (here given back by
    closing the channel), then every message in order. Before, the gateway made the second
    consumer active at the cancel: it got messages 2..5 while 0 and 1 were still out, and 0
    and 1 after them."""
    name = unique("sac")

    def client(connection: pika.BlockingConnection) -> tuple[list[bytes], list[bytes]]:
        ch = connection.channel()
        ch.queue_declare(name, arguments={"x-single-active-consumer": True})
        ch.confirm_delivery()
        for i in range(6):
            ch.basic_publish("", name, b"%d" % i)
        first = connection.channel()
        first.basic_qos(prefetch_count=2)
        second = connection.channel()
        second.basic_qos(prefetch_count=2)
        got: dict[str, list[bytes]] = {"first": [], "second": []}
        tag = first.basic_consume(name, lambda _c, _m, _p, body: got["first"].append(body))
        second.basic_consume(name, lambda c, m, _p, body: (
            got["second"].append(body), c.basic_ack(m.delivery_tag)))

        def pump(seconds: float) -> None:
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline:
                connection.process_data_events(0.1)

        pump(0.5)
        first.basic_cancel(tag)
        pump(1.0)
        during = list(got["second"])
        first.close()  # 0 and 1 go back
        deadline = time.monotonic() + 10
        while len(got["second"]) < 6 and time.monotonic() < deadline:
            connection.process_data_events(0.1)
        ch.queue_delete(name)
        return during, got["second"]

    assert await session(url_real_time, client) == ([], [b"%d" % i for i in range(6)])


async def test_replies_to_a_requester_that_does_not_read_are_dropped_past_its_backlog(
    tmp_path: Path
) -> None:
    """Gateway only (a guard): a requester that never reads while a responder sends it 20 MiB
    of replies. The gateway holds at most its write backlog limit (8 MiB) for it and drops the
    rest, rather than everything; the responder's publishes are all confirmed and its
    connection goes on."""
    count, size = 200, 100 << 10
    async with amqp_gateway_on("embedded", tmp_path / "data") as gateway:
        requester = await RawAmqp.connect(gateway.port)
        responder = await RawAmqp.connect(gateway.port)
        try:
            requester.send(1, commands.Basic.Consume(queue=REPLY_TO, consumer_tag="r",
                                                     no_ack=True))
            await requester.expect(commands.Basic.ConsumeOk)
            requester.send(1, commands.Queue.Declare(queue="", exclusive=True))
            queue = (await requester.expect(commands.Queue.DeclareOk)).queue
            requester.publish(1, b"ping", queue,
                              properties=commands.Basic.Properties(reply_to=REPLY_TO))
            requester.send(1, commands.Basic.Get(queue=queue, no_ack=True))
            await requester.expect(commands.Basic.GetOk)
            name = (await requester.read())[1].properties.reply_to
            await requester.read()  # the body
            requester.writer.transport.pause_reading()  # from now on it does not read
            responder.send(1, commands.Confirm.Select())
            await responder.expect(commands.Confirm.SelectOk)
            for _ in range(count):
                responder.publish(1, b"x" * size, name)
            acked = 0
            while acked < count:
                _, answer = await responder.answer(timeout=30)
                assert isinstance(answer, commands.Basic.Ack), answer
                acked = answer.delivery_tag
            responder.send(1, commands.Queue.Declare(queue=queue, passive=True))
            await responder.closed_with()  # exclusive to the requester: 405, the channel only
            requester.writer.transport.resume_reading()
            delivered = 0
            with contextlib.suppress(TimeoutError):
                while True:
                    _, got = await requester.answer(timeout=2)
                    delivered += isinstance(got, commands.Basic.Deliver)
            assert 0 < delivered < count
        finally:
            requester.close()
            responder.close()


# ---------------------------------------------------------------------- queue.declare
async def test_an_inequivalent_queue_argument_is_named(url: str) -> None:
    """Declaring a queue again with other arguments: 406, naming the argument that differs, as
    RabbitMQ does (before: 'arguments', with every argument of both declarations)."""
    name = unique("args")

    def client(connection: pika.BlockingConnection) -> str:
        ch = connection.channel()
        ch.queue_declare(name, exclusive=True, arguments={"x-dead-letter-exchange": "dlx"})
        try:
            ch.queue_declare(name, exclusive=True, arguments={
                "x-dead-letter-exchange": "dlx", "x-message-ttl": 1000})
        except pika.exceptions.ChannelClosedByBroker as exc:
            assert exc.reply_code == 406
            return exc.reply_text.split(" for queue")[0]
        return "accepted"

    assert await session(url, client) == "PRECONDITION_FAILED - inequivalent arg 'x-message-ttl'"
