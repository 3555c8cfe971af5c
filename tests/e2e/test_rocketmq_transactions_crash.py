"""Transactional messages across a kill -9 of `gateway serve` (the real RocketMQ 5 Python SDK).

What the gateway answered is durable: a half message whose send was answered survives, a COMMIT
that was answered is delivered, a ROLLBACK that was answered never is. A transaction still open
at the crash is asked about again after the restart and its checker decides it; a half whose
COMMIT was answered but not yet dropped at the crash is asked about again too (at least once, as
on a broker), so here the checker answers ROLLBACK after the restart: every committed message is
delivered exactly once and nothing else is.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rocketmq import ClientConfiguration, Credentials, Producer

from tests.e2e.client_gateway import GatewayProcess
from tests.e2e.sdk_cleanup import close_rocketmq_clients
from tests.e2e.test_rocketmq_frontend import _message, _name, _simple
from tests.e2e.test_rocketmq_frontend_transactions import Checker, Resolution

pytestmark = pytest.mark.slow
TIME_SCALE = 0.01
"""The first check 10 s of policy time after a send: 100 ms; one every 60 s: 600 ms."""
WAIT_S = 30.0


@pytest.fixture
def clients() -> Iterator[list[Any]]:
    started: list[Any] = []
    yield started
    close_rocketmq_clients(reversed(started))


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[GatewayProcess]:
    config = tmp_path / "gateway.toml"
    config.write_text("[rocketmq]\ntransaction_check_first_s = 10\n"
                      "transaction_check_interval_s = 60\ntransaction_check_max = 1000\n")
    process = GatewayProcess(tmp_path / "data", "--config", str(config),
                             time_scale=TIME_SCALE)
    yield process.start()
    process.close()


def _producer(clients: list[Any], gateway: GatewayProcess, topic: str, checker: Checker) -> Any:
    producer = Producer(ClientConfiguration(gateway.target, Credentials("", "")), (topic,),
                        checker)
    producer.startup()
    clients.append(producer)
    return producer


def _drain(consumer: Any, until: float) -> list[Any]:
    """Every message the consumer gets (and acks) until `until` (monotonic)."""
    got: list[Any] = []
    while time.monotonic() < until:
        try:
            batch = consumer.receive(32, 60)
        except Exception:  # the SDK's channel may still be reconnecting after the restart
            time.sleep(0.2)
            continue
        for message in batch:
            consumer.ack(message)
        got.extend(batch)
    return got


def test_answered_transactions_survive_a_kill_9_and_open_ones_are_checked_after_it(
    gateway: GatewayProcess, clients: list[Any],
) -> None:
    topic = _name("t")
    checker = Checker(Resolution.TRANSACTION_RESOLUTION_UNSPECIFIED)  # undecided until the crash
    producer = _producer(clients, gateway, topic, checker)
    committed: dict[str, bytes] = {}
    for i in range(30):
        transaction = producer.begin_transaction()
        body = f"m{i}".encode()
        receipt = producer.send(_message(topic, body), transaction)
        if i % 3 == 0:
            transaction.commit()
            committed[receipt.message_id] = body
        elif i % 3 == 1:
            transaction.rollback()
        # i % 3 == 2: left open
    checker.asked.get(timeout=WAIT_S)  # an open one is being checked: the checker runs
    gateway.kill()

    gateway.start()
    after = Checker(Resolution.ROLLBACK)
    _producer(clients, gateway, topic, after)  # the old producer's stream is gone with the SDK
    consumer = _simple(clients, ClientConfiguration(gateway.target, Credentials("", "")),
                       _name("g"), topic)
    asked: set[str] = set()
    deadline = time.monotonic() + WAIT_S
    while len(asked) < 10 and time.monotonic() < deadline:  # the 10 left open, asked again
        asked.add(after.asked.get(timeout=WAIT_S).message_id)
    assert len(asked) >= 10
    got = _drain(consumer, time.monotonic() + 3)  # checks every 600 ms: several rounds
    assert sorted((m.message_id, m.body) for m in got) == sorted(committed.items())
