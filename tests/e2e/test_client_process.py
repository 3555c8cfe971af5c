"""`async with msg.process():` of the Python client against a running gateway: ack on success,
fail (or dead-letter) with the exception as the reason on error, nothing more when the block
settled the delivery itself."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gateway.admin_client import AdminClient
from gateway.client import GatewayClient, SettledTwice
from gateway.server.app import running_gateway

WAIT_S = 20.0


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[GatewayClient]:
    # RocketMQ's first retry waits 10 s of policy time: 100 ms here. (At 0.001 its 1 min push
    # delivery timeout was 60 ms, and a delivery a loaded machine held longer came again.)
    async with running_gateway(tmp_path / "data", time_scale=0.01) as app, \
            GatewayClient(f"127.0.0.1:{app.grpc_port}") as connected:
        yield connected


def _names() -> tuple[str, str]:
    suffix = uuid.uuid4().hex[:8]
    return f"process-{suffix}", f"g-{suffix}"


async def _dead_letter_reasons(client: GatewayClient, topic: str, group: str) -> list[str]:
    page = await AdminClient(client.channel).dead_letters(topic, group)
    return [d.reason for d in page.dead_letters]


async def test_a_block_that_ends_normally_acks(client: GatewayClient) -> None:
    topic, group = _names()
    await client.publish(topic, [b"a", b"b"])
    async with client.consume(topic, group, policy="rocketmq") as stream:
        for _ in range(2):
            msg = await stream.next(WAIT_S)
            assert msg is not None
            async with msg.process():
                pass
            assert msg.settled and msg.result is not None and msg.result.ok
        assert await stream.next(0.3) is None, "acked: nothing comes again"
    described = await client.describe(topic, group)
    assert described.inflight == 0


async def test_an_exception_fails_with_it_as_the_reason_and_propagates(
    client: GatewayClient,
) -> None:
    topic, group = _names()
    (mid,) = await client.publish(topic, [b"x"])
    async with client.consume(topic, group, policy="rocketmq",
                              options={"max_retries": "1"}) as stream:
        for attempt in (1, 2):  # a fail, a retry, a fail: retries exhausted
            msg = await stream.next(WAIT_S)
            assert msg is not None and msg.message_id == mid and msg.attempt == attempt
            with pytest.raises(ValueError, match="bad order 7"):
                async with msg.process():
                    raise ValueError("bad order 7")
            assert msg.result is not None and msg.result.ok
    assert await _dead_letter_reasons(client, topic, group) == [
        "ValueError: bad order 7; retries exhausted"]


async def test_requeue_false_dead_letters_at_once_and_reraise_false_goes_on(
    client: GatewayClient,
) -> None:
    topic, group = _names()
    await client.publish(topic, [b"poison", b"fine"])
    seen = []
    async with client.consume(topic, group, policy="rocketmq") as stream:
        while len(seen) < 2:
            msg = await stream.next(WAIT_S)
            assert msg is not None
            seen.append(msg.body)
            async with msg.process(requeue=False, reraise=False):
                if msg.body == b"poison":
                    raise KeyError("no such customer")
        assert await stream.next(0.3) is None, "neither comes again"
    assert sorted(seen) == [b"fine", b"poison"]
    assert await _dead_letter_reasons(client, topic, group) == ["KeyError: 'no such customer'"]


async def test_a_block_that_settles_itself_is_left_alone(client: GatewayClient) -> None:
    topic, group = _names()
    await client.publish(topic, [b"x"])
    async with client.consume(topic, group, policy="rocketmq") as stream:
        msg = await stream.next(WAIT_S)
        assert msg is not None
        async with msg.process():
            assert (await msg.dead_letter(reason="by hand")).ok
        assert msg.result is None
        with pytest.raises(SettledTwice):
            await msg.ack()
    assert await _dead_letter_reasons(client, topic, group) == ["by hand"]


async def test_a_long_reason_is_cut_to_what_the_gateway_keeps(client: GatewayClient) -> None:
    topic, group = _names()
    await client.publish(topic, [b"x"])
    async with client.consume(topic, group, policy="rocketmq") as stream:
        msg = await stream.next(WAIT_S)
        assert msg is not None
        async with msg.process(requeue=False, reraise=False):
            raise RuntimeError("é" * 5000)  # 2 bytes each in UTF-8
        assert msg.result is not None and msg.result.ok, msg.result
    (reason,) = await _dead_letter_reasons(client, topic, group)
    assert reason.startswith("RuntimeError: éé") and len(reason.encode()) <= 1024


async def test_process_works_on_pulled_deliveries(client: GatewayClient) -> None:
    topic, group = _names()
    await client.publish(topic, [b"x", b"y"])
    first, second = await client.receive(topic, group, policy="rocketmq-simple", wait_ms=5000,
                                         max_messages=2, invisible_ms=43_200_000)  # 43 s here
    async with first.process():
        pass
    assert first.result is not None and first.result.ok
    with pytest.raises(TypeError, match="consume stream"):
        second.ack_quietly()
    assert not second.settled, "a refused quiet ack leaves the delivery to settle"
    assert (await second.ack()).ok
