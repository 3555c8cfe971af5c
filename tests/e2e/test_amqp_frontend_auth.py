"""Access control on the AMQP port, attacked with unmodified aio-pika and raw frames: no
credentials, a wrong password (token), another principal's name with one's own token, another
principal's queues (consume, get, purge, delete, bind, passive declare, declaring them with its
group), other groups' retry and dead-letter topics, dead-lettering into a topic one may not publish
to, publishing in another's name; the loopback-only rule without a tokens file; TLS and client
certificates. The full matrix of calls × callers is
`test_auth_matrix.py::test_amqp`."""

from __future__ import annotations

import asyncio
import os
import ssl
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aio_pika
import aiormq
import pytest
from pamqp import commands

from adapters.amqp.frontend.framing import reply
from gateway.errors import InvalidArgument
from gateway.server.config import load
from tests.amqp_front import AmqpGateway, RawAmqp, amqp_gateway, unique
from tests.e2e.test_access_control import make_ca

TOKENS = """
[[principal]]
name = "app"
token = "app-token"
publish = ["orders", "app-*"]
consume = ["orders", "app-*"]
groups = ["app", "app-*"]

[[principal]]
name = "other"
token = "other-token"
publish = ["payments", "other-*"]
consume = ["payments", "other-*"]
groups = ["other", "other-*"]
"""
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
async def gw(tmp_path: Path) -> AsyncIterator[AmqpGateway]:
    tokens = tmp_path / "tokens.toml"
    tokens.write_text(TOKENS)
    async with amqp_gateway(tmp_path / "data", tokens_file=str(tokens)) as gateway:
        yield gateway


async def refused_login(gw: AmqpGateway, user: str, password: str) -> str:
    """The reply text of a login aio-pika reports as refused."""
    with pytest.raises(aiormq.exceptions.ProbableAuthenticationError) as raised:
        await aio_pika.connect(gw.url_for(user, password))
    return str(raised.value)


async def test_logins_need_the_principals_own_token(gw: AmqpGateway) -> None:
    assert "ACCESS_REFUSED" in await refused_login(gw, "", "")
    assert "ACCESS_REFUSED" in await refused_login(gw, "app", "")
    assert "ACCESS_REFUSED" in await refused_login(gw, "app", "not-a-token")
    assert "ACCESS_REFUSED" in await refused_login(gw, "app", "other-token")  # another's token
    assert "ACCESS_REFUSED" in await refused_login(gw, "guest", "guest")
    connection = await aio_pika.connect(gw.url_for("app", "app-token"))
    await connection.close()
    for user, password in (("", ""), ("app", "x"), ("other", "app-token")):
        conn, answer = await RawAmqp.login(gw.port, user, password)
        assert conn is None and isinstance(answer, commands.Connection.Close)
        assert (answer.reply_code, answer.class_id, answer.method_id) == (403, 10, 11)


async def test_amqplain_logins_too(gw: AmqpGateway) -> None:
    for (user, password), answer in ((("other", "app-token"), commands.Connection.Close),
                                     (("app", "app-token"), commands.Connection.Tune)):
        reader, writer = await asyncio.open_connection("127.0.0.1", gw.port)
        conn = RawAmqp(reader, writer)
        try:
            writer.write(b"AMQP\x00\x00\x09\x01")
            start = await conn.expect(commands.Connection.Start)
            assert "AMQPLAIN" in str(start.mechanisms)
            conn.send(0, reply(commands.Connection.StartOk, client_properties={},
                               mechanism="AMQPLAIN", locale="en_US",
                               response=_amqplain(("LOGIN", user), ("PASSWORD", password))))
            got = await conn.expect(answer)
            assert getattr(got, "reply_code", 403) == 403
        finally:
            conn.close()


def _amqplain(*entries: tuple[str, str]) -> str:
    """AMQPLAIN's response: a field table's entries, without its length."""
    out = b""
    for key, value in entries:
        out += bytes([len(key)]) + key.encode() + b"S" + len(value).to_bytes(4, "big") \
            + value.encode()
    return out.decode("ascii")


async def channel_error(connection: aio_pika.abc.AbstractConnection, action: object) -> int:
    """The reply code of the channel error an action on a new channel ends in."""
    channel = await connection.channel()
    with pytest.raises(aiormq.exceptions.ChannelClosed) as raised:
        await action(channel)  # type: ignore[operator]
    codes = {aiormq.exceptions.ChannelAccessRefused: 403,
             aiormq.exceptions.ChannelNotFoundEntity: 404,
             aiormq.exceptions.ChannelLockedResource: 405,
             aiormq.exceptions.ChannelPreconditionFailed: 406}
    return codes.get(type(raised.value), 0)


async def test_another_principals_queue_is_out_of_reach(gw: AmqpGateway) -> None:
    app = await aio_pika.connect(gw.url_for("app", "app-token"))
    other = await aio_pika.connect(gw.url_for("other", "other-token"))
    try:
        ch = await app.channel()
        queue = await ch.declare_queue("orders", durable=True, arguments={
            "x-consumer-group": "app", "x-retry-interval": 10})
        await ch.default_exchange.publish(aio_pika.Message(b"mine"), routing_key="orders")
        attacks = {
            "consume": lambda c: c.declare_queue("orders", passive=True),
            "get": lambda c: _get(c, "orders"),
            "purge": lambda c: _purge(c, "orders"),
            "delete": lambda c: _delete(c, "orders"),
            "declare with the owner's group": lambda c: c.declare_queue("orders", durable=True,
                arguments={"x-consumer-group": "app", "x-retry-interval": 10}),
            "declare with its own group": lambda c: c.declare_queue(
                "orders", arguments={"x-consumer-group": "other"}),
            "bind to its exchange": lambda c: _bind(c, "orders", "payments"),
            "publish": lambda c: _publish(c, "orders"),
        }
        for name, attack in attacks.items():
            assert await channel_error(other, attack) == 403, name
        # Another principal's group on its own topic is refused too.
        assert await channel_error(app, lambda c: c.declare_queue(
            "payments", arguments={"x-consumer-group": "app"})) == 403
        # Nobody publishes in another's name (RabbitMQ's rule for `user_id`).
        assert await channel_error(app, lambda c: _publish(c, "orders", user_id="other")) == 406
        await (await app.channel()).default_exchange.publish(
            aio_pika.Message(b"signed", user_id="app"), routing_key="orders")
        got = await queue.get(timeout=5)
        assert got.body == b"mine"  # untouched by every attack
        await got.ack()
        got = await queue.get(timeout=5)
        assert (got.body, got.user_id) == (b"signed", "app")
        await got.ack()
    finally:
        await other.close()
        await app.close()


async def _get(channel: aio_pika.abc.AbstractChannel, name: str) -> None:
    queue = await channel.get_queue(name, ensure=False)
    await queue.get(fail=False)


async def _purge(channel: aio_pika.abc.AbstractChannel, name: str) -> None:
    await (await channel.get_queue(name, ensure=False)).purge()


async def _delete(channel: aio_pika.abc.AbstractChannel, name: str) -> None:
    await (await channel.get_queue(name, ensure=False)).delete(if_unused=False, if_empty=False)


async def _bind(channel: aio_pika.abc.AbstractChannel, queue: str, exchange: str) -> None:
    await channel.declare_exchange(exchange, aio_pika.ExchangeType.FANOUT)
    await (await channel.get_queue(queue, ensure=False)).bind(exchange)


async def _publish(channel: aio_pika.abc.AbstractChannel, name: str, **properties: Any) -> None:
    confirming = await channel.get_underlay_channel()
    await confirming.confirm_delivery()
    message = aio_pika.Message(b"x", **properties)
    await channel.default_exchange.publish(message, routing_key=name)
    await asyncio.sleep(0.5)  # the refusal closes the channel
    await channel.default_exchange.publish(message, routing_key=name)


async def test_other_groups_retry_and_dead_letter_topics_are_out_of_reach(
    gw: AmqpGateway,
) -> None:
    app = await aio_pika.connect(gw.url_for("app", "app-token"))
    try:
        # (`%DLQ%other` and its kin: aio-pika refuses the name itself; the matrix sends them.)
        for topic, group in (("amqp-dead-letters/other/payments", "app"),
                             ("amqp-retries/other/payments", "app"), ("payments.dlq", "app"),
                             ("payments-other-DLQ", "app"),
                             ("amqp-dead-letters/app/orders", "other")):
            assert await channel_error(app, lambda c, t=topic, g=group: c.declare_queue(
                t, arguments={"x-consumer-group": g})) == 403, topic
        # Its own group's dead letters are its own.
        ch = await app.channel()
        await ch.declare_queue("amqp-dead-letters/app/orders",
                               arguments={"x-consumer-group": "app"})
    finally:
        await app.close()


async def test_dead_letters_go_nowhere_their_queues_owner_may_not_publish(
    gw: AmqpGateway,
) -> None:
    """A dead-letter exchange routes with its queue's declarer's permissions: `other` cannot
    make its rejected messages land in `app`'s topic."""
    app = await aio_pika.connect(gw.url_for("app", "app-token"))
    other = await aio_pika.connect(gw.url_for("other", "other-token"))
    try:
        mine = await (await app.channel()).declare_queue("orders", durable=True, arguments={
            "x-consumer-group": "app"})
        ch = await other.channel()
        source = await ch.declare_queue(unique("other"), arguments={
            "x-consumer-group": "other", "x-dead-letter-exchange": "",
            "x-dead-letter-routing-key": "orders"})
        await ch.default_exchange.publish(aio_pika.Message(b"smuggled"),
                                          routing_key=source.name)
        message = await source.get(timeout=5)
        await message.reject(requeue=False)
        await asyncio.sleep(1.0)  # the router had time to (not) route it
        assert await mine.get(fail=False) is None
    finally:
        await other.close()
        await app.close()


@pytest.mark.parametrize("address", ["0.0.0.0:5672", "[::]:5672", "10.1.2.3:5672"])
def test_without_a_tokens_file_the_amqp_port_is_loopback_only(address: str) -> None:
    with pytest.raises(InvalidArgument) as raised:
        load(env={}, flags={"amqp_listen": address})
    assert raised.value.field == "amqp_listen" and "loopback" in raised.value.message
    assert load(env={}, flags={"amqp_listen": address, "allow_remote_unauthenticated": True})
    assert load(env={}, flags={"amqp_listen": address, "tokens_file": "/tokens.toml"})
    assert load(env={}, flags={"amqp_listen": "127.0.0.1:5672"}).value("amqp_listen")


def test_the_cli_refuses_a_remote_amqp_port_without_a_tokens_file(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")}
    env["PYTHONPATH"] = str(REPO)
    done = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "serve", "--listen", "127.0.0.1:0",
         "--data-dir", str(tmp_path / "data"), "--amqp-listen", "0.0.0.0:0"],
        capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 2, done.stderr
    assert "amqp_listen" in done.stderr and "loopback" in done.stderr


async def test_without_a_tokens_file_any_credentials_on_loopback(tmp_path: Path) -> None:
    async with amqp_gateway(tmp_path / "data") as gw:
        for user, password in (("guest", "guest"), ("anyone", ""), ("", "")):
            connection = await aio_pika.connect(gw.url_for(user, password))
            await connection.close()


async def test_tls_with_the_gateways_certificate_flags(tmp_path: Path) -> None:
    """With --tls-cert / --tls-key / --tls-client-ca the AMQP port speaks TLS (AMQPS) and
    requires a client certificate signed by the CA; plain AMQP gets no answer there."""
    files = make_ca(tmp_path)
    async with amqp_gateway(tmp_path / "data", tls_cert=str(files["server.crt"]),
                            tls_key=str(files["server.key"]),
                            tls_client_ca=str(files["ca.crt"])) as gw:
        url = f"amqps://guest:guest@127.0.0.1:{gw.port}/"
        context = ssl.create_default_context(cafile=str(files["ca.crt"]))
        context.load_cert_chain(str(files["client.crt"]), str(files["client.key"]))
        connection = await aio_pika.connect(url, ssl_context=context)
        try:
            channel = await connection.channel(publisher_confirms=True)
            queue = await channel.declare_queue(unique("tls"))
            await channel.default_exchange.publish(aio_pika.Message(b"secret"),
                                                   routing_key=queue.name)
            assert (await queue.get(timeout=5, no_ack=True)).body == b"secret"
        finally:
            await connection.close()
        without_cert = ssl.create_default_context(cafile=str(files["ca.crt"]))
        with pytest.raises((ConnectionError, ssl.SSLError, aiormq.exceptions.AMQPError,
                            asyncio.TimeoutError)):
            await aio_pika.connect(url, ssl_context=without_cert, timeout=5)
        reader, writer = await asyncio.open_connection("127.0.0.1", gw.port)
        writer.write(b"AMQP\x00\x00\x09\x01")
        try:
            answer = await asyncio.wait_for(reader.read(100), 5)
        except (ConnectionError, TimeoutError):
            answer = b""
        finally:
            writer.close()
        assert not answer.startswith(b"\x01\x00\x00")  # no connection.start in the clear
