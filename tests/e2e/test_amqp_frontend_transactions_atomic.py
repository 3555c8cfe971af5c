"""A transaction's publishes are checked when they come, as RabbitMQ checks them: a publish to
an exchange that does not exist (404), to an internal exchange (403) or with another user's
`user_id` (406) closes the channel at once and the transaction is dropped whole. Before, the
gateway held such a publish unchecked; the commit then stored the publishes held before it and
failed on it: half a transaction. Each case runs against the gateway and the real RabbitMQ."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import aio_pika
import aiormq
import pika
import pytest
from pika.exceptions import ChannelClosedByBroker

from tests.amqp_front import amqp_gateway, unique
from tests.e2e.test_amqp_frontend_auth import TOKENS
from tests.e2e.test_amqp_frontend_client_parity import server, session
from tests.e2e.test_amqp_frontend_transactions import SERVERS, _get_all


@pytest.fixture(params=SERVERS)
async def url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    async with server(request.param, tmp_path) as found:
        yield found


@pytest.mark.parametrize("case", ["no-exchange", "internal", "user-id"])
async def test_a_bad_publish_in_a_transaction_is_refused_at_once_and_nothing_is_stored(
    url: str, case: str,
) -> None:
    def run(connection: pika.BlockingConnection) -> tuple[int, list[bytes], list[bytes]]:
        queue = unique("txq")
        ch = connection.channel()
        ch.queue_declare(queue)
        exchange = unique("txx")
        if case == "internal":
            ch.exchange_declare(exchange, "direct", internal=True)
        tx = connection.channel()
        tx.tx_select()
        tx.basic_publish("", queue, b"held")
        with pytest.raises(ChannelClosedByBroker) as closed:
            if case == "user-id":
                tx.basic_publish("", queue, b"bad",
                                 pika.BasicProperties(user_id="somebody-else"))
            else:
                tx.basic_publish(exchange, queue, b"bad")
            tx.basic_publish("", queue, b"after")
            tx.tx_commit()
        left = _get_all(ch, queue, 1.0)
        # The connection goes on: a new transaction on a new channel commits.
        again = connection.channel()
        again.tx_select()
        again.basic_publish("", queue, b"next")
        again.tx_commit()
        return closed.value.reply_code, left, _get_all(ch, queue, 1.0)

    code, left, later = await session(url, run)
    assert code == {"no-exchange": 404, "internal": 403, "user-id": 406}[case]
    assert left == []
    assert later == [b"next"]


async def test_a_publish_one_may_not_make_is_refused_in_the_transaction_not_at_its_commit(
    tmp_path: Path,
) -> None:
    """With a tokens file: a publish in a transaction to a queue the principal may not publish
    to is 403 when it comes; what the transaction held before it is dropped with it."""
    tokens = tmp_path / "tokens.toml"
    tokens.write_text(TOKENS)
    async with amqp_gateway(tmp_path / "data", tokens_file=str(tokens)) as gw:
        other = await aio_pika.connect(gw.url_for("other", "other-token"))
        app = await aio_pika.connect(gw.url_for("app", "app-token"))
        try:
            mine = await (await app.channel()).declare_queue(
                "orders", durable=True, arguments={"x-consumer-group": "app"})
            theirs = await other.channel()
            await theirs.declare_queue("payments", durable=True,
                                       arguments={"x-consumer-group": "other"})
            ch = await app.channel(publisher_confirms=False)
            await ch.transaction().select()
            await ch.default_exchange.publish(aio_pika.Message(b"held"), routing_key="orders")
            with pytest.raises(aiormq.exceptions.ChannelAccessRefused):
                await ch.default_exchange.publish(aio_pika.Message(b"x"), routing_key="payments")
                await ch.transaction().commit()
            await asyncio.sleep(0.3)
            assert await mine.get(fail=False, timeout=2) is None
        finally:
            await app.close()
            await other.close()
