"""A publisher of another protocol may set `amqp.typed-headers` to anything. An AMQP consumer
(aio-pika) still gets every header: a typed entry the AMQP encoder cannot write, nesting deeper
than the front end takes, or with invalid base64 goes out as its text copy (a string); the
other typed entries keep their types."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aio_pika
import pytest

from adapters.amqp.frontend import messages
from gateway.backend.base import OutMessage
from gateway.engine.api import Delivery
from tests.amqp_front import AmqpGateway, amqp_gateway, unique


def nested(depth: int) -> Any:
    return {"table": {"v": nested(depth - 1)}} if depth else None


FORGED: dict[str, Any] = {
    "big-int": {"int": 2**70},
    "far-time": {"time": 10**20},
    "early-time": {"time": -10**15},
    "nan": {"decimal": "NaN"},
    "huge-decimal": {"decimal": "1E+300"},
    "long-name": {"table": {"k" * 300: None}},
    "bad-bytes": {"bytes": "!!!"},
    "bad-longstr": {"longstr": "@@"},
    "deep": nested(40),
    "not-a-bool": {"bool": "false"},
    "double-text": {"double": "abc"},
    "k" * 300: {"int": 1},
}
GOOD = {"count": {"int": 7}, "flag": {"bool": False}, "raw": {"bytes": "AAE="},
        "inner": {"table": {"a": {"int": 1}}}}


def forged_properties() -> dict[str, str]:
    props = {name: f"text of {name[:20]}" for name in [*FORGED, *GOOD] if len(name) < 256}
    props[messages.TYPED] = json.dumps({**FORGED, **GOOD})
    return props


def test_each_typed_entry_that_cannot_go_out_typed_goes_as_text() -> None:
    props = forged_properties()
    delivery = Delivery(receipt="r", message_id="m", topic="t", original_topic="t", body=b"x",
                        properties=props, key="", tag="", attempt=1, retries=0,
                        deadline_ms=0, publish_ms=0, deliver_at_ms=0)
    headers = messages.delivery_properties(delivery)["headers"]
    assert headers["count"] == 7 and headers["flag"] is False
    assert headers["raw"] == b"\x00\x01" and headers["inner"] == {"a": 1}
    for name in FORGED:
        if len(name) < 256:
            assert headers[name] == f"text of {name[:20]}", name


def test_a_typed_headers_property_that_is_not_json_leaves_the_text_copies() -> None:
    delivery = Delivery(receipt="r", message_id="m", topic="t", original_topic="t", body=b"x",
                        properties={"n": "5", messages.TYPED: "{not json"}, key="", tag="",
                        attempt=1, retries=0, deadline_ms=0, publish_ms=0, deliver_at_ms=0)
    assert messages.delivery_properties(delivery)["headers"] == {"n": "5"}


@pytest.fixture
async def gw(tmp_path: Path) -> AsyncIterator[AmqpGateway]:
    async with amqp_gateway(tmp_path / "data") as gateway:
        yield gateway


async def test_an_amqp_consumer_gets_every_header_of_a_forged_message(gw: AmqpGateway) -> None:
    queue_name = unique("forged")
    connection = await aio_pika.connect_robust(gw.url)
    try:
        ch = await connection.channel()
        queue = await ch.declare_queue(queue_name, durable=True)
        assert gw.app is not None
        await gw.app.engine.publish(queue_name, [OutMessage(b"body", forged_properties())])
        message = None
        for _ in range(100):
            message = await queue.get(fail=False, no_ack=True)
            if message is not None:
                break
            await asyncio.sleep(0.05)
        assert message is not None and message.body == b"body"
        headers = message.headers
        assert headers["count"] == 7 and headers["inner"] == {"a": 1}
        assert headers["big-int"] == b"text of big-int" or headers["big-int"] == "text of big-int"
        assert len(headers) >= len(GOOD) + len(FORGED) - 1
    finally:
        await connection.close()
