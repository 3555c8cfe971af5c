"""`catch_up`: a get that is about to answer "nothing" calls it first, so that a message whose
publish returned (durable, confirmed) is found by the `fetch` after it, at once, without waiting:
on a back end that fetches from what a broker consumer buffered, too."""

from __future__ import annotations

import pytest

from gateway.backend.base import Backend
from tests.contract.test_backend_contract import bodies, msg, names, now_ms

ROUNDS = 50


async def fetch_now(backend: Backend, topic: str, group: str) -> list[bytes]:
    """What a get answers: a fetch, and if it found nothing, `catch_up` and a fetch again."""
    got = await backend.fetch(topic, group, 10, now_ms())
    if not got and await backend.catch_up(topic, group):
        got = await backend.fetch(topic, group, 10, now_ms())
    await backend.ack([m.lease for m in got])
    return bodies(got)


@pytest.mark.requires("catch-up")
async def test_published_message_is_fetched_at_once_after_catch_up(backend: Backend) -> None:
    topic, group = names()
    assert await fetch_now(backend, topic, group) == []
    for n in range(ROUNDS):
        await backend.publish(topic, [msg(f"m{n}")])
        assert await fetch_now(backend, topic, group) == [f"m{n}".encode()], n
    assert await fetch_now(backend, topic, group) == []
    assert await backend.catch_up(topic, group) is False
