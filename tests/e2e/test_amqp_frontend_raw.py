"""AMQP methods clients seldom expose, with exactly the frames a test writes: channel.flow,
server-named queues, transactions refused, basic.recover, channel-wide prefetch, heartbeats,
consumers per connection, content still arriving when its channel closes, publishing right
before connection.close."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aio_pika
import pytest
from pamqp import commands, frame, header

from adapters.amqp.frontend.framing import method_frame, reply
from tests.amqp_front import AmqpGateway, RawAmqp, amqp_gateway, raw_frame, unique


@pytest.fixture
async def gw(tmp_path: Path) -> AsyncIterator[AmqpGateway]:
    async with amqp_gateway(tmp_path / "data", amqp_heartbeat_s=1) as gateway:
        yield gateway


@pytest.fixture
async def raw(gw: AmqpGateway) -> AsyncIterator[RawAmqp]:
    conn = await RawAmqp.connect(gw.port)
    try:
        yield conn
    finally:
        conn.close()


async def declared(raw: RawAmqp, name: str = "", **kw: object) -> str:
    raw.send(1, commands.Queue.Declare(queue=name, **kw))  # type: ignore[arg-type]
    ok = await raw.expect(commands.Queue.DeclareOk)
    return str(ok.queue)


async def deliveries(raw: RawAmqp, count: int,
                     timeout: float = 3.0) -> list[commands.Basic.Deliver]:
    out = []
    while len(out) < count:
        _, got = await raw.read(timeout)
        if isinstance(got, commands.Basic.Deliver):
            out.append(got)
    return out


async def test_server_named_queue(raw: RawAmqp) -> None:
    name = await declared(raw, exclusive=True)
    assert name.startswith("amq.gen-")
    assert await declared(raw, name, passive=True) == name


async def test_channel_flow_pauses_deliveries(raw: RawAmqp) -> None:
    name = await declared(raw, unique())
    raw.send(1, commands.Channel.Flow(active=False))
    assert (await raw.expect(commands.Channel.FlowOk)).active is False
    raw.send(1, commands.Basic.Consume(queue=name, consumer_tag="c", no_ack=True))
    await raw.expect(commands.Basic.ConsumeOk)
    raw.publish(1, b"held back", name)
    with pytest.raises(TimeoutError):
        await deliveries(raw, 1, timeout=0.5)
    raw.send(1, commands.Channel.Flow(active=True))
    assert (await raw.expect(commands.Channel.FlowOk)).active is True
    (deliver,) = await deliveries(raw, 1)
    assert deliver.consumer_tag == "c"


async def test_a_commit_on_a_channel_that_is_not_transactional_is_406(raw: RawAmqp) -> None:
    raw.send(1, commands.Tx.Commit())
    channel, close = await raw.closed_with()
    assert (channel, close.reply_code) == (1, 406)
    assert "channel is not transactional" in close.reply_text
    assert (close.class_id, close.method_id) == (90, 20)


async def test_recover_requeues_every_unacknowledged_delivery(raw: RawAmqp) -> None:
    name = await declared(raw, unique(), arguments={"x-retry-interval": 10})
    for body in (b"a", b"b"):
        raw.publish(1, body, name)
    raw.send(1, commands.Basic.Consume(queue=name, consumer_tag="c"))
    await raw.expect(commands.Basic.ConsumeOk)
    first = await deliveries(raw, 2)
    assert not any(d.redelivered for d in first)
    raw.send(1, commands.Basic.Recover(requeue=True))
    again = await deliveries(raw, 2)  # after the interval: 10 s at time scale 0.01
    assert all(d.redelivered for d in again)
    raw.send(1, commands.Basic.Ack(delivery_tag=again[-1].delivery_tag, multiple=True))
    raw.send(1, commands.Basic.Recover(requeue=False))
    channel, close = await raw.closed_with()
    assert (channel, close.reply_code) == (0, 540)


async def test_channel_wide_prefetch_bounds_every_consumer_together(raw: RawAmqp) -> None:
    one, two = await declared(raw, unique()), await declared(raw, unique())
    for i in range(5):
        raw.publish(1, b"%d" % i, one)
        raw.publish(1, b"%d" % i, two)
    raw.send(1, commands.Basic.Qos(prefetch_count=3, global_=True))
    await raw.expect(commands.Basic.QosOk)
    for queue, tag in ((one, "c1"), (two, "c2")):
        raw.send(1, commands.Basic.Consume(queue=queue, consumer_tag=tag))
    got = await deliveries(raw, 3)  # (the consume-oks come between them)
    with pytest.raises(TimeoutError):
        await deliveries(raw, 1, timeout=0.5)  # three unacknowledged on the channel: no more
    raw.send(1, commands.Basic.Ack(delivery_tag=got[0].delivery_tag))
    (more,) = await deliveries(raw, 1)
    assert more.delivery_tag > got[-1].delivery_tag


async def test_heartbeats_flow_and_a_silent_peer_is_dropped(gw: AmqpGateway) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", gw.port)
    conn = RawAmqp(reader, writer)
    writer.write(b"AMQP\x00\x00\x09\x01")
    await conn.expect(commands.Connection.Start)
    conn.send(0, commands.Connection.StartOk(client_properties={}, mechanism="PLAIN",
                                             response="\x00guest\x00guest", locale="en_US"))
    tune = await conn.expect(commands.Connection.Tune)
    assert tune.heartbeat == 1
    conn.send(0, commands.Connection.TuneOk(channel_max=0, frame_max=0, heartbeat=1))
    conn.send(0, commands.Connection.Open(virtual_host="/"))
    await conn.expect(commands.Connection.OpenOk)
    # The server sends heartbeats; a peer that sends nothing for two intervals is dropped.
    assert await conn.eof(timeout=5.0)


async def test_a_peer_held_back_by_flow_control_is_not_dropped_for_silence(
    gw: AmqpGateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While the gateway does not read a connection because its messages wait to be stored
    (flow control), its heartbeats wait unread in the socket: that is not silence. Before, a
    publisher held back for two heartbeat intervals (a slow back end) was dropped, and what it
    had published was never confirmed. Here the store is held until the client has kept
    sending heartbeats for three intervals, then every message is confirmed."""
    from adapters.amqp.frontend import publishing
    from adapters.amqp.frontend.context import Limits

    assert gw.app is not None
    front = gw.app.front_ends["amqp"].front  # type: ignore[attr-defined]
    front.ctx.limits = dataclasses.replace(front.ctx.limits, pending_publish_bytes=4096)
    release = asyncio.Event()
    store = publishing._store

    async def held(*args: Any) -> Any:
        await release.wait()
        return await store(*args)

    monkeypatch.setattr(publishing, "_store", held)
    assert isinstance(front.ctx.limits, Limits)
    reader, writer = await asyncio.open_connection("127.0.0.1", gw.port)
    conn = RawAmqp(reader, writer)
    writer.write(b"AMQP\x00\x00\x09\x01")
    await conn.expect(commands.Connection.Start)
    conn.send(0, commands.Connection.StartOk(client_properties={}, mechanism="PLAIN",
                                             response="\x00guest\x00guest", locale="en_US"))
    await conn.expect(commands.Connection.Tune)
    conn.send(0, commands.Connection.TuneOk(channel_max=0, frame_max=0, heartbeat=1))
    conn.send(0, commands.Connection.Open(virtual_host="/"))
    await conn.expect(commands.Connection.OpenOk)
    conn.send(1, commands.Channel.Open())
    await conn.expect(commands.Channel.OpenOk)
    queue = await declared(conn, unique())
    conn.send(1, commands.Confirm.Select())
    await conn.expect(commands.Confirm.SelectOk)
    for _ in range(20):
        conn.publish(1, b"x" * 1024, queue)  # 20 KiB: past the 4 KiB limit, reading stops
    for _ in range(6):  # three intervals of a client that sends its heartbeats
        await asyncio.sleep(0.5)
        conn.send_raw(raw_frame(8, 0, b""))
    release.set()
    acked = 0
    while acked < 20:
        _, got = await conn.answer(5)
        if isinstance(got, commands.Basic.Ack):
            acked = got.delivery_tag if got.multiple else acked + 1
    conn.close()


async def test_a_handshake_that_never_finishes_is_closed(tmp_path: Path) -> None:
    async with amqp_gateway(tmp_path / "hs") as gw:
        assert gw.app is not None
        front = gw.app.front_ends["amqp"]
        front.front.ctx.limits = type(front.front.ctx.limits)(  # type: ignore[attr-defined]
            handshake_timeout_s=0.3)
        reader, writer = await asyncio.open_connection("127.0.0.1", gw.port)
        writer.write(b"AMQP\x00\x00\x09\x01")
        conn = RawAmqp(reader, writer)
        assert await conn.eof(timeout=3.0)


async def test_wrong_protocol_header_gets_ours_and_a_close(gw: AmqpGateway) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", gw.port)
    writer.write(b"AMQP\x01\x01\x00\x0a")
    data = await asyncio.wait_for(reader.read(100), 3)
    assert data == b"AMQP\x00\x00\x09\x01"
    assert await asyncio.wait_for(reader.read(100), 3) == b""


def _limited(gw: AmqpGateway, **limits: object) -> Any:
    """The running front end, its limits replaced."""
    assert gw.app is not None
    front = gw.app.front_ends["amqp"].front  # type: ignore[attr-defined]
    front.ctx.limits = dataclasses.replace(front.ctx.limits, **limits)
    return front


async def test_consumers_per_connection_are_bounded(gw: AmqpGateway) -> None:
    _limited(gw, max_consumers_per_connection=3)
    conn = await RawAmqp.connect(gw.port)
    try:
        name = await declared(conn, unique(), auto_delete=True)
        conn.send(2, commands.Channel.Open())
        await conn.expect(commands.Channel.OpenOk)
        for channel, tag in ((1, "a"), (1, "b"), (2, "c")):
            conn.send(channel, commands.Basic.Consume(queue=name, consumer_tag=tag))
            await conn.expect(commands.Basic.ConsumeOk)
        conn.send(2, commands.Basic.Consume(queue=name, consumer_tag="d"))
        channel, close = await conn.closed_with()
        assert (channel, close.reply_code) == (2, 506)
        assert "per connection" in close.reply_text
    finally:
        conn.close()


async def test_content_still_arriving_is_forgotten_with_its_channel(gw: AmqpGateway) -> None:
    front = _limited(gw)
    conn = await RawAmqp.connect(gw.port)
    try:
        name = await declared(conn, unique())
        # The consume fails (404) while the message after it is still arriving.
        conn.send(1, commands.Basic.Consume(queue=unique("missing")))
        conn.send(1, commands.Basic.Publish(routing_key=name))
        conn.send_raw(frame.marshal(header.ContentHeader(0, 10, commands.Basic.Properties()), 1))
        conn.send_raw(raw_frame(3, 1, b"12345"))
        channel, close = await conn.closed_with()
        assert (channel, close.reply_code) == (1, 404)
        (server_conn,) = front.connections
        assert server_conn.partial_content_bytes == 0
        conn.send(1, commands.Channel.CloseOk())
        conn.send(1, commands.Channel.Open())
        await conn.expect(commands.Channel.OpenOk)
        conn.send(1, commands.Basic.Publish(routing_key=name))
        conn.send_raw(frame.marshal(header.ContentHeader(0, 300_000, commands.Basic.Properties()),
                                    1))
        for _ in range(3):
            conn.send_raw(raw_frame(3, 1, b"x" * 100_000))
        conn.send(1, commands.Basic.Get(queue=name, no_ack=True))
        await conn.expect(commands.Basic.GetOk)
        assert server_conn.partial_content_bytes == 0
    finally:
        conn.close()


async def test_names_beyond_pamqps_pattern_are_served(raw: RawAmqp) -> None:
    """The specification allows any short string as a name (RabbitMQ any UTF-8): a queue
    `orders!é`, an exchange name of 200 bytes and a consumer tag with spaces are declared,
    routed through and delivered with their names (pamqp's own pattern refuses them)."""
    queue, exchange = f"orders!é-{unique()}", "x" * 190 + unique("!")
    raw.send_raw(raw_frame(1, 1, fields(commands.Queue.Declare, queue=queue)))
    assert (await raw.expect(commands.Queue.DeclareOk)).queue == queue
    raw.send_raw(raw_frame(1, 1, fields(commands.Exchange.Declare, exchange=exchange,
                                        exchange_type="fanout")))
    await raw.expect(commands.Exchange.DeclareOk)
    raw.send_raw(raw_frame(1, 1, fields(commands.Queue.Bind, queue=queue, exchange=exchange)))
    await raw.expect(commands.Queue.BindOk)
    raw.send_raw(raw_frame(1, 1, fields(commands.Basic.Publish, exchange=exchange,
                                        routing_key="k!")))
    raw.send_raw(frame.marshal(header.ContentHeader(0, 2, commands.Basic.Properties()), 1))
    raw.send_raw(raw_frame(3, 1, b"hi"))
    raw.send_raw(raw_frame(1, 1, fields(commands.Basic.Consume, queue=queue,
                                        consumer_tag="tag with spaces!", no_ack=True)))
    await raw.expect(commands.Basic.ConsumeOk)
    (deliver,) = await deliveries(raw, 1)
    assert (deliver.exchange, deliver.routing_key) == (exchange, "k!")
    assert deliver.consumer_tag == "tag with spaces!"


def fields(cls: Any, **values: Any) -> bytes:
    """A method frame's payload, encoded like the server's (pamqp's name pattern left out)."""
    return method_frame(0, reply(cls, **values))[7:-1]


async def test_messages_published_before_a_connection_close_are_all_stored(
    gw: AmqpGateway,
) -> None:
    """No confirms, then connection.close at once (amqplib's and aio-pika's close send no
    channel.close first): what came before the close is carried out before the close-ok, as
    RabbitMQ does."""
    name = unique("closed")
    conn = await RawAmqp.connect(gw.port)
    try:
        await declared(conn, name)
        for i in range(200):
            conn.publish(1, b"raw %d" % i, name)
        conn.send(0, commands.Connection.Close(reply_code=200, reply_text="bye", class_id=0,
                                               method_id=0))
        await conn.expect(commands.Connection.CloseOk)
        assert await conn.eof()
    finally:
        conn.close()
    connection = await aio_pika.connect(gw.url)
    channel = await connection.channel()
    for i in range(200):
        await channel.default_exchange.publish(aio_pika.Message(b"pika %d" % i),
                                               routing_key=name)
    await connection.close()
    connection = await aio_pika.connect(gw.url)
    try:
        queue = await (await connection.channel()).declare_queue(name, passive=True)
        bodies = []
        while (message := await queue.get(fail=False, no_ack=True)) is not None:
            bodies.append(message.body)
        assert bodies == [b"raw %d" % i for i in range(200)] + [b"pika %d" % i
                                                                for i in range(200)]
    finally:
        await connection.close()


async def test_once_a_close_is_answered_what_the_client_held_is_free(gw: AmqpGateway) -> None:
    """The close-ok comes after the client's consumers stopped, its unacknowledged deliveries
    went back and its exclusive queues went: the next connection gets them at once."""
    name = unique("held")
    for i in range(20):
        conn = await RawAmqp.connect(gw.port)
        await declared(conn, name)
        exclusive = await declared(conn, f"{name}-x", exclusive=True)
        conn.publish(1, b"%d" % i, name)
        conn.send(1, commands.Basic.Consume(queue=name, consumer_tag="c"))
        await deliveries(conn, 1)
        await closed_cleanly(conn)
        other = await RawAmqp.connect(gw.port)
        assert await declared(other, exclusive, exclusive=True) == exclusive  # not locked
        other.send(1, commands.Basic.Get(queue=name, no_ack=True))
        got = await other.expect(commands.Basic.GetOk)
        assert got.redelivered, i
        await closed_cleanly(other)


async def closed_cleanly(conn: RawAmqp) -> None:
    """connection.close, and wait for the close-ok (what comes before it is skipped)."""
    conn.send(0, commands.Connection.Close(reply_code=200, reply_text="", class_id=0,
                                           method_id=0))
    while not isinstance((await conn.answer())[1], commands.Connection.CloseOk):
        pass
    conn.close()
