"""Three `gateway serve --backend pulsar` replicas on one Pulsar-protocol server serve one group
together, and one of them is killed with SIGKILL mid-run (README "Several gateways on one
broker").

The server is a fourth gateway on its embedded store serving Pulsar's binary protocol
(`--pulsar-listen`), which the replicas reach with pulsar-client as they would a Pulsar broker;
a real cluster is used instead when `PULSAR_SERVICE_URL` is set. gRPC API consumers on every
replica join one group under policy `pulsar` (`reconsumeLater` onto `<topic>-<group>-RETRY`,
3 retries here, then `<topic>-<group>-DLQ`; time runs 50 times faster). Publishers write through
every replica while the group consumes; one message in ten fails every time.

Replica 0 is killed once about a third of the good messages are acked, while its consumer holds
a delivery it has not settled, with its earlier settlements answered and half a second after the
last of them. That keeps the kill out of two windows the Pulsar back end cannot close, which the
README states: pulsar-client sends acks in groups every 100 ms (an ack answered just before the
kill may not have reached the broker), and a retry is a copy published, then the original acked
(no Pulsar transactions; as `reconsumeLater` does). Everything else is checked as for RabbitMQ by
`replicas_ledger.Ledger`; the dead letters are read from the server with pulsar-client.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pulsar
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from amqp_node import free_port
from client_gateway import GatewayProcess
from replicas_ledger import Ledger, Letter
from replicas_parts import check, run_group, until_stopped

from adapters.pulsar.backend_codec import decode, pulsar_topic
from adapters.pulsar.naming import DEFAULT
from gateway.client import GatewayClient
from gateway.core.properties import DEAD_REASON

pytestmark = pytest.mark.slow

SCALE = 0.02
"""Retry waits (1 s, 5 s, 10 s: the first delay levels) are 20, 100 and 200 ms here."""
REPLICAS = 3
MESSAGES = 900
BAD_EVERY = 10
MAX_RETRIES = 3
DEADLINE_S = 180.0
REASON = "consumer failure; retries exhausted"
OPTIONS = {"max_retries": str(MAX_RETRIES)}


@contextlib.contextmanager
def servers(tmp: Path) -> Iterator[tuple[str, list[GatewayProcess]]]:
    """The Pulsar-protocol server's URL and the replicas on it (started)."""
    upstream: GatewayProcess | None = None
    url = os.environ.get("PULSAR_SERVICE_URL", "")
    if not url:
        port = free_port()
        upstream = GatewayProcess(tmp / "server", "--pulsar-listen", f"127.0.0.1:{port}",
                                  time_scale=1.0)
        url = f"pulsar://127.0.0.1:{port}"
    procs = [GatewayProcess(tmp / f"replica{i}", "--backend", "pulsar",
                            "--pulsar-service-url", url, time_scale=SCALE)
             for i in range(REPLICAS)]
    try:
        if upstream is not None:
            upstream.start()
        for proc in procs:
            proc.start()
        yield url, procs
    finally:
        for proc in procs:
            proc.close()
        if upstream is not None:
            upstream.close()


async def grpc_consumer(ledger: Ledger, target: str, replica: int, name: str, topic: str,
                        stop: asyncio.Event, kill: Callable[[], bool] | None = None) -> None:
    """A gRPC API consumer: acks good messages, fails bad ones, each settlement awaited. With
    `kill`: once `kill()` says the time has come, the next delivery is recorded and left
    unsettled, and the replica is killed half a second later (`kill` is called again)."""
    try:
        async with (GatewayClient(target) as client,
                    client.consume(topic, topic, policy="pulsar", options=OPTIONS,
                                   prefetch=4) as stream):
            while not stop.is_set():
                message = await stream.next(0.5)
                if message is None:
                    continue
                body = message.body.decode()
                seen = ledger.delivered(body, name, replica, message.attempt, message.retries)
                if kill is not None and kill():
                    await asyncio.sleep(0.5)  # pulsar-client's grouped acks go out meanwhile
                    kill()
                    return
                await asyncio.sleep(0.001)
                good = Ledger.good(body)
                seen.outcome = "ack" if good else "fail"
                seen.settle_at = time.monotonic()
                result = await (message.ack() if good else message.fail())
                seen.confirmed = result.ok
                if not result.ok and replica != ledger.killed:
                    ledger.errors.append(f"{name}: settle of {body} refused: {result}")
    except Exception as exc:  # the killed replica's consumer ends here
        if replica != ledger.killed:
            ledger.errors.append(f"{name}: {exc!r}")


@contextlib.asynccontextmanager
async def dead_letter_reader(ledger: Ledger, url: str, topic: str) -> AsyncIterator[None]:
    """Read the dead-letter topic from the server with pulsar-client: every dead letter the
    replicas wrote (subscribed from the earliest message before anything is sent)."""
    client = pulsar.Client(url, operation_timeout_seconds=10)
    consumer = await asyncio.to_thread(
        client.subscribe, pulsar_topic(DEFAULT.dead_letter_topic(topic, topic)), "audit",
        consumer_type=pulsar.ConsumerType.Shared,
        initial_position=pulsar.InitialPosition.Earliest)
    stop = asyncio.Event()

    def read() -> None:
        while not stop.is_set():
            try:
                message: Any = consumer.receive(timeout_millis=200)
            except pulsar.Timeout:
                continue
            # As the back end reads its own copies back (a reserved property is carried
            # renamed).
            envelope = decode(message.properties(), "", "", 0)
            reason = envelope.properties.get(DEAD_REASON, "")
            ledger.letters.append(Letter(message.data().decode(), reason))
            consumer.acknowledge(message)

    reader = asyncio.ensure_future(asyncio.to_thread(read))
    try:
        yield
    finally:
        stop.set()
        await reader
        await asyncio.to_thread(client.close)


async def test_three_replicas_one_killed_serve_one_group_exactly(tmp_path: Path) -> None:
    topic = f"replicas-{uuid.uuid4().hex[:10]}"
    ledger = Ledger(max_retries=MAX_RETRIES, reason=REASON, killed=0)
    stop = asyncio.Event()
    with servers(tmp_path) as (url, procs):
        async with dead_letter_reader(ledger, url, topic):
            good_total = MESSAGES - MESSAGES // BAD_EVERY
            held: list[bool] = []

            def kill() -> bool:
                """First call once a third of the good messages are acked: the consumer holds
                its delivery; the second kills replica 0."""
                if not held:
                    if len(ledger.acked()) < good_total // 3:
                        return False
                    held.append(True)
                    return True
                ledger.kill_at = time.monotonic()
                procs[0].kill()
                return True

            consumers = [
                asyncio.ensure_future(grpc_consumer(
                    ledger, procs[r].target, r, f"grpc-{r}.{k}", topic, stop,
                    kill if r == 0 else None))
                for r in range(REPLICAS) for k in range(1 if r == 0 else 2)
            ]
            finished = await run_group(
                ledger, procs, topic, MESSAGES, BAD_EVERY, consumers,
                lambda: until_stopped(stop, lambda: grpc_consumer(
                    ledger, procs[0].target, 0, "grpc-0.rejoined", topic, stop)),
                linger_s=2.0, deadline_s=DEADLINE_S)  # late duplicates would show meanwhile
            stop.set()
            await asyncio.gather(*consumers)
    check(ledger, finished, tmp_path)
    # The delivery replica 0's consumer held when it died came again through another one.
    lost = [s for s in ledger.seen if s.replica == 0 and not s.settle_at and s.at <= ledger.kill_at]
    assert lost, "replica 0 held no delivery when it was killed"
    runs = ledger.by_body()
    assert all(runs[s.body][-1] is not s for s in lost)
    assert not list(itertools.chain.from_iterable(
        (s for s in r if s.replica == 0 and ledger.kill_at < s.at < ledger.restart_at)
        for r in runs.values()))
