"""What declared queues, exchanges and bindings hold in memory is bounded, per connection and for
the whole gateway (`[amqp] max_topology_mb_per_connection`, `max_topology_mb`): a declaration past
a budget closes its channel with 406 PRECONDITION_FAILED naming the setting and its value; the
connection, and every other client, go on. Before, only each frame was bounded: 2,000 queues of
800 arguments took the gateway to 325 MB.

The budgets here are 1 and 2 MiB; a queue of 1,000 arguments counts about 0.26 MiB."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from pamqp import commands

from tests.amqp_front import AmqpGateway, RawAmqp, amqp_gateway, unique

HEAVY = {f"k{i:04d}": i for i in range(1000)}
"""1,000 arguments: about 0.26 MiB counted (`footprint`), 11 KB on the wire."""


@pytest.fixture
async def gw(tmp_path: Path) -> AsyncIterator[AmqpGateway]:
    async with amqp_gateway(tmp_path / "data", amqp_max_topology_mb=2,
                            amqp_max_topology_mb_per_connection=1) as gateway:
        yield gateway


async def declare(raw: RawAmqp, name: str, channel: int = 1, **kw: Any) -> Any:
    """The answer to a queue.declare: DeclareOk, or the channel's close."""
    raw.send(channel, commands.Queue.Declare(queue=name, **kw))
    _, got = await raw.answer()
    if isinstance(got, commands.Channel.Close):
        raw.send(channel, commands.Channel.CloseOk())
    return got


async def fill(raw: RawAmqp, **kw: Any) -> tuple[list[str], Any]:
    """Declare heavy queues until one is refused: (those declared, the refusal)."""
    names: list[str] = []
    for _ in range(20):
        name = unique()
        got = await declare(raw, name, arguments=HEAVY, **kw)
        if not isinstance(got, commands.Queue.DeclareOk):
            return names, got
        names.append(name)
    raise AssertionError("never refused")


async def works(raw: RawAmqp, channel: int = 1) -> None:
    """The connection declares a queue, publishes to it and gets the message back."""
    name = unique()
    assert isinstance(await declare(raw, name, channel), commands.Queue.DeclareOk)
    raw.publish(channel, b"still here", name)
    raw.send(channel, commands.Basic.Get(queue=name, no_ack=True))
    _, got = await raw.answer()
    assert isinstance(got, commands.Basic.GetOk), got


async def delete_and_declare_again(raw: RawAmqp, channel: int, name: str) -> None:
    """On a new channel, delete queue `name`: a heavy queue is declared in the room it freed."""
    raw.send(channel, commands.Channel.Open())
    await raw.expect(commands.Channel.OpenOk)
    raw.send(channel, commands.Queue.Delete(queue=name))
    await raw.expect(commands.Queue.DeleteOk)
    assert isinstance(await declare(raw, unique(), channel, arguments=HEAVY),
                      commands.Queue.DeclareOk)


async def test_one_connection_is_bounded_and_the_others_go_on(gw: AmqpGateway) -> None:
    other = await RawAmqp.connect(gw.port)
    heavy = await RawAmqp.connect(gw.port)
    try:
        names, refused = await fill(heavy)
        assert len(names) == 3
        assert isinstance(refused, commands.Channel.Close)
        assert refused.reply_code == 406
        assert refused.reply_text.startswith("PRECONDITION_FAILED - cannot declare queue")
        assert "declared on this connection" in refused.reply_text
        assert "1 MiB (amqp.max_topology_mb_per_connection)" in refused.reply_text
        await works(other)
        # Only the channel closed; what the connection deletes frees its budget.
        await delete_and_declare_again(heavy, 2, names[0])
        await works(heavy, 2)
    finally:
        heavy.close()
        other.close()


async def test_every_connection_together_is_bounded(gw: AmqpGateway) -> None:
    """Durable queues stay after their connection; the gateway's budget counts them all."""
    names = await fill_and_leave(gw, 2)  # 3 each, their connections' budgets
    second = await RawAmqp.connect(gw.port)
    try:
        more, refused = await fill(second, durable=True)
        assert len(names) + len(more) == 7  # 2 MiB: 7 queues of 0.26 MiB
        assert refused.reply_code == 406
        assert "declared on this gateway" in refused.reply_text
        assert "2 MiB (amqp.max_topology_mb)" in refused.reply_text
        # Bindings and exchanges count too.
        second.send(2, commands.Channel.Open())
        await second.expect(commands.Channel.OpenOk)
        second.send(2, commands.Exchange.Declare(exchange=unique("x"), exchange_type="headers",
                                                 arguments=HEAVY))
        channel, close = await second.closed_with()
        assert (channel, close.reply_code) == (2, 406)
        assert "cannot declare exchange" in close.reply_text
        second.send(2, commands.Channel.CloseOk())
        second.send(3, commands.Channel.Open())
        await second.expect(commands.Channel.OpenOk)
        second.send(3, commands.Queue.Bind(queue=more[0], exchange="amq.headers",
                                           arguments={"x-match": "any", **HEAVY}))
        channel, close = await second.closed_with()
        assert (channel, close.reply_code) == (3, 406)
        assert "cannot declare a binding of queue" in close.reply_text
        # Deleting frees room for everyone.
        await delete_and_declare_again(second, 4, names[0])
    finally:
        second.close()


async def test_a_restarted_gateway_counts_what_it_read_back(gw: AmqpGateway) -> None:
    names = await fill_and_leave(gw, 2)
    await gw.restart()
    second = await RawAmqp.connect(gw.port)
    try:
        more, refused = await fill(second, durable=True)
        assert len(names) + len(more) == 7
        assert "2 MiB (amqp.max_topology_mb)" in refused.reply_text
    finally:
        second.close()


async def fill_and_leave(gw: AmqpGateway, connections: int) -> list[str]:
    """Durable heavy queues declared by `connections` connections, each to its budget."""
    names: list[str] = []
    for _ in range(connections):
        conn = await RawAmqp.connect(gw.port)
        declared, refused = await fill(conn, durable=True)
        assert "amqp.max_topology_mb_per_connection" in refused.reply_text
        names += declared
        conn.close()
    return names
