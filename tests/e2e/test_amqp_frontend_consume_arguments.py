"""`basic.consume` arguments beyond `x-priority`, over raw frames, against the gateway's AMQP
front end and the real RabbitMQ on 127.0.0.1:5672: the replies are RabbitMQ's.

RabbitMQ (3.10) checks the consume arguments some queue type takes: `x-cancel-on-ha-failover`
must be a bool on a classic queue and is refused on a quorum queue, a stream's
`x-stream-offset` is refused on either, and an `x-credit` that is not a table closes the
connection (541). Arguments no queue type knows are ignored. Before, the gateway took every one
of these without a word."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from pamqp import commands

from tests.amqp_front import RawAmqp, amqp_gateway, unique


@pytest.fixture(params=["gateway", "rabbitmq"])
async def port(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[int]:
    if request.param == "rabbitmq":
        yield 5672
        return
    async with amqp_gateway(tmp_path / "data") as gw:
        yield gw.port


async def consume(port: int, queue_type: str, arguments: dict[str, Any]) -> tuple[int, Any]:
    """The answer to a consume with `arguments` on a new queue of `queue_type`."""
    queue = unique("cargs")
    raw = await RawAmqp.connect(port)
    try:
        quorum = queue_type == "quorum"
        raw.send(1, commands.Queue.Declare(
            queue=queue, durable=quorum, arguments={"x-queue-type": "quorum"} if quorum else {}))
        await raw.expect(commands.Queue.DeclareOk)
        raw.send(1, commands.Basic.Consume(queue=queue, consumer_tag="t", arguments=arguments))
        return await raw.read()
    finally:
        raw.close()
        cleanup = await RawAmqp.connect(port)
        cleanup.send(1, commands.Queue.Delete(queue=queue))
        await cleanup.expect(commands.Queue.DeleteOk)
        cleanup.close()


REFUSED = {
    "a string x-cancel-on-ha-failover": (
        "classic", {"x-cancel-on-ha-failover": "yes"}, "{unacceptable_type,longstr}"),
    "an integer x-cancel-on-ha-failover": (
        "classic", {"x-cancel-on-ha-failover": 300}, "{unacceptable_type,short}"),
    "a void x-cancel-on-ha-failover": (
        "classic", {"x-cancel-on-ha-failover": None}, "{unacceptable_type,void}"),
    "x-cancel-on-ha-failover on a quorum queue": (
        "quorum", {"x-cancel-on-ha-failover": True}, "of queue type rabbit_quorum_queue"),
    "x-stream-offset on a classic queue": (
        "classic", {"x-stream-offset": "first"}, "of queue type rabbit_classic_queue"),
    "x-stream-offset on a quorum queue": (
        "quorum", {"x-stream-offset": 5}, "of queue type rabbit_quorum_queue"),
}


@pytest.mark.parametrize("case", list(REFUSED))
async def test_a_consume_argument_rabbitmq_refuses_closes_the_channel(
    port: int, case: str,
) -> None:
    queue_type, arguments, words = REFUSED[case]
    channel, close = await consume(port, queue_type, arguments)
    assert (channel, type(close), close.reply_code) == (1, commands.Channel.Close, 406)
    (name,) = arguments
    assert f"invalid arg '{name}' for queue" in close.reply_text
    assert words in close.reply_text


async def test_an_x_credit_that_is_not_a_table_closes_the_connection(port: int) -> None:
    channel, close = await consume(port, "classic", {"x-credit": "x"})
    assert (channel, type(close), close.reply_code) == (0, commands.Connection.Close, 541)


TAKEN = {
    "a bool x-cancel-on-ha-failover": ("classic", {"x-cancel-on-ha-failover": False}),
    "an x-credit table": ("quorum", {"x-credit": {"credit": 1, "drain": False}}),
    "unknown arguments of any type": ("classic", {"x-unknown": {"a": [1]}, "x-filter": 5}),
    "unknown arguments on a quorum queue": ("quorum", {"x-single-active-consumer": "x"}),
}


@pytest.mark.parametrize("case", list(TAKEN))
async def test_consume_arguments_rabbitmq_takes_are_taken(port: int, case: str) -> None:
    queue_type, arguments = TAKEN[case]
    channel, ok = await consume(port, queue_type, arguments)
    assert (channel, type(ok)) == (1, commands.Basic.ConsumeOk)
