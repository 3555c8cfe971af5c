"""The Pulsar front end's topic listing (`adapters.pulsar.frontend.namespaces`): engine topics
by Pulsar name, and one back-end listing per `LIST_EVERY_S` shared by every asker (a manual
clock)."""

from __future__ import annotations

import asyncio
from typing import Any

from adapters.pulsar.frontend.namespaces import LIST_EVERY_S, TopicListing, pulsar_name
from gateway.core.naming import NamingScheme


def test_pulsar_names_of_engine_topics() -> None:
    assert pulsar_name("orders") == "persistent://public/default/orders"
    assert pulsar_name("t/n/x") == "persistent://t/n/x"
    assert pulsar_name("two/parts") is None
    assert pulsar_name("a/b/c/d") is None
    assert pulsar_name("public/default/x") is None  # its Pulsar name reaches topic `x`
    assert pulsar_name("t//x") is None


class FakeQueries:
    """The engine queries a listing reads: `admin.topics()`, `groups()`, `naming_schemes()`."""

    def __init__(self) -> None:
        self.topics = ["orders"]
        self.calls = 0
        self.gate: asyncio.Event | None = None
        self.admin = self

    async def list_topics(self) -> list[str]:
        self.calls += 1
        if self.gate is not None:
            await self.gate.wait()
        return list(self.topics)

    def groups(self) -> list[Any]:
        return []

    def naming_schemes(self) -> list[NamingScheme]:
        return []


class FakeAdmin:
    def __init__(self, queries: FakeQueries) -> None:
        self.topics = queries.list_topics


def listing_of(queries: FakeQueries, now: list[float]) -> TopicListing:
    queries.admin = FakeAdmin(queries)  # type: ignore[assignment]
    return TopicListing(queries, clock=lambda: now[0])  # type: ignore[arg-type]


async def test_one_listing_per_period() -> None:
    queries, now = FakeQueries(), [100.0]
    listing = listing_of(queries, now)
    assert list(await listing.in_namespace("public/default")) == [
        "persistent://public/default/orders"]
    queries.topics.append("orders-new")
    now[0] += LIST_EVERY_S / 2
    assert len(await listing.in_namespace("public/default")) == 1  # from the last listing
    assert queries.calls == 1
    now[0] += LIST_EVERY_S / 2
    assert len(await listing.in_namespace("public/default")) == 2
    assert queries.calls == 2


async def test_concurrent_askers_share_one_listing() -> None:
    queries, now = FakeQueries(), [0.0]
    queries.gate = asyncio.Event()
    listing = listing_of(queries, now)
    askers = [asyncio.create_task(listing.in_namespace("public/default")) for _ in range(20)]
    await asyncio.sleep(0)
    queries.gate.set()
    answers = await asyncio.gather(*askers)
    assert queries.calls == 1
    assert all(len(found) == 1 for found in answers)


async def test_without_queries_nothing_is_listed() -> None:
    assert await TopicListing(None).in_namespace("public/default") == {}
