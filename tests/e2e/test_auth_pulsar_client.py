"""The official pulsar-client under access control: its own dead-lettering keeps working.

The client moves a message it gave up on into `{topic}-{sub}-DLQ` itself, with a producer of its
own (reconsumeLater does the same with `{topic}-{sub}-RETRY`). With tokens on, the principal that
may consume the topic with that subscription may produce to those destinations without a
publish pattern for them, and nobody else may.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pulsar
import pytest

from gateway.engine.clock import SystemClock
from gateway.server.app import running_gateway

T = TypeVar("T")
QUIET = pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)
TOKENS = f"""
[[principal]]
name = "billing"
token_sha256 = "{hashlib.sha256(b"billing-secret").hexdigest()}"
publish = ["payments"]
consume = ["payments"]
groups = ["billing"]

[[principal]]
name = "stranger"
token = "stranger-secret"
publish = ["*"]
consume = ["*"]
groups = ["stranger"]
"""


async def run(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    return await asyncio.to_thread(fn, *args, **kwargs)


async def test_client_dead_lettering_works_with_tokens(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.toml"
    tokens.write_text(TOKENS)
    async with running_gateway(tmp_path / "data", clock=SystemClock(), tokens_file=str(tokens),
                               pulsar_listen="127.0.0.1:0") as app:
        url = f"pulsar://127.0.0.1:{app.front_ends['pulsar'].port}"
        client = pulsar.Client(url, authentication=pulsar.AuthenticationToken("billing-secret"),
                               operation_timeout_seconds=5, logger=QUIET)
        stranger = pulsar.Client(url, operation_timeout_seconds=5, logger=QUIET,
                                 authentication=pulsar.AuthenticationToken("stranger-secret"))
        try:
            consumer = await run(
                client.subscribe, "payments", "billing",
                consumer_type=pulsar.ConsumerType.Shared,
                negative_ack_redelivery_delay_ms=100,
                dead_letter_policy=pulsar.ConsumerDeadLetterPolicy(max_redeliver_count=1),
            )
            producer = await run(client.create_producer, "payments")
            await run(producer.send, b"poison")
            for _ in range(2):
                msg = await run(consumer.receive, 5000)
                consumer.negative_acknowledge(msg)
            dlq = await run(client.subscribe, "payments-billing-DLQ", "billing",
                            initial_position=pulsar.InitialPosition.Earliest)
            dead = await run(dlq.receive, 5000)
            assert dead.data() == b"poison"
            await run(dlq.acknowledge, dead)
            # A plain `*` reaches neither someone else's dead letters nor their retry topic.
            with pytest.raises(pulsar.AuthorizationError):
                await run(stranger.subscribe, "payments-billing-DLQ", "stranger")
            with pytest.raises(pulsar.AuthorizationError):
                await run(stranger.create_producer, "payments-billing-RETRY")
        finally:
            await run(client.close)
            await run(stranger.close)
