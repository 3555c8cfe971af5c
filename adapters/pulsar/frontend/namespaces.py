"""Pattern (regex) subscriptions: GET_TOPICS_OF_NAMESPACE.

A client subscribing with a pattern (`re.compile('persistent://public/default/orders-.*')`)
asks for the topics of the pattern's namespace, subscribes to those its pattern matches, and
asks again every auto-discovery period (topic-list watching is not announced in CONNECTED, so it
polls). The answer lists the persistent topics the gateway holds in that namespace under their
full names (`persistent://public/default/orders` for engine topic `orders`, `persistent://t/n/x`
for `t/n/x`; engine topics no Pulsar name reaches are left out), unfiltered (`filtered` false:
the client applies its pattern) and without a hash (the client compares the lists itself).

A topic is one that holds messages or has a subscription the engine runs. Left out: the retry
and dead-letter destinations of the engine's naming schemes (`orders-sub-RETRY`, `-DLQ`): the
gateway redelivers retries to the origin topic's subscription itself, so a pattern consumer that
also subscribed to them would get each retry twice (subscribe to one by name to read it). Mode
NON_PERSISTENT lists nothing (non-persistent topics are not served); ALL lists the persistent
ones. With authentication on, only the topics the principal may consume with some group of its
own are listed.

The listing is shared by every connection of a front end and made at most once per
`LIST_EVERY_S` (concurrent askers wait for the one under way), so clients polling often cost
the back end one listing a second.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from adapters.pulsar.frontend import replies
from adapters.pulsar.frontend.topics import DEFAULT_PREFIX, PERSISTENT, topic_or_none
from adapters.pulsar.wire import wire_pb2 as pb
from gateway.core.destinations import Destinations
from gateway.engine.port import EngineQueries

LIST_EVERY_S = 1.0
"""How old a listing of the gateway's topics may be when a client is answered from it."""
Mode = pb.CommandGetTopicsOfNamespace


def pulsar_name(topic: str) -> str | None:
    """The `persistent://` name of engine topic `topic`; None when no Pulsar name reaches it."""
    parts = topic.split("/")
    if len(parts) == 1:
        full = PERSISTENT + DEFAULT_PREFIX + topic
    elif len(parts) == 3:
        full = PERSISTENT + topic
    else:
        return None
    return full if topic_or_none(full) == topic else None


def namespace_of(full_name: str) -> str:
    """`tenant/namespace` of a `persistent://tenant/namespace/topic` name."""
    return full_name[len(PERSISTENT):].rsplit("/", 1)[0]


class TopicListing:
    """The gateway's topics that Pulsar clients may list, by namespace (engine topic by full
    Pulsar name); without `queries` (a front end built without the engine's queries) none."""

    def __init__(self, queries: EngineQueries | None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._queries = queries
        self._clock = clock
        self._made_at: float | None = None
        self._by_namespace: dict[str, dict[str, str]] = {}
        self._making: asyncio.Future[None] | None = None
        self._destinations: Destinations | None = None

    async def in_namespace(self, namespace: str) -> dict[str, str]:
        """{full Pulsar name: engine topic} of the namespace's listed topics."""
        made_at = self._made_at
        if made_at is None or self._clock() - made_at >= LIST_EVERY_S:
            await self._refresh()
        return self._by_namespace.get(namespace, {})

    async def _refresh(self) -> None:
        if self._making is not None:  # one listing at a time; the others wait for it
            await asyncio.shield(self._making)
            return
        self._making = asyncio.get_running_loop().create_future()
        try:
            self._by_namespace = await self._list()
            self._made_at = self._clock()
        finally:
            making, self._making = self._making, None
            making.set_result(None)

    async def _list(self) -> dict[str, dict[str, str]]:
        queries = self._queries
        if queries is None:
            return {}
        if self._destinations is None:
            self._destinations = Destinations(queries.naming_schemes())
        topics = set(await queries.admin.topics())
        topics.update(state.topic for state in queries.groups())
        found: dict[str, dict[str, str]] = {}
        for topic in sorted(topics):
            full = pulsar_name(topic)
            if full is None or self._destinations.reserved(topic):
                continue
            found.setdefault(namespace_of(full), {})[full] = topic
        return found


async def answer(request: pb.CommandGetTopicsOfNamespace, listing: TopicListing,
                 may_consume: Callable[[str], bool]) -> bytes:
    """The reply to a GET_TOPICS_OF_NAMESPACE the edge checked: the namespace's topics that
    `may_consume(engine_topic)` lets the connection see."""
    names: list[str] = []
    if request.mode != Mode.NON_PERSISTENT:
        listed = await listing.in_namespace(request.namespace)
        names = [full for full, topic in listed.items() if may_consume(topic)]
    return replies.topics_of_namespace(request.request_id, names)
