"""The product-neutral limits every front end shares, and errors that echo values cut short."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest

from adapters import builtin_registry
from gateway.backend import OutMessage
from gateway.engine.clock import ManualClock
from gateway.engine.config import EngineConfig
from gateway.engine.engine import Engine
from gateway.errors import InvalidArgument, MessageTooLarge, StaleReceipt
from gateway.limits import (
    MAX_BATCH,
    MAX_DELAY_MS,
    MAX_NAME_BYTES,
    check_name,
    message_size,
)

NOW = 1_700_000_000_000


class _Recorder:
    """Just enough of a back end for `Engine.publish`: remembers what was published."""

    def __init__(self) -> None:
        self.published: list[tuple[str, Sequence[OutMessage]]] = []

    async def topics(self) -> list[str]:
        return []

    async def publish(self, topic: str, messages: Sequence[OutMessage]) -> list[str]:
        self.published.append((topic, messages))
        return [str(i) for i in range(len(messages))]


def engine(limit: int = 1024) -> tuple[Engine, _Recorder]:
    backend = _Recorder()
    config = EngineConfig(max_message_bytes=limit)
    backend_any: Any = backend
    return Engine(backend_any, builtin_registry(), ManualClock(NOW), config), backend


def test_the_shared_numbers() -> None:
    assert MAX_DELAY_MS == 400 * 86_400_000
    assert MAX_BATCH == 10_000
    assert MAX_NAME_BYTES == 255


def test_message_size_counts_every_part_in_utf8_bytes() -> None:
    assert message_size(OutMessage(b"abc")) == 3
    assert message_size(OutMessage(b"abc", {"k": "vv"}, "key", "t")) == 3 + 3 + 3 + 1
    assert message_size(OutMessage(b"", {}, "\u00e9", "\u20ac")) == 2 + 3


@pytest.mark.parametrize(
    "message",
    [
        OutMessage(b"x", key="k" * 1024),
        OutMessage(b"x", tag="t" * 1024),
        OutMessage(b"x" * 1000, {"p": "v" * 30}),
        OutMessage(b"x", {"k" * 600: "v" * 600}),
    ],
)
def test_engine_publish_counts_keys_tags_and_properties(message: OutMessage) -> None:
    eng, backend = engine()
    with pytest.raises(MessageTooLarge):
        asyncio.run(eng.publish("t", [message]))
    assert backend.published == []


@pytest.mark.parametrize(
    ("message", "field"),
    [
        (OutMessage(b"x", deliver_at_ms=-1), "messages[0].deliver_at_ms"),
        (OutMessage(b"x", deliver_at_ms=NOW + MAX_DELAY_MS + 1), "messages[0].deliver_at_ms"),
        (OutMessage(b"x", deliver_at_ms=2**62), "messages[0].deliver_at_ms"),
        (OutMessage(b"x", {"": "v"}), "messages[0].properties"),
        (OutMessage(b"x", {"x-gateway-origin-topic": "victim"}), "messages[0].properties"),
        (OutMessage(b"x", {"x-gateway-retries": "16"}), "messages[0].properties"),
    ],
)
def test_engine_publish_refuses_out_of_range_values(message: OutMessage, field: str) -> None:
    eng, backend = engine()
    with pytest.raises(InvalidArgument) as info:
        asyncio.run(eng.publish("t", [message]))
    assert info.value.field == field
    assert backend.published == []


def test_engine_publish_batch_limit() -> None:
    eng, backend = engine()
    with pytest.raises(InvalidArgument) as info:
        asyncio.run(eng.publish("t", [OutMessage(b"")] * (MAX_BATCH + 1)))
    assert info.value.field == "messages" and str(MAX_BATCH) in info.value.message
    assert backend.published == []


def test_engine_publish_accepts_the_edges() -> None:
    eng, _ = engine()
    ok = [OutMessage(b"x", deliver_at_ms=NOW + MAX_DELAY_MS), OutMessage(b"x", deliver_at_ms=1),
          OutMessage(b"x" * 1000, {"k": "v" * 10}, "key", "tag")]
    assert len(asyncio.run(eng.publish("t", ok))) == 3


@pytest.mark.parametrize(
    "name", ["", " ", "a" * (MAX_NAME_BYTES + 1), "\u00e9" * 128, "a\nb", "a\x00b"]
)
def test_bad_names(name: str) -> None:
    with pytest.raises(InvalidArgument) as info:
        check_name("topic", name)
    assert info.value.field == "topic"
    assert len(info.value.message) < 400


def test_good_names() -> None:
    check_name("topic", "a" * MAX_NAME_BYTES)
    check_name("group", "%DLQ%billing")
    check_name("topic", "\u00e9" * 127)


def test_errors_cut_echoed_values_short() -> None:
    huge = "x" * 100_000
    assert len(InvalidArgument("topic", huge, "a name").message) < 400
    assert len(InvalidArgument("body", huge.encode(), "bytes").message) < 400
    assert len(StaleReceipt(huge).message) < 400
    error = InvalidArgument("topic", huge, "a name")
    assert error.value == huge  # the value itself is kept for callers; only the text is cut
    assert "topic=" in error.message and "a name" in error.message
    assert "100000" in error.message  # says how long the value was


def test_short_values_are_echoed_whole() -> None:
    assert InvalidArgument("delay_ms", 5, "0..10").message == "delay_ms=5 is not allowed: 0..10"
