"""The readers' (non-durable) subscriptions this front end made, so that a reader never takes,
moves or drops a durable subscription.

A reader's SUBSCRIBE names its group. The front end makes that group (`claim`) unless it
exists: a name that is already a group and not a reader group made here is a durable
subscription, and the reader is refused (ConsumerBusy), as by a Pulsar broker. A durable
SUBSCRIBE to the name of a live reader group is refused likewise (`Connection`). When a reader
group's last consumer leaves, `release` drops it; no other group is ever dropped here.

A seek on a reader group closes its consumers (`SubscriptionRegistry.seek`) but keeps the group,
moved to the target (`pinned`): the readers subscribe again with no start id after a seek by
time, and with their target id after a seek by id, and find it there. Were it dropped, the
seek's second move would make it again as a group no reader owns (durable to every later
reader). A group nobody rejoins within `REJOIN_S` is dropped (`linger`).

On a back end that places groups itself (`EnginePort.positions` False) a group cannot be made
before it is consumed; there a name counts as taken when the engine runs a group of it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator

import structlog

from gateway.engine.port import EnginePort
from gateway.errors import AlreadyExists, GatewayError

log = structlog.get_logger(__name__)

REJOIN_S = 60.0
"""How long a reader group closed by a seek is kept for its readers to subscribe again."""


class ReaderGroups:
    """(topic, group) of every reader group made and not yet dropped."""

    def __init__(self) -> None:
        self._made: set[tuple[str, str]] = set()
        self._pinned: set[tuple[str, str]] = set()
        self._lingering: dict[tuple[str, str], asyncio.Task[None]] = {}

    def __contains__(self, key: object) -> bool:
        return key in self._made

    async def claim(self, engine: EnginePort, topic: str, group: str, *, at_end: bool) -> bool:
        """Make `group` a reader group of `topic` (new groups start at the earliest message, or
        `at_end`); True when made now, False when it was one already. AlreadyExists when a
        group of that name exists that is not a reader's."""
        key = (topic, group)
        if key in self._made:
            return False
        if engine.positions:
            made = await engine.create_group(topic, group, at_end=at_end)
        else:
            made = engine.group_state(topic, group) is None
        if key in self._made:
            return False  # a concurrent claim of the same name made it
        if not made:
            raise AlreadyExists(f"a durable subscription {group!r} exists on {topic!r}: a "
                                "reader (non-durable subscription) needs a name of its own")
        self._made.add(key)
        return True

    async def release(self, engine: EnginePort, topic: str, group: str) -> None:
        """Drop a reader group made here (its last consumer left); any other group stays."""
        key = (topic, group)
        if key not in self._made or key in self._pinned:
            return
        self._made.discard(key)
        try:
            await engine.drop_group(topic, group)
        except GatewayError as exc:  # the connection's other consumers still close
            log.warning("reader's subscription not dropped", topic=topic, subscription=group,
                        error=exc.message)

    @contextlib.contextmanager
    def pinned(self, topic: str, group: str) -> Iterator[None]:
        """Keep the reader group while its consumers are closed (`release` leaves it)."""
        key = (topic, group)
        self._pinned.add(key)
        try:
            yield
        finally:
            self._pinned.discard(key)

    def linger(self, engine: EnginePort, topic: str, group: str, idle: Callable[[], bool],
               after: float | None = None) -> None:
        """Drop the reader group after `after` seconds unless a consumer came back (`idle()`
        False then)."""
        key = (topic, group)
        if key not in self._made or key in self._lingering:
            return

        async def later() -> None:
            try:
                await asyncio.sleep(REJOIN_S if after is None else after)
                if idle():
                    await self.release(engine, topic, group)
            finally:
                self._lingering.pop(key, None)

        self._lingering[key] = asyncio.create_task(later(), name=f"pulsar-reader-{group}")

    async def close(self) -> None:
        """Stop every pending `linger` (the groups are dropped at the next start, or stay)."""
        tasks = list(self._lingering.values())
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
