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
reader). A client subscribes again on the connection its consumer was closed on, at once (its
reconnect back-off starts at 0.1 s): so a group nobody rejoins is dropped (`linger`) as soon as
every connection whose reader the seek closed has ended (`kicked`, `connection_closed`), and
at the latest `REJOIN_S` after the seek.

Pulsar's non-durable subscriptions do not survive a broker restart, and neither do these: with a
state directory, the groups made here are listed in `DATA_DIR/pulsar/readers.json` (written
whole through a temporary file, fsynced, renamed) before a group is made and after it is
dropped; `recover`, on the front end's start, drops every group listed (a crash left them; one
already gone is skipped) and empties the list. Without one, a group left by a crash stays.

On a back end that places groups itself (`EnginePort.positions` False) a group cannot be made
before it is consumed; there a name counts as taken when the engine runs a group of it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable, Iterator
from pathlib import Path

import structlog

from adapters.pulsar.frontend.files import replace_durably
from gateway.engine.port import EnginePort
from gateway.errors import AlreadyExists, GatewayError

log = structlog.get_logger(__name__)

REJOIN_S = 10.0
"""How long a reader group closed by a seek is kept at most for its readers to subscribe again
(while their connections stay open)."""
FILE_NAME = "readers.json"

Key = tuple[str, str]


class ReaderGroups:
    """(topic, group) of every reader group made and not yet dropped."""

    def __init__(self, directory: Path | None = None) -> None:
        """`directory`: where the list of groups made is kept (none: memory only)."""
        self._path = None if directory is None else directory / FILE_NAME
        self._listed: set[Key] = set()
        """What the list on disk holds, or is about to: `_made` and the groups being made."""
        self._writing = asyncio.Lock()
        self._made: set[tuple[str, str]] = set()
        self._pinned: set[tuple[str, str]] = set()
        self._lingering: dict[tuple[str, str], asyncio.Task[None]] = {}
        self._waiting: dict[Key, set[int]] = {}
        """Per group a seek closed: the connections whose readers it closed, still open."""
        self._abandoned: dict[Key, asyncio.Event] = {}
        """Per lingering group: set once no connection in `_waiting` is left."""

    def __contains__(self, key: object) -> bool:
        return key in self._made

    async def claim(self, engine: EnginePort, topic: str, group: str, *, at_end: bool,
                    owner: str = "") -> bool:
        """Make `group` a reader group of `topic` (new groups start at the earliest message, or
        `at_end`); True when made now, False when it was one already. AlreadyExists when a
        group of that name exists that is not a reader's."""
        key = (topic, group)
        if key in self._made:
            return False
        if engine.positions:
            if engine.group_state(topic, group) is not None:
                made = False
            else:
                self._listed.add(key)  # listed before it exists: a crash cannot leave it
                await self._save()
                made = await engine.create_group(topic, group, at_end=at_end, owner=owner)
        else:
            made = engine.group_state(topic, group) is None
        if key in self._made:
            return False  # a concurrent claim of the same name made it
        if not made:
            if key in self._listed:
                self._listed.discard(key)
                await self._save()
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
        self._waiting.pop(key, None)
        try:
            await engine.drop_group(topic, group)
        except GatewayError as exc:  # the connection's other consumers still close
            log.warning("reader's subscription not dropped", topic=topic, subscription=group,
                        error=exc.message)
            return  # still listed: the next start drops it
        self._listed.discard(key)
        await self._save()

    async def recover(self, engine: EnginePort) -> None:
        """Drop the reader groups a previous run left (see the module), then empty the list."""
        if self._path is None:
            return
        left = await asyncio.to_thread(_read, self._path)
        for topic, group in left:
            try:
                await engine.drop_group(topic, group)
            except GatewayError as exc:
                log.warning("reader's subscription left by the last run not dropped",
                            topic=topic, subscription=group, error=exc.message)
                self._listed.add((topic, group))
            else:
                log.info("reader's subscription left by the last run dropped", topic=topic,
                         subscription=group)
        await self._save()

    async def _save(self) -> None:
        if self._path is None:
            return
        async with self._writing:
            try:
                await asyncio.to_thread(_write, self._path, sorted(self._listed))
            except OSError as exc:
                log.error("pulsar reader groups not written", path=str(self._path),
                          error=str(exc))

    @contextlib.contextmanager
    def pinned(self, topic: str, group: str) -> Iterator[None]:
        """Keep the reader group while its consumers are closed (`release` leaves it)."""
        key = (topic, group)
        self._pinned.add(key)
        try:
            yield
        finally:
            self._pinned.discard(key)

    def kicked(self, topic: str, group: str, connection: int) -> None:
        """A seek closed a reader of the group on `connection` (which it subscribes again on)."""
        key = (topic, group)
        if key in self._made:
            self._waiting.setdefault(key, set()).add(connection)

    def connection_closed(self, connection: int) -> None:
        """`connection` ended: the groups a seek closed only its readers of are abandoned."""
        for key, waiting in self._waiting.items():
            waiting.discard(connection)
            if not waiting and key in self._abandoned:
                self._abandoned[key].set()

    def linger(self, engine: EnginePort, topic: str, group: str, idle: Callable[[], bool],
               after: float | None = None, *,
               guard: Callable[[], contextlib.AbstractAsyncContextManager[None]] | None = None,
               ) -> None:
        """Drop the reader group once every connection whose reader a seek closed has ended
        (`kicked`), or after `after` seconds, unless a consumer came back (`idle()` False
        then), inside `guard()` (the name's lock)."""
        key = (topic, group)
        if key in self._lingering:
            return
        if key not in self._made:
            self._waiting.pop(key, None)
            return
        abandoned = self._abandoned[key] = asyncio.Event()
        if not self._waiting.get(key, True):  # those connections have ended already
            abandoned.set()

        async def later() -> None:
            try:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(abandoned.wait(), REJOIN_S if after is None else after)
                async with guard() if guard is not None else contextlib.nullcontext():
                    if idle():
                        await self.release(engine, topic, group)
            finally:
                self._lingering.pop(key, None)
                self._abandoned.pop(key, None)
                self._waiting.pop(key, None)

        self._lingering[key] = asyncio.create_task(later(), name=f"pulsar-reader-{group}")

    async def close(self) -> None:
        """Stop every pending `linger` (the groups are dropped at the next start, or stay)."""
        tasks = list(self._lingering.values())
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task


def _read(path: Path) -> list[Key]:
    try:
        data = json.loads(path.read_bytes())
    except FileNotFoundError:
        return []
    except ValueError:
        log.warning("pulsar reader groups list unreadable, ignored", path=str(path))
        return []
    if not isinstance(data, list):
        return []
    return [(t, g) for item in data if isinstance(item, list) and len(item) == 2
            for t, g in [item] if isinstance(t, str) and isinstance(g, str)]


def _write(path: Path, keys: list[Key]) -> None:
    replace_durably(path, json.dumps([list(k) for k in keys], ensure_ascii=False).encode())
