"""Where the AMQP front end once answered otherwise than RabbitMQ: each conversation is held, with
the same raw frames, with the gateway and with the real broker on 127.0.0.1:5672, and both must
answer alike (acknowledging an unknown delivery tag with multiple=true, `basic.qos` with
global=false and the consumers already started, a `channel.open` on a channel that is open or
closing, a queue past the queue limit)."""

from __future__ import annotations

import shutil
import subprocess
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from pamqp import commands

from adapters.amqp.frontend import topology
from adapters.amqp.frontend.framing import method_frame
from tests.amqp_front import RawAmqp, amqp_gateway, unique

RABBITMQ_PORT = 5672
CLOSE = commands.Channel.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0)


@pytest.fixture(params=["gateway", "rabbitmq"])
async def port(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[int]:
    if request.param == "rabbitmq":
        yield RABBITMQ_PORT
        return
    async with amqp_gateway(tmp_path / "data") as gateway:
        yield gateway.port


@pytest.fixture
async def raw(port: int) -> AsyncIterator[RawAmqp]:
    conn = await RawAmqp.connect(port)
    try:
        yield conn
    finally:
        conn.close()


def shown(channel: int, method: Any) -> tuple[int, str, int | None]:
    return channel, type(method).__name__, getattr(method, "reply_code", None)


async def answers(raw: RawAmqp, count: int) -> list[tuple[int, str, int | None]]:
    """The next `count` methods the server sends, as (channel, name, reply code)."""
    return [shown(*await raw.answer()) for _ in range(count)]


async def queue_with(raw: RawAmqp, count: int) -> str:
    raw.send(1, commands.Queue.Declare(queue="", exclusive=True))
    name = str((await raw.expect(commands.Queue.DeclareOk)).queue)
    for i in range(count):
        raw.publish(1, b"%d" % i, name)
    return name


async def delivered(raw: RawAmqp, count: int, timeout: float = 5.0) -> list[Any]:
    out = []
    while len(out) < count:
        _, got = await raw.answer(timeout)
        assert isinstance(got, commands.Basic.Deliver), got
        out.append(got)
    return out


# ---------------------------------------------------------------------- unknown delivery tags
@pytest.mark.parametrize("settle", [
    lambda tag: commands.Basic.Ack(delivery_tag=tag, multiple=True),
    lambda tag: commands.Basic.Nack(delivery_tag=tag, multiple=True, requeue=True),
    lambda tag: commands.Basic.Ack(delivery_tag=tag),
    lambda tag: commands.Basic.Reject(delivery_tag=tag, requeue=True),
], ids=["ack-multiple", "nack-multiple", "ack", "reject"])
async def test_settling_a_tag_never_delivered_closes_the_channel(raw: RawAmqp, settle: Any
                                                                 ) -> None:
    """Before, ack / nack with multiple=true and an unknown tag settled the earlier ones and
    was accepted; RabbitMQ wants the tag itself outstanding."""
    name = await queue_with(raw, 2)
    raw.send(1, commands.Basic.Consume(queue=name, consumer_tag="c"))
    await raw.expect(commands.Basic.ConsumeOk)
    tags = [d.delivery_tag for d in await delivered(raw, 2)]
    raw.send(1, settle(max(tags) + 3))
    channel, close = await raw.closed_with()
    assert (channel, close.reply_code) == (1, 406)
    assert close.reply_text == f"PRECONDITION_FAILED - unknown delivery tag {max(tags) + 3}"


async def test_multiple_with_tag_zero_acknowledges_everything_outstanding(raw: RawAmqp) -> None:
    name = await queue_with(raw, 3)
    raw.send(1, commands.Basic.Consume(queue=name, consumer_tag="c"))
    await raw.expect(commands.Basic.ConsumeOk)
    tags = [d.delivery_tag for d in await delivered(raw, 3)]
    raw.send(1, commands.Basic.Ack(delivery_tag=0, multiple=True))
    raw.send(1, commands.Basic.Qos(prefetch_count=0))
    assert shown(*await raw.answer()) == (1, "QosOk", None)  # accepted
    raw.send(1, commands.Basic.Ack(delivery_tag=tags[0]))  # it was acknowledged: unknown now
    channel, close = await raw.closed_with()
    assert (channel, close.reply_code) == (1, 406)


async def test_tag_zero_without_multiple_is_unknown(raw: RawAmqp) -> None:
    raw.send(1, commands.Basic.Ack(delivery_tag=0))
    channel, close = await raw.closed_with()
    assert (channel, close.reply_code, close.reply_text) == (
        1, 406, "PRECONDITION_FAILED - unknown delivery tag 0")


@pytest.mark.parametrize("tag", [2**63, 2**64 - 1])
async def test_a_tag_past_the_signed_range_is_named_as_sent(raw: RawAmqp, tag: int) -> None:
    """A delivery tag is an unsigned 64-bit number: before, one of 2**63 or more was named as a
    negative number in the close's text."""
    raw.send(1, commands.Basic.Ack(delivery_tag=tag - 2**64))  # pamqp packs it signed
    channel, close = await raw.closed_with()
    assert (channel, close.reply_code, close.reply_text) == (
        1, 406, f"PRECONDITION_FAILED - unknown delivery tag {tag}")


# ---------------------------------------------------------------------- basic.qos global=false
async def test_qos_without_global_leaves_the_consumers_already_started_alone(raw: RawAmqp
                                                                            ) -> None:
    """Before, the second qos raised the first consumer's prefetch to 3 as well."""
    first, second = await queue_with(raw, 5), await queue_with(raw, 5)
    raw.send(1, commands.Basic.Qos(prefetch_count=1))
    await raw.expect(commands.Basic.QosOk)
    raw.send(1, commands.Basic.Consume(queue=first, consumer_tag="one"))
    await raw.expect(commands.Basic.ConsumeOk)
    raw.send(1, commands.Basic.Qos(prefetch_count=3))
    got = await delivered_or_ok(raw, 1)
    raw.send(1, commands.Basic.Consume(queue=second, consumer_tag="two"))
    got += await delivered_or_ok(raw, 1)
    got += await until_quiet(raw)
    assert Counter(d.consumer_tag for d in got) == {"one": 1, "two": 3}


async def test_global_qos_is_shared_by_every_consumer_of_the_channel(raw: RawAmqp) -> None:
    first, second = await queue_with(raw, 5), await queue_with(raw, 5)
    raw.send(1, commands.Basic.Qos(prefetch_count=3, global_=True))
    await raw.expect(commands.Basic.QosOk)
    for queue, tag in ((first, "one"), (second, "two")):
        raw.send(1, commands.Basic.Consume(queue=queue, consumer_tag=tag))
    got = await until_quiet(raw)
    assert len(got) == 3


async def delivered_or_ok(raw: RawAmqp, oks: int) -> list[Any]:
    """Deliveries read until `oks` qos-oks or consume-oks came."""
    out = []
    while oks:
        _, got = await raw.answer()
        if isinstance(got, commands.Basic.Deliver):
            out.append(got)
        else:
            assert isinstance(got, commands.Basic.QosOk | commands.Basic.ConsumeOk), got
            oks -= 1
    return out


async def until_quiet(raw: RawAmqp) -> list[Any]:
    """Deliveries read until none comes for half a second (a prefetch holds the rest back)."""
    out = []
    while True:
        try:
            _, got = await raw.answer(timeout=0.5)
        except TimeoutError:
            return out
        assert isinstance(got, commands.Basic.Deliver | commands.Basic.ConsumeOk), got
        if isinstance(got, commands.Basic.Deliver):
            out.append(got)


# ---------------------------------------------------------------------- channel.open again
MISSING = commands.Queue.Declare(queue="no-such-queue-" + unique(), passive=True)
DECLARE = commands.Queue.Declare(queue="", exclusive=True)
OPEN = commands.Channel.Open()
REOPENED = (0, "Close", 504)


@pytest.mark.parametrize(("steps", "expected"), [
    # The client's close, then an open before its close-ok: the answers to what came before,
    # then the connection error (no close-ok).
    ([[DECLARE, CLOSE, OPEN]], [(1, "DeclareOk", None), REOPENED]),
    ([[DECLARE, OPEN]], [(1, "DeclareOk", None), REOPENED]),
    # The server's close (a failed method), then an open before the client's close-ok: in
    # order, after the channel's close (before, the open was refused first).
    ([[MISSING, OPEN]], [(1, "Close", 404), REOPENED]),
    ([[MISSING], [OPEN]], [(1, "Close", 404), REOPENED]),
    # Both closed at once: the client's close is answered too (before, it was discarded).
    ([[MISSING, CLOSE, OPEN]], [(1, "Close", 404), (1, "CloseOk", None), REOPENED]),
    # Other methods are discarded until the close-ok; then the channel may be opened again.
    ([[MISSING], [commands.Basic.Qos(prefetch_count=1), commands.Channel.CloseOk(), OPEN]],
     [(1, "Close", 404), (1, "OpenOk", None)]),
], ids=["client-close", "open-channel", "server-close-pipelined", "server-close",
        "both-close", "after-close-ok"])
async def test_channel_open_on_an_open_or_closing_channel(raw: RawAmqp, steps: list[list[Any]],
                                                          expected: list[Any]) -> None:
    got: list[Any] = []
    for i, step in enumerate(steps):
        raw.send_raw(b"".join(method_frame(1, method) for method in step))
        if i < len(steps) - 1:
            got += await answers(raw, 1)
    got += await answers(raw, len(expected) - len(got))
    assert got == expected


# ---------------------------------------------------------------------- count limits
LIMIT = 2


def rabbitmqctl(*args: str) -> None:
    tool = shutil.which("rabbitmqctl")
    if tool is None:
        pytest.skip("rabbitmqctl is not installed")
    done = subprocess.run([tool, *args], capture_output=True, text=True, timeout=60,
                          check=False)
    if done.returncode != 0:
        pytest.skip(f"rabbitmqctl {args[0]} failed: {done.stderr.strip()[:200]}")


@pytest.fixture(params=["gateway", "rabbitmq"])
async def limited(request: pytest.FixtureRequest, tmp_path: Path,
                  monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[RawAmqp]:
    """A connection to a server that keeps at most LIMIT queues: the gateway with its queue
    limit lowered, or the real broker on a throwaway virtual host with `max-queues` LIMIT."""
    if request.param == "gateway":
        monkeypatch.setattr(topology, "MAX_QUEUES", LIMIT)
        async with amqp_gateway(tmp_path / "data") as gateway:
            conn = await RawAmqp.connect(gateway.port)
            try:
                yield conn
            finally:
                conn.close()
        return
    vhost = unique("gw-limits")
    rabbitmqctl("add_vhost", vhost)
    try:
        rabbitmqctl("set_permissions", "-p", vhost, "guest", ".*", ".*", ".*")
        rabbitmqctl("set_vhost_limits", "-p", vhost, f'{{"max-queues": {LIMIT}}}')
        conn = await RawAmqp.connect(RABBITMQ_PORT, vhost=vhost)
        try:
            yield conn
        finally:
            conn.close()
    finally:
        rabbitmqctl("delete_vhost", vhost)


async def test_a_queue_past_the_queue_limit_closes_the_channel_only(limited: RawAmqp) -> None:
    """Before, the gateway answered 506 RESOURCE_ERROR; RabbitMQ answers 406
    PRECONDITION_FAILED ("queue limit in vhost ... is reached") and closes the channel: the
    connection goes on, queues already there may be declared again, and one deleted makes
    room."""
    raw = limited
    first, second, third = unique("lim"), unique("lim"), unique("lim")
    for name in (first, second):
        raw.send(1, commands.Queue.Declare(queue=name))
        await raw.expect(commands.Queue.DeclareOk)
    raw.send(1, commands.Queue.Declare(queue=third))
    channel, refused = await raw.answer()
    assert (channel, type(refused).__name__, refused.reply_code) == (1, "Close", 406)
    assert "queue limit in vhost" in refused.reply_text
    assert refused.reply_text.endswith(") is reached") or "is reached (" in refused.reply_text
    assert (refused.class_id, refused.method_id) == (50, 10)
    raw.send(1, commands.Channel.CloseOk())
    raw.send(2, commands.Channel.Open())
    raw.send(2, commands.Queue.Declare(queue=first))  # there already: fine at the limit
    raw.send(2, commands.Queue.Declare(queue="", exclusive=True))  # server-named: counted too
    assert await answers(raw, 3) == [(2, "OpenOk", None), (2, "DeclareOk", None),
                                     (2, "Close", 406)]
    raw.send(2, commands.Channel.CloseOk())
    raw.send(3, commands.Channel.Open())
    raw.send(3, commands.Queue.Delete(queue=first))
    raw.send(3, commands.Queue.Declare(queue=third))  # room again
    assert await answers(raw, 3) == [(3, "OpenOk", None), (3, "DeleteOk", None),
                                     (3, "DeclareOk", None)]


@pytest.mark.parametrize("kind", ["exchange", "binding"])
async def test_the_exchange_and_binding_limits_answer_as_the_queue_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """RabbitMQ has no count limit of exchanges or bindings to compare with: the gateway's
    answer as at its queue limit (before: 506 RESOURCE_ERROR), naming the limit; the channel
    closes, the connection goes on."""
    monkeypatch.setattr(topology, "MAX_EXCHANGES", 1)
    monkeypatch.setattr(topology, "MAX_BINDINGS", 1)
    exchange, queue = unique("lim-x"), unique("lim-q")
    async with amqp_gateway(tmp_path / "data") as gateway:
        raw = await RawAmqp.connect(gateway.port)
        try:
            raw.send(1, commands.Exchange.Declare(exchange=exchange, exchange_type="fanout"))
            await raw.expect(commands.Exchange.DeclareOk)
            raw.send(1, commands.Queue.Declare(queue=queue))
            await raw.expect(commands.Queue.DeclareOk)
            raw.send(1, commands.Queue.Bind(queue=queue, exchange=exchange, routing_key="a"))
            await raw.expect(commands.Queue.BindOk)
            if kind == "exchange":
                raw.send(1, commands.Exchange.Declare(exchange=unique("lim-x"),
                                                      exchange_type="fanout"))
                ids = (40, 10)
            else:
                raw.send(1, commands.Queue.Bind(queue=queue, exchange=exchange, routing_key="b"))
                ids = (50, 20)
            channel, refused = await raw.answer()
            assert (channel, type(refused).__name__, refused.reply_code) == (1, "Close", 406)
            assert f"{kind} limit in vhost '/' (1) is reached" in refused.reply_text
            assert (refused.class_id, refused.method_id) == ids
            raw.send(1, commands.Channel.CloseOk())
            raw.send(2, commands.Channel.Open())
            assert await answers(raw, 1) == [(2, "OpenOk", None)]
        finally:
            raw.close()
