"""Broker outage on a private RabbitMQ node: publish refuses while down, nothing confirmed lost."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from amqp_node import AmqpNode, collect

from adapters.amqp.backend import RabbitMQBackend
from gateway.backend.base import OutMessage
from gateway.errors import Unavailable

pytestmark = pytest.mark.slow

TOPIC = "outage.orders"
GROUP = "g1"


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AmqpNode]:
    private = AmqpNode(tmp_path_factory.mktemp("rabbit"))
    private.start()
    try:
        yield private
    finally:
        private.stop()


async def until(condition: Callable[[], bool], timeout_s: float) -> bool:
    """Poll an outside condition (broker state) until it holds or `timeout_s` passed."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not condition():
        if loop.time() > deadline:
            return False
        await asyncio.sleep(0.05)
    return True


async def test_outage_refuses_publish_and_recovers_without_loss(node: AmqpNode) -> None:
    backend = RabbitMQBackend(node.url, confirm_timeout_s=5)
    await backend.open()
    try:
        before = await backend.publish(
            TOPIC, [OutMessage(body=f"before-{i}".encode()) for i in range(20)]
        )
        leased = await collect(backend, TOPIC, GROUP, 5)
        assert len(leased) == 5  # leased, never acked: must come back after the outage

        await asyncio.to_thread(node.stop)
        assert await until(lambda: not backend.healthy(), 15)
        with pytest.raises(Unavailable):
            await backend.publish(TOPIC, [OutMessage(body=b"refused")])
        assert not backend.healthy()

        await asyncio.to_thread(node.start)
        assert await until(backend.healthy, 30)
        after = await backend.publish(
            TOPIC, [OutMessage(body=f"after-{i}".encode()) for i in range(10)]
        )
        got = await collect(backend, TOPIC, GROUP, 30, timeout_s=30)
        bodies = sorted(m.body for m in got)
        assert {m.message_id for m in got} == set(before) | set(after)
        assert b"refused" not in bodies
        assert len(got) == 30
        again = {m.message_id: m for m in got}
        assert all(again[m.message_id].attempt >= 1 for m in leased)
        await backend.ack([m.lease for m in got])
        assert (await backend.stats(TOPIC, GROUP, 0)).ready == 0
    finally:
        await backend.close()


async def test_unconfirmed_publish_times_out_as_unavailable(node: AmqpNode) -> None:
    backend = RabbitMQBackend(node.url, confirm_timeout_s=2)
    await backend.open()
    topic = "outage.blocked"
    try:
        await backend.publish(topic, [OutMessage(body=b"warm")])  # queue declared
        alarm = await asyncio.to_thread(node.ctl, "set_vm_memory_high_watermark", "0")
        assert alarm.returncode == 0, alarm.stderr
        try:
            with pytest.raises(Unavailable):
                await backend.publish(topic, [OutMessage(body=b"blocked")])
        finally:
            cleared = await asyncio.to_thread(node.ctl, "set_vm_memory_high_watermark", "0.4")
            assert cleared.returncode == 0, cleared.stderr
        assert await until(backend.healthy, 30)
        [mid] = await backend.publish(topic, [OutMessage(body=b"after")])
        got = await collect(backend, topic, GROUP, 3, timeout_s=15)
        # the timed-out message may still arrive (at least once), the confirmed ones must
        assert mid in {m.message_id for m in got}
        assert b"warm" in {m.body for m in got}
        await backend.ack([m.lease for m in got])
    finally:
        await backend.close()
