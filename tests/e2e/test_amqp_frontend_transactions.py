"""Channel transactions (`tx.select`, `tx.commit`, `tx.rollback`) with unmodified pika and
aio-pika, each case run against the gateway's AMQP front end and against the real RabbitMQ on
127.0.0.1:5672 with the same calls: publishes and acks in a transaction take effect at its
commit and not at all after a rollback; the refused combinations get RabbitMQ's 406. (Before,
any tx method closed the connection with 540 NOT_IMPLEMENTED.)"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path

import aio_pika
import pika
import pytest
from pika.exceptions import ChannelClosedByBroker

from tests.amqp_front import unique
from tests.e2e.test_amqp_frontend_client_parity import server, session

SERVERS = ["gateway", "rabbitmq"]


@pytest.fixture(params=SERVERS)
async def url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    async with server(request.param, tmp_path) as found:
        yield found


def _get_all(ch: pika.adapters.blocking_connection.BlockingChannel, queue: str,
             wait_s: float = 0.5) -> list[bytes]:
    """Every message the queue hands out within `wait_s` (auto-ack)."""
    got: list[bytes] = []
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        method, _, body = ch.basic_get(queue, auto_ack=True)
        if method is None:
            time.sleep(0.02)
            continue
        got.append(body)
    return got


async def test_publishes_take_effect_at_commit_and_not_after_a_rollback(url: str) -> None:
    def run(connection: pika.BlockingConnection) -> tuple[list[bytes], list[bytes], list[bytes]]:
        queue = unique("txq")
        reader = connection.channel()
        reader.queue_declare(queue)
        ch = connection.channel()
        ch.tx_select()
        ch.basic_publish("", queue, b"one")
        ch.basic_publish("", queue, b"two")
        before = _get_all(reader, queue, 0.3)  # nothing until the commit
        ch.tx_commit()
        committed = _get_all(reader, queue)
        ch.basic_publish("", queue, b"dropped")
        ch.tx_rollback()
        ch.basic_publish("", queue, b"three")
        ch.tx_commit()
        return before, committed, _get_all(reader, queue)

    before, committed, last = await session(url, run)
    assert before == []
    assert committed == [b"one", b"two"]
    assert last == [b"three"]


async def test_acks_take_effect_at_commit_and_a_rolled_back_ack_leaves_it_unacked(
    url: str,
) -> None:
    def run(connection: pika.BlockingConnection) -> tuple[list[bytes], bool]:
        queue = unique("txq")
        ch = connection.channel()
        ch.queue_declare(queue)
        for body in (b"a", b"b"):
            ch.basic_publish("", queue, body)
        tx = connection.channel()
        tx.tx_select()
        deadline = time.monotonic() + 10
        got: list[tuple[int, bytes]] = []
        while len(got) < 2 and time.monotonic() < deadline:
            method, _, body = tx.basic_get(queue)
            if method is not None:
                got.append((method.delivery_tag, body))
        tag_a = next(tag for tag, body in got if body == b"a")
        tag_b = next(tag for tag, body in got if body == b"b")
        tx.basic_ack(tag_a)
        tx.tx_commit()  # a is settled for good
        tx.basic_ack(tag_b)
        tx.tx_rollback()  # b's ack never happened: b comes again once the channel closes
        tx.close()
        again = _get_all(ch, queue, 2.0)
        return again, True

    again, _ = await session(url, run)
    assert again == [b"b"]


@pytest.mark.parametrize("case", ["commit-without-select", "rollback-without-select",
                                  "select-in-confirm-mode", "confirm-in-tx-mode"])
async def test_refused_combinations_get_rabbitmqs_406(url: str, case: str) -> None:
    def run(connection: pika.BlockingConnection) -> tuple[int, str]:
        ch = connection.channel()
        with pytest.raises(ChannelClosedByBroker) as closed:
            if case == "commit-without-select":
                ch.tx_commit()
            elif case == "rollback-without-select":
                ch.tx_rollback()
            elif case == "select-in-confirm-mode":
                ch.confirm_delivery()
                ch.tx_select()
            else:
                ch.tx_select()
                ch.confirm_delivery()
        assert connection.is_open  # a channel error only
        return closed.value.reply_code, str(closed.value.reply_text)

    code, text = await session(url, run)
    assert code == 406
    wanted = {"commit-without-select": "channel is not transactional",
              "rollback-without-select": "channel is not transactional",
              "select-in-confirm-mode": "cannot switch from confirm to tx mode",
              "confirm-in-tx-mode": "cannot switch from tx to confirm mode"}[case]
    assert wanted in text


async def test_aio_pika_transactions(url: str) -> None:
    queue_name = unique("txq")
    connection = await aio_pika.connect(url)
    try:
        channel = await connection.channel(publisher_confirms=False)
        queue = await channel.declare_queue(queue_name)
        async with channel.transaction():
            await channel.default_exchange.publish(aio_pika.Message(b"in-tx"), queue_name)
            assert await queue.get(fail=False) is None
        message = await queue.get(timeout=5)
        assert message is not None and message.body == b"in-tx"
        await message.ack()
        transaction = channel.transaction()
        await transaction.select()
        await channel.default_exchange.publish(aio_pika.Message(b"rolled-back"), queue_name)
        await transaction.rollback()
        assert await queue.get(fail=False) is None
    finally:
        await connection.close()


async def test_an_unroutable_mandatory_publish_is_returned_at_commit(url: str) -> None:
    def run(connection: pika.BlockingConnection) -> list[bytes]:
        returned: list[bytes] = []
        ch = connection.channel()
        ch.add_on_return_callback(lambda _ch, _m, _p, body: returned.append(body))
        ch.tx_select()
        ch.basic_publish("", unique("nowhere"), b"lost", mandatory=True)
        ch.tx_commit()
        connection.process_data_events(0.5)
        return returned

    assert await session(url, run) == [b"lost"]


async def test_a_transaction_past_its_bound_closes_the_channel_and_frees_its_room(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Gateway only (RabbitMQ has no such bound): a transaction may hold MAX_CHANNEL_BYTES;
    past it 506 closes the channel and what it held is dropped; the connection goes on."""
    from adapters.amqp.frontend import txn

    monkeypatch.setattr(txn, "MAX_CHANNEL_BYTES", 1 << 20)
    async with server("gateway", tmp_path) as found:
        def run(connection: pika.BlockingConnection) -> tuple[int, list[bytes]]:
            queue = unique("txq")
            ch = connection.channel()
            ch.queue_declare(queue)
            ch.tx_select()
            with pytest.raises(ChannelClosedByBroker) as closed:
                for _ in range(8):
                    ch.basic_publish("", queue, b"x" * (256 << 10))
                ch.tx_commit()
            other = connection.channel()
            other.basic_publish("", queue, b"after")
            return closed.value.reply_code, _get_all(other, queue)

        code, got = await session(found, run)
    assert code == 506
    assert got == [b"after"]


@pytest.mark.parametrize("case", ["unknown", "twice"])
async def test_a_bad_ack_in_a_transaction_is_refused_at_once_and_drops_the_transaction(
    url: str, case: str,
) -> None:
    """RabbitMQ checks an ack's delivery tag when the ack comes, in a transaction too (an
    unknown tag, or one already acked in this transaction): 406 closes the channel then, and
    the publish held before it is never stored."""
    def run(connection: pika.BlockingConnection) -> tuple[int, str, list[bytes]]:
        queue = unique("txq")
        ch = connection.channel()
        ch.queue_declare(queue)
        ch.basic_publish("", queue, b"first")
        tx = connection.channel()
        tx.tx_select()
        tag = 99
        if case == "twice":
            method = None
            deadline = time.monotonic() + 10
            while method is None and time.monotonic() < deadline:
                method, _, _ = tx.basic_get(queue)
            assert method is not None
            tag = method.delivery_tag
            tx.basic_ack(tag)
        tx.basic_publish("", queue, b"held")
        with pytest.raises(ChannelClosedByBroker) as closed:
            tx.basic_ack(tag)
            tx.tx_commit()
        left = _get_all(ch, queue, 1.0)
        return closed.value.reply_code, str(closed.value.reply_text), left

    code, text, left = await session(url, run)
    assert code == 406
    assert "unknown delivery tag" in text
    assert b"held" not in left


async def test_basic_recover_leaves_a_delivery_acked_in_the_transaction_to_the_commit(
    url: str,
) -> None:
    """On RabbitMQ an ack in a transaction takes its delivery out of the channel's
    unacknowledged ones at once: `basic.recover` does not hand it back, the commit acks it."""
    def run(connection: pika.BlockingConnection) -> list[bytes]:
        queue = unique("txq")
        ch = connection.channel()
        ch.queue_declare(queue)
        ch.basic_publish("", queue, b"a")
        tx = connection.channel()
        tx.tx_select()
        method = None
        deadline = time.monotonic() + 10
        while method is None and time.monotonic() < deadline:
            method, _, _ = tx.basic_get(queue)
        assert method is not None
        tx.basic_ack(method.delivery_tag)
        tx.basic_recover(requeue=True)
        tx.tx_commit()
        tx.close()
        return _get_all(ch, queue, 1.0)

    assert await session(url, run) == []
