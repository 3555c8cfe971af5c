"""`Backend.properties_after`: a topic's messages after a message id, read without touching any
group (what the Pulsar front end reads to recover producers' last sequence ids after a crash)."""

from __future__ import annotations

import uuid

import pytest

from gateway.backend.base import Backend, OutMessage
from tests.contract.conftest import capabilities_of


def topic_name() -> str:
    return f"contract-after-{uuid.uuid4().hex[:12]}"


def msg(n: int) -> OutMessage:
    return OutMessage(body=b"x", properties={"n": str(n)})


async def test_properties_after_is_none_or_the_later_messages(backend: Backend) -> None:
    """Back ends that cannot read a topic apart from a group answer None; the others (every
    back end with positions) the messages after the one named, oldest first."""
    topic = topic_name()
    ids = await backend.publish(topic, [msg(n) for n in range(5)])
    got = await backend.properties_after(topic, ids[1], 10)
    if got is None:
        assert "positions" not in capabilities_of(backend)
        return
    assert [(i, dict(p)) for i, p in got] == [(ids[n], {"n": str(n)}) for n in range(2, 5)]
    assert await backend.properties_after(topic, ids[-1], 10) == []


@pytest.mark.requires("positions")
async def test_properties_after_pages_and_starts_at_the_oldest_for_an_unknown_id(
    backend: Backend,
) -> None:
    topic = topic_name()
    ids = await backend.publish(topic, [msg(n) for n in range(5)])
    first = await backend.properties_after(topic, ids[0], 2)
    assert first is not None and [i for i, _ in first] == ids[1:3]
    for unknown in ("", "0" * 32):
        got = await backend.properties_after(topic, unknown, 10)
        assert got is not None and [i for i, _ in got] == ids
    assert await backend.properties_after(topic_name(), "", 10) == []
    assert await backend.properties_after(topic, ids[2], 0) == []
