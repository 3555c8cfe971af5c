"""A retry copy and the ack of the delivery it replaces are one AMQP transaction on the RabbitMQ
back end: a gateway killed (SIGKILL) just before the commit leaves neither, one killed just after
leaves both; never the copy *and* the original, which would make two retries and two dead
letters when several gateways share the broker (README "Several gateways on one broker").

The kill is real: a child process leases a message, settles it with a copy into another queue,
and kills itself inside `tx.commit` (before sending it, or once it is answered).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from amqp_node import URL, collect, delete_queues, plain_connection, ready_in, unique

from adapters.amqp.backend import RabbitMQBackend
from gateway.backend.base import OutMessage

pytestmark = pytest.mark.slow

CHILD = textwrap.dedent("""
    import asyncio, os, signal, sys
    import aiormq
    from adapters.amqp.backend import RabbitMQBackend
    from gateway.backend.base import OutMessage

    url, source, target, when = sys.argv[1:5]
    commit = aiormq.Channel.tx_commit

    async def dying_commit(self, timeout=None):
        if when == "after":
            await commit(self, timeout=timeout)
        os.kill(os.getpid(), signal.SIGKILL)

    async def main():
        backend = RabbitMQBackend(url)
        await backend.open()
        await backend.publish(source, [OutMessage(b"payload", message_id="m-1")])
        got = []
        while not got:
            got = await backend.fetch(source, "g", 1, 0)
            if not got:
                await backend.wait(source, "g", 1.0)
        copy = OutMessage(b"payload", message_id="m-1", attempt=1, retries=1)
        aiormq.Channel.tx_commit = dying_commit
        await backend.carry_out({target: [copy]}, [got[0].lease], [])
        print("survived", flush=True)

    asyncio.run(main())
""")


@pytest.fixture
async def queues() -> AsyncIterator[tuple[str, str]]:
    source, target = unique("settle.src"), unique("settle.retry")
    yield source, target
    async with plain_connection() as connection:
        await delete_queues(connection, source, target)


@pytest.mark.parametrize(("when", "left_in_source", "in_target"),
                         [("before", 1, 0), ("after", 0, 1)])
async def test_a_kill_around_the_commit_keeps_the_message_exactly_once(
    queues: tuple[str, str], when: str, left_in_source: int, in_target: int
) -> None:
    source, target = queues
    child = subprocess.run(
        [sys.executable, "-c", CHILD, URL, source, target, when],
        capture_output=True, text=True, timeout=60,
    )
    assert child.returncode == -signal.SIGKILL, child.stderr[-2000:]
    async with plain_connection() as connection:
        assert await ready_in(connection, source) == left_in_source
        assert await ready_in(connection, target) == in_target


async def test_a_copy_the_broker_returns_is_published_again(queues: tuple[str, str]) -> None:
    """The copy's queue was deleted behind the back end's back: RabbitMQ returns the copy in the
    transaction (the ack of its original is committed), and the back end declares the queue
    again and publishes the copy, so the message is not lost."""
    source, target = queues
    backend = RabbitMQBackend(URL)
    await backend.open()
    try:
        for round_ in range(2):
            await backend.publish(source, [OutMessage(b"payload", message_id=f"m-{round_}")])
            [got] = await collect(backend, source, "g", 1)
            copy = OutMessage(b"payload", message_id=f"m-{round_}", attempt=1, retries=1)
            await backend.carry_out({target: [copy]}, [got.lease], [])
            if round_ == 0:
                async with plain_connection() as connection:
                    assert await ready_in(connection, target) == 1
                    await delete_queues(connection, target)
        async with plain_connection() as connection:
            assert await ready_in(connection, target) == 1
            assert await ready_in(connection, source) == 0
    finally:
        await backend.close()
