"""One principal's open transactions no longer stop every other principal's transactions.

The transaction checker holds the half messages of open transactions, at most
`CheckTimes.held_bytes` (64 MiB) of them at once; past that it takes no more until some end.
One producer that opened sixteen transactions of 4 MiB and never ended them filled it, and then
no other producer's commit went through: its half message was never taken, and its
EndTransaction was refused as an unknown transaction, for as long as the open ones lasted (15
checks, a minute apart). Now, with a tokens file, a principal's transactional sends are refused
(`TOO_MANY_REQUESTS`) while its open half messages hold half of that, so the other half is
always there for everyone else.

The official RocketMQ 5 Python SDK, signing with each principal's keys.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from rocketmq import ClientConfiguration, Credentials, Producer, TransactionChecker
from rocketmq.grpc_protocol import definition_pb2

from gateway.engine.clock import SystemClock
from gateway.server.app import running_gateway
from tests.e2e.auth_clients import TWO_PRINCIPALS
from tests.e2e.test_rocketmq_frontend import _message, _receive, _simple

pytestmark = pytest.mark.slow
TOKENS = TWO_PRINCIPALS
BIG = b"x" * (4 * 1024 * 1024 - 1024)


class Undecided(TransactionChecker):  # type: ignore[misc]
    def check(self, message: Any) -> Any:
        return definition_pb2.TransactionResolution.TRANSACTION_RESOLUTION_UNSPECIFIED


async def run(fn: Any, *args: Any) -> Any:
    return await asyncio.to_thread(fn, *args)


async def test_one_principals_open_transactions_leave_room_for_the_others(
        tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.toml"
    tokens.write_text(TOKENS)
    clients: list[Any] = []
    async with running_gateway(tmp_path / "data", clock=SystemClock(),
                               tokens_file=str(tokens)) as app:
        endpoint = f"127.0.0.1:{app.grpc_port}"
        alice_config = ClientConfiguration(endpoint, Credentials("alice-ak", "alice-sk"))
        bob_config = ClientConfiguration(endpoint, Credentials("bob-ak", "bob-sk"))
        try:
            alice = Producer(alice_config, ("alice-tx",), Undecided())
            await run(alice.startup)
            clients.append(alice)
            opened, refusal = 0, ""
            for _ in range(20):  # 80 MiB asked for: more than the checker holds in all
                transaction = alice.begin_transaction()
                try:
                    await run(alice.send, _message("alice-tx", BIG), transaction)
                except Exception as error:  # the SDK's own exception type for a refusal
                    refusal = str(error)
                    break
                opened += 1
            assert refusal, "alice's transactional sends were never refused"
            assert 7 <= opened <= 8, opened  # 32 MiB: half of the checker's 64 MiB
            assert "TOO_MANY_REQUESTS" in refusal or "held_bytes" in refusal, refusal
            # bob's transaction goes through while alice's stay open.
            bob = Producer(bob_config, ("bob-tx",), Undecided())
            await run(bob.startup)
            clients.append(bob)
            consumer = await asyncio.to_thread(_simple, clients, bob_config, "bob-g", "bob-tx")
            transaction = bob.begin_transaction()
            await run(bob.send, _message("bob-tx", b"paid"), transaction)
            await run(transaction.commit)
            (got,) = await asyncio.to_thread(_receive, consumer, 1)
            assert got.body == b"paid"
        finally:
            for client in clients:
                await run(client.shutdown)
