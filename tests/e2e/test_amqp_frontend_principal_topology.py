"""With a tokens file, what one principal declares over the AMQP front end is bounded by its
share: `[amqp] max_topology_mb_per_principal` (by default half of `max_topology_mb`) and half of
each count limit (queues, exchanges, bindings). Before, the budgets were per connection and for
the whole listener only: one client declaring durable exchanges over one connection after
another filled the listener, and every other client's declarations were refused (406), for good,
since durable entities outlive their connection and the restart.

Real aio-pika clients; the budgets here are 2 MiB in all, so each principal's share is 1 MiB,
and an exchange of 1,000 arguments counts about 0.26 MiB.
"""

from __future__ import annotations

from pathlib import Path

import aio_pika
import aiormq
import pytest

from adapters.amqp.frontend.errors import AMQPError
from adapters.amqp.frontend.footprint import Budget
from adapters.amqp.frontend.topology import Binding, Topology
from tests.amqp_front import AmqpGateway, amqp_gateway, unique
from tests.e2e.auth_clients import TWO_PRINCIPALS

TOKENS = TWO_PRINCIPALS
HEAVY = {f"k{i:04d}": i for i in range(1000)}
"""1,000 arguments: about 0.26 MiB counted (`footprint`)."""


async def declare(gw: AmqpGateway, who: str, name: str) -> None:
    """Declare a durable heavy exchange on a connection of its own (closed after)."""
    connection = await aio_pika.connect(gw.url_for(who, f"{who}-secret"))
    async with connection:
        channel = await connection.channel()
        await channel.declare_exchange(name, aio_pika.ExchangeType.DIRECT, durable=True,
                                       arguments=HEAVY)


async def refused(gw: AmqpGateway, who: str) -> str:
    with pytest.raises(aiormq.exceptions.ChannelPreconditionFailed) as info:
        await declare(gw, who, unique(who))
    return str(info.value.args)


async def test_one_principal_fills_its_share_and_the_others_still_declare(
        tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.toml"
    tokens.write_text(TOKENS)
    async with amqp_gateway(tmp_path / "data", tokens_file=str(tokens), amqp_max_topology_mb=2,
                            amqp_max_topology_mb_per_connection=2) as gw:
        alices = [unique("alice") for _ in range(3)]
        for name in alices:  # a connection each: the share is the principal's, not the link's
            await declare(gw, "alice", name)
        said = await refused(gw, "alice")
        assert "by principal 'alice'" in said and "amqp.max_topology_mb_per_principal" in said
        for _ in range(3):
            await declare(gw, "bob", unique("bob"))
        await refused(gw, "bob")
        # Durable exchanges outlive the restart, and so do their principals' shares.
        await gw.restart()
        await refused(gw, "alice")
        # Deleting one of hers gives its room back.
        connection = await aio_pika.connect(gw.url_for("alice", "alice-secret"))
        async with connection:
            channel = await connection.channel()
            await channel.exchange_delete(alices[0])
        await declare(gw, "alice", unique("alice"))


async def test_without_a_tokens_file_there_is_no_share(tmp_path: Path) -> None:
    async with amqp_gateway(tmp_path / "data", amqp_max_topology_mb=2,
                            amqp_max_topology_mb_per_connection=2) as gw:
        connection = await aio_pika.connect(gw.url)
        async with connection:
            channel = await connection.channel()
            for _ in range(5):  # past half: the one anonymous principal has the whole budget
                await channel.declare_exchange(unique("any"), durable=True, arguments=HEAVY)


def test_each_principal_declares_at_most_its_share_of_each_kind() -> None:
    """The count shares (half of `topology.MAX_QUEUES` and the others with authentication),
    here 2 of each kind, kept across a journal replay and given back on delete."""
    budget = Budget(principal_limit=1 << 30,
                    principal_counts={"queue": 2, "exchange": 2, "binding": 2})
    topology = Topology(budget)
    records = []
    for name in ("x1", "x2"):
        records.append(topology.declare_exchange(
            name, "direct", passive=False, durable=True, auto_delete=False, internal=False,
            arguments={}, connection=1, principal="alice"))
    with pytest.raises(AMQPError) as info:
        topology.declare_exchange("x3", "direct", passive=False, durable=True,
                                  auto_delete=False, internal=False, arguments={},
                                  connection=2, principal="alice")
    assert info.value.code == 406
    assert "exchange limit of principal 'alice' (2)" in info.value.reply_text
    topology.declare_exchange("y1", "direct", passive=False, durable=True, auto_delete=False,
                              internal=False, arguments={}, connection=3, principal="bob")
    for q in ("q1", "q2"):
        _, record = topology.declare_queue(q, connection=1, durable=True, exclusive=False,
                                           auto_delete=False, arguments={}, principal="alice")
        records.append(record)
    with pytest.raises(AMQPError):
        topology.declare_queue("q3", connection=1, durable=True, exclusive=False,
                               auto_delete=False, arguments={}, principal="alice")
    for key in ("a", "b"):
        records.append(topology.bind(Binding("x1", "q1", True, key, {}), 1, "alice"))
    with pytest.raises(AMQPError):
        topology.bind(Binding("x1", "q1", True, "c", {}), 1, "alice")
    # Read back from the journal, alice's entities are hers again.
    again = Topology(Budget(principal_limit=1 << 30,
                            principal_counts={"queue": 2, "exchange": 2, "binding": 2}))
    for record in records:
        assert record is not None
        again.apply(record)
    with pytest.raises(AMQPError):
        again.declare_exchange("x3", "direct", passive=False, durable=True, auto_delete=False,
                               internal=False, arguments={}, connection=4, principal="alice")
    again.delete_exchange("x2", if_unused=False)
    again.declare_exchange("x3", "direct", passive=False, durable=True, auto_delete=False,
                           internal=False, arguments={}, connection=4, principal="alice")
