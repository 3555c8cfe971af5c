"""Three `gateway serve --backend rabbitmq` replicas on the one RabbitMQ serve one group together,
and one of them is killed with SIGKILL mid-run (README "Several gateways on one broker").

Consumers are spread over the replicas: gRPC API consumers on each, and a native aio-pika
consumer on replica 1's AMQP front end, all in one group under one policy (RabbitMQ's: a retry
every 10 s, 16 retries, then the queue's dead-letter exchange; time runs 100 times faster).
Publishers write through every replica while the group consumes. One message in ten fails every
time; replica 0 is killed (SIGKILL) once about a third of the good messages are acked, by one
of its consumers 2 to 40 ms after that consumer sent a failure, so that the kill falls while the
replica carries a retry out (publishes the retry copy and acks the original); then it is started
again on the same port and data directory with a new consumer. `replicas_ledger.Ledger` counts every
delivery by message and checks the rules; the dead letters are read from RabbitMQ itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import aio_pika
import pytest
from aio_pika.abc import AbstractIncomingMessage, AbstractRobustConnection

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from amqp_node import URL, delete_exchanges, delete_queues, free_port, plain_connection
from client_gateway import GatewayProcess
from replicas_ledger import Ledger, Letter
from replicas_parts import check, run_group, until_stopped

from adapters.amqp.codec import decode
from adapters.amqp.delays import DEFAULT_TEMPLATE, delay_queue
from adapters.amqp.naming import AMQP_FRONT_END
from adapters.amqp.queues import queue_name
from gateway.client import GatewayClient

pytestmark = pytest.mark.slow

SCALE = 0.05
"""RabbitMQ's retry interval (10 s) is 0.5 s here, its ack timeout (1 min) 3 s."""
INTERVAL_S = 10
REPLICAS = 3
MESSAGES = 1200
BAD_EVERY = 10
MAX_RETRIES = 16
DEADLINE_S = 180.0


@dataclass(frozen=True)
class Group:
    """The one group every consumer joins, and the names around it."""

    topic: str
    dlx: str
    dead: str

    @property
    def options(self) -> dict[str, str]:
        """What an AMQP queue declared with `arguments` gives its consumers (`spec_for`)."""
        return {"x_retry_interval_s": str(INTERVAL_S), "x_dead_letter_exchange": self.dlx}

    @property
    def arguments(self) -> dict[str, object]:
        return {"x-retry-interval": INTERVAL_S, "x-dead-letter-exchange": self.dlx}

    @property
    def dead_letter_topic(self) -> str:
        """Where the engine puts the group's dead letters, before the AMQP front end routes
        them through the dead-letter exchange."""
        return AMQP_FRONT_END.dead_letter_topic(self.topic, self.topic)


@contextlib.contextmanager
def replicas(tmp: Path) -> Iterator[list[GatewayProcess]]:
    procs = [GatewayProcess(tmp / f"replica{i}", "--backend", "rabbitmq", "--rabbitmq-url", URL,
                            "--amqp-listen", f"127.0.0.1:{free_port()}", time_scale=SCALE)
             for i in range(REPLICAS)]
    try:
        for proc in procs:
            proc.start()
        yield procs
    finally:
        for proc in procs:
            proc.close()


def amqp_url(proc: GatewayProcess) -> str:
    port = proc.args[proc.args.index("--amqp-listen") + 1].rsplit(":", 1)[1]
    return f"amqp://guest:guest@127.0.0.1:{port}/"


async def grpc_consumer(ledger: Ledger, target: str, replica: int, name: str, group: Group,
                        stop: asyncio.Event, kill: Callable[[], bool] | None = None) -> None:
    """A gRPC API consumer: acks good messages, fails bad ones, each settlement awaited.
    `kill()`, when given, is asked shortly after each failure is sent, before its answer: True
    when it killed the replica then (aimed at the settle of a retry: copy and ack)."""
    try:
        async with (GatewayClient(target) as client,
                    client.consume(group.topic, group.topic, policy="rabbitmq",
                                   options=group.options, naming="amqp", prefetch=4) as stream):
            while not stop.is_set():
                message = await stream.next(0.5)
                if message is None:
                    continue
                body = message.body.decode()
                seen = ledger.delivered(body, name, replica, message.attempt, message.retries)
                await asyncio.sleep(0.001)
                good = Ledger.good(body)
                seen.outcome = "ack" if good else "fail"
                seen.settle_at = time.monotonic()
                if not good and kill is not None:
                    pending = asyncio.ensure_future(message.fail())
                    # While the gateway carries the failure out (copy, then ack); where in it
                    # the kill falls varies from run to run.
                    await asyncio.sleep(random.uniform(0.002, 0.04))
                    if kill():
                        return
                    result = await pending
                else:
                    result = await (message.ack() if good else message.fail())
                seen.confirmed = result.ok
                if not result.ok and replica != ledger.killed:
                    ledger.errors.append(f"{name}: settle of {body} refused: {result}")
    except Exception as exc:  # the killed replica's consumers end here
        if replica != ledger.killed:
            ledger.errors.append(f"{name}: {exc!r}")


@contextlib.asynccontextmanager
async def amqp_consumer(ledger: Ledger, url: str, replica: int,
                        group: Group) -> AsyncIterator[None]:
    """A native aio-pika consumer on a replica's AMQP front end, which also declares the queue's
    dead-letter exchange and the queue bound to it there (that replica routes dead letters)."""
    connection = await aio_pika.connect_robust(url)
    channel = await connection.channel()
    await channel.set_qos(prefetch_count=8)
    exchange = await channel.declare_exchange(group.dlx, aio_pika.ExchangeType.DIRECT,
                                              durable=True)
    dead = await channel.declare_queue(group.dead, durable=True)
    await dead.bind(exchange, routing_key=group.topic)
    queue = await channel.declare_queue(group.topic, durable=True, arguments=group.arguments)

    async def on_message(message: AbstractIncomingMessage) -> None:
        body = message.body.decode()
        retries = int((message.headers or {}).get("x-delivery-count", 0))
        seen = ledger.delivered(body, "amqp", replica, None, retries)
        await asyncio.sleep(0.001)
        good = Ledger.good(body)
        seen.outcome = "ack" if good else "fail"
        seen.settle_at = time.monotonic()
        seen.confirmed = True  # basic.ack/nack have no answer; this replica is never killed
        await (message.ack() if good else message.nack(requeue=True))

    tag = await queue.consume(on_message)
    try:
        yield
    finally:
        with contextlib.suppress(Exception):
            await queue.cancel(tag)
        await connection.close()


@contextlib.asynccontextmanager
async def dead_letter_reader(ledger: Ledger, connection: AbstractRobustConnection,
                             queue: str) -> AsyncIterator[None]:
    """Read the dead-letter queue from RabbitMQ itself: every dead letter the gateways routed."""
    channel = await connection.channel()
    declared = await channel.declare_queue(queue, durable=True)

    async def on_message(message: AbstractIncomingMessage) -> None:
        # As the gateway reads its own copies back (a reserved header is carried renamed).
        envelope = decode(dict(message.headers or {}), message.message_id, message.timestamp, 0)
        reason = envelope.properties.get("x-first-death-reason", "")
        ledger.letters.append(Letter(message.body.decode(), reason))
        await message.ack()

    tag = await declared.consume(on_message)
    try:
        yield
    finally:
        await declared.cancel(tag)
        await channel.close()


async def ready(connection: AbstractRobustConnection, queue: str) -> int:
    """Messages ready in `queue` (0 when it does not exist)."""
    channel = await connection.channel()
    try:
        return int((await channel.declare_queue(queue, passive=True))
                   .declaration_result.message_count or 0)
    except aio_pika.exceptions.ChannelNotFoundEntity:
        return 0
    finally:
        if not channel.is_closed:
            await channel.close()


@pytest.fixture
async def plain() -> AsyncIterator[AbstractRobustConnection]:
    async with plain_connection() as connection:
        yield connection


async def test_three_replicas_one_killed_serve_one_group_exactly(
    tmp_path: Path, plain: AbstractRobustConnection
) -> None:
    tag = uuid.uuid4().hex[:10]
    group = Group(f"replicas.{tag}", f"replicas.{tag}.dlx", f"replicas.{tag}.dead")
    delays = [delay_queue(DEFAULT_TEMPLATE, queue_name(group.topic),
                          int(INTERVAL_S * 1000 * SCALE)).name]
    ledger = Ledger(max_retries=MAX_RETRIES, reason="delivery_limit", killed=0)
    stop = asyncio.Event()
    try:
        with replicas(tmp_path) as procs:
            async with (dead_letter_reader(ledger, plain, queue_name(group.dead)),
                        amqp_consumer(ledger, amqp_url(procs[1]), 1, group)):
                good_total = MESSAGES - MESSAGES // BAD_EVERY

                def kill() -> bool:
                    """Kill replica 0 once a third of the good messages are acked."""
                    if ledger.kill_at is not None or len(ledger.acked()) < good_total // 3:
                        return False
                    ledger.kill_at = time.monotonic()
                    procs[0].kill()
                    return True

                consumers = [
                    asyncio.ensure_future(grpc_consumer(
                        ledger, procs[r].target, r, f"grpc-{r}.{k}", group, stop,
                        kill if (r, k) == (0, 0) else None))
                    for r in range(REPLICAS) for k in range(2 if r != 1 else 1)
                ]
                finished = await run_group(
                    ledger, procs, group.topic, MESSAGES, BAD_EVERY, consumers,
                    lambda: until_stopped(stop, lambda: grpc_consumer(
                        ledger, procs[0].target, 0, "grpc-0.rejoined", group, stop)),
                    # Late duplicates would show up meanwhile; then nothing may be left.
                    linger_s=2 * INTERVAL_S * SCALE + 1.0, deadline_s=DEADLINE_S)
                stop.set()
                await asyncio.gather(*consumers)
            left = {q: await ready(plain, q) for q in
                    (queue_name(group.topic), queue_name(group.dead_letter_topic), *delays)}
        check(ledger, finished, tmp_path)
        assert not any(left.values()), left
        assert any(s.consumer == "amqp" for s in ledger.seen)
    finally:
        stop.set()
        await delete_queues(plain, queue_name(group.topic), queue_name(group.dead),
                            queue_name(group.dead_letter_topic))
        await delete_exchanges(plain, queue_name(group.topic) + ".dlx")
