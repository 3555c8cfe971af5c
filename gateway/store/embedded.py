"""The embedded durable store: the default back end, on SQLite in WAL mode.

SQLite is the durable record (messages, per-group cursors, per-group unacked rows); the
consumption index lives in memory (`gateway.store.catalog`, `gateway.store.index`) and is rebuilt
from the tables on open. Writes go through one group-commit writer process; reads run on a thread
and connection of their own, so the event loop never waits on SQLite. Fresh messages are fetched
from memory (`gateway.store.tail`), and messages every group has acked are deleted periodically
(`trim`).

A failed commit (disk full) or a lost writer fails the writes waiting for it, and the store
recovers by itself (`gateway.store.supervisor`): while it is down every call fails with
Unavailable at once; it restarts the writer (with back-off, `gateway.store.recovery`) and rebuilds
the index from the tables, the durable truth, as `open` does. Leases handed out before are void
then (a new session) and their messages are delivered again. At too many failures in a row it
gives up (`fatal`).

This module holds the hot path (publish, fetch, wait, ack, release) and the wiring; the admin
verbs are `gateway.store.admin`, creating and seeking groups and a topic's newest message
`gateway.store.positions`."""

from __future__ import annotations

import asyncio
import logging
import pathlib
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import cast

from gateway.backend.base import (
    Backend,
    KeyedCopy,
    Lease,
    Move,
    OutMessage,
    Release,
    StoredMessage,
    TopicStats,
)
from gateway.backend.waiting import park
from gateway.engine.clock import Clock, SystemClock
from gateway.errors import GatewayError
from gateway.store import admin, guard, moves, positions, recovery, schema, writes
from gateway.store import reader as rd
from gateway.store.catalog import Catalog
from gateway.store.codec import props_json
from gateway.store.fetch import fetch
from gateway.store.index import Entry, GroupIndex
from gateway.store.supervisor import Supervisor
from gateway.store.tail import NO_PROPERTIES, PROPERTY_OVERHEAD, TailCache
from gateway.store.writer import COMMIT_TIMEOUT_S
from gateway.store.writes import MessageRow, UnackedRow, Write

TAIL_BYTES = 64 << 20
"""Default memory for recently published messages (`gateway.store.tail`)."""
TRIM_INTERVAL_S = 5.0
"""How often messages every group has acked are deleted (`EmbeddedStore.trim`)."""

_log = logging.getLogger(__name__)


class _FunctionClock:
    """A `Clock` reading a function of no arguments (the store's older `clock` argument)."""

    __slots__ = ("now_ms",)

    def __init__(self, now_ms: Callable[[], int]) -> None:
        self.now_ms = now_ms


def _as_clock(clock: Clock | Callable[[], int] | None) -> Clock:
    """`clock` as a `Clock`: one with a `now_ms()` method as it is, a function wrapped."""
    if clock is None:
        return SystemClock()
    if callable(getattr(clock, "now_ms", None)):
        return cast(Clock, clock)
    return _FunctionClock(cast(Callable[[], int], clock))


class EmbeddedStore(Backend):
    """Durable topics in one SQLite file under `data_dir`; see the module docstring."""

    name = "embedded"
    seekable = skips_delays = True

    def __init__(
        self,
        data_dir: pathlib.Path,
        clock: Clock | Callable[[], int] | None = None,
        *,
        fsync: bool = True,
        tail_bytes: int = TAIL_BYTES,
        trim_interval_s: float = TRIM_INTERVAL_S,
        restart_backoff_s: tuple[float, float] | None = None,
        give_up_after: int | None = None,
        stable_s: float | None = None,
        commit_timeout_s: float = COMMIT_TIMEOUT_S,
    ) -> None:
        """`clock`: the engine's `Clock` (default: the system clock); its `now_ms` function is
        taken too. `restart_backoff_s`, `give_up_after`, `stable_s`: see `gateway.store.recovery`
        (None: its defaults); `commit_timeout_s`: see `gateway.store.writer.COMMIT_TIMEOUT_S`."""
        self._dir = pathlib.Path(data_dir)
        self._tail = TailCache(tail_bytes)
        self._trim_interval_s = trim_interval_s
        self._trimmer: asyncio.Task[None] | None = None
        self._clock = _as_clock(clock)
        self._catalog = Catalog()
        self._supervisor = Supervisor(
            self._dir,
            fsync=fsync,
            recovery=recovery.Recovery(
                recovery.BACKOFF_S if restart_backoff_s is None else restart_backoff_s,
                recovery.GIVE_UP_AFTER if give_up_after is None else give_up_after,
                recovery.STABLE_S if stable_s is None else stable_s,
            ),
            install=self._install,
            wake=self._catalog.wake_all,
            commit_timeout_s=commit_timeout_s,
        )
        self._id_tag = "00000000"
        self._id_seq = 0
        self._ledger_lock = asyncio.Lock()

    # ----------------------------------------------------------------- lifecycle

    @property
    def transactions(self) -> int:
        """Write transactions committed since open (group commit makes this < writes)."""
        writer = self._supervisor.writer
        return 0 if writer is None else writer.transactions

    @property
    def writes(self) -> int:
        """Write requests applied since open."""
        writer = self._supervisor.writer
        return 0 if writer is None else writer.writes

    async def open(self) -> None:
        if self._supervisor.open:
            return
        await self._supervisor.start()
        self._id_tag = uuid.uuid4().hex[:8]
        self._id_seq = 0
        if self._trim_interval_s > 0:
            self._trimmer = asyncio.ensure_future(self._trim_loop())

    def _install(self, loaded: rd.Loaded) -> None:
        """Serve an index rebuilt from `loaded` (in a new lease session)."""
        self._catalog.wake_all()  # their waiters look again, at the new index
        self._tail.clear()
        self._catalog.rebuild(loaded)

    async def close(self) -> None:
        if not self._supervisor.open:
            return
        trimmer, self._trimmer = self._trimmer, None
        await self._supervisor.stop(trimmer)
        self._tail.clear()

    def healthy(self) -> bool:
        return self._supervisor.healthy()

    def fatal(self) -> str | None:
        return self._supervisor.fatal

    def on_state_change(self, callback: Callable[[], None]) -> None:
        self._supervisor.on_state_change(callback)

    def on_leases_lost(self, callback: Callable[[], None]) -> None:
        self._supervisor.on_leases_lost(callback)

    # ----------------------------------------------------------------- ids

    def _id_prefix(self, now_ms: int) -> str:
        """The first 20 of a new message id's 32 hex chars: publish ms and this open's random
        tag; `_new_id` adds a counter. Time-ordered within a store, unique across opens (the
        tag) without a random draw per id."""
        return f"{now_ms & 0xFFFFFFFFFFFF:012x}{self._id_tag}"

    def _new_id(self, prefix: str) -> str:
        self._id_seq += 1
        return f"{prefix}{self._id_seq & 0xFFFFFFFFFFFF:012x}"

    # ----------------------------------------------------------------- verbs

    async def publish(self, topic: str, messages: Sequence[OutMessage]) -> list[str]:
        writer, _ = self._supervisor.ready()
        if not messages:
            return []
        write, committed, ids = self.stage(topic, messages)
        await _committed(writer.submit(write), committed)
        return ids

    def stage(
        self, topic: str, messages: Sequence[OutMessage]
    ) -> tuple[Write, Callable[[], None], list[str]]:
        """Take `messages` into the index and the tail as the next positions of `topic`: the
        write that makes them durable, what to run once it committed, and their ids. The write
        must be submitted before the event loop runs anything else (`gateway.store.moves`
        submits several together). Raises (having changed nothing) for a value the store
        cannot keep."""
        index = self._catalog.topic(topic)
        now_ms = self._clock.now_ms()
        base = schema.topic_base(index.topic_id)
        ids: list[str] = []
        rows: list[MessageRow] = []
        entries: list[Entry] = []
        first = index.next_pos
        rowid = base + first
        size = 0  # what the tail counts: bodies, keys, tags and properties
        bodiless = 0  # entries kept without their body (delayed)
        prefix = self._id_prefix(now_ms)
        ascii_text = str.isascii  # TypeError for anything but a str
        for message in messages:
            key, tag, deliver_at = message.key, message.tag, message.deliver_at_ms
            attempt, retries, given_id = message.attempt, message.retries, message.message_id
            try:
                # All three in 0..2**63-1 (SQLite's INTEGER); key, tag, id UTF-8 (`guard`).
                fine = not (deliver_at | attempt | retries) >> 63 and ascii_text(key) and (
                    ascii_text(tag) and (not given_id or ascii_text(given_id))
                )
            except TypeError:
                fine = False
            if not fine:
                guard.check_message(message)
            message_id = given_id or self._new_id(prefix)
            ids.append(message_id)
            properties = message.properties
            body = message.body
            if type(body) is not bytes:
                body = guard.body(body)
            props = props_json(properties) if properties else "{}"
            rows.append(
                (rowid, message_id, key, tag, body, props, now_ms, deliver_at, attempt, retries)
            )
            rowid += 1
            size += len(key) + len(tag)
            if deliver_at > now_ms:
                # Delayed (a retry copy, say): read from SQLite when due, like any message a
                # timer brings back; the tail keeps what the scan needs, not its body.
                entries.append(("", key, tag, None, NO_PROPERTIES, now_ms, deliver_at, attempt,
                                retries))
                bodiless += 1
                continue
            if properties:
                size += len(props) + PROPERTY_OVERHEAD * (len(properties) + 1)
            size += len(body)
            entries.append(
                (message_id, key, tag, body, properties, now_ms, deliver_at, attempt, retries)
            )
        index.next_pos = end = first + len(rows)
        self._tail.add(index, first, entries, size, bodiless)
        topic_row = None if index.persisted else (index.topic_id, index.name)

        def committed() -> None:
            index.persisted = True
            TailCache.committed(index, end)
            index.note_newest(end - 1, ids)
            for group in list(index.waiting):  # the others look at `committed` in `wait`
                group.wake()

        return writes.append(topic_row, rows), committed, ids

    async def fetch(
        self,
        topic: str,
        group: str,
        max_messages: int,
        now_ms: int,
        *,
        exclude_keys: frozenset[str] = frozenset(),
        max_bytes: int | None = None,
        publish_delays: bool = True,
    ) -> list[StoredMessage]:
        """See `Backend.fetch` and `gateway.store.fetch`."""
        return await fetch(
            self._catalog, self._supervisor, topic, group, max_messages, now_ms,
            exclude_keys=exclude_keys, max_bytes=max_bytes, publish_delays=publish_delays,
        )

    async def wait(self, topic: str, group: str, timeout_s: float) -> None:
        """See `Backend.wait`; delayed positions are due by the store's clock.

        Visibility itself is decided by `fetch` at the caller's `now_ms`, so the store's clock
        should be the caller's clock (pass the engine's clock to the constructor).
        """
        self._supervisor.ready()
        state = self._catalog.group(self._catalog.topic(topic), group)
        if state.dirty or state.topic.committed > state.seen:
            return
        deadline = state.timers.next_deadline_ms()
        if state.spill_at is not None and (deadline is None or state.spill_at[0] < deadline):
            deadline = state.spill_at[0]  # the first position on disk only falls due then
        state.topic.waiting.add(state)
        try:
            await park(state.waiters, timeout_s, deadline, self._clock.now_ms())
        finally:
            if not state.waiters:
                state.topic.waiting.discard(state)

    async def ack(self, leases: Sequence[Lease]) -> None:
        writer, _ = self._supervisor.ready()
        rows = self._acked(leases)
        if rows:
            await writer.submit(writes.settled(rows))

    def _acked(self, leases: Sequence[Lease]) -> list[tuple[int, int]]:
        """Take acked leases out of the index: the (gid, pos) rows to forget durably."""
        rows: list[tuple[int, int]] = []
        known_group = self._catalog.known_group
        for lease in leases:
            state = known_group(lease.topic, lease.group)
            if state is None or not lease.token:
                continue
            if state.leased.get(lease.position) != lease.token:
                continue
            del state.leased[lease.position]
            if state.paging is not None:
                state.touched(lease.position)
            state.topic.settled += 1
            rows.append((state.gid, lease.position))
        return rows

    async def release(self, releases: Sequence[Release]) -> None:
        writer, _ = self._supervisor.ready()
        released = self._released(releases)
        if released is not None:
            await _committed(writer.submit(released[0]), released[1])

    def _released(self, releases: Sequence[Release]) -> tuple[Write, Callable[[], None]] | None:
        """Take released leases out of the index: the write that records them and what to run
        once it committed (None: nothing to release). Raises, having changed nothing, for a
        value the store cannot keep."""
        guard.check_releases(releases)
        rows: list[UnackedRow] = []
        placed: list[tuple[GroupIndex, int, int, str]] = []
        known_group = self._catalog.known_group
        for item in releases:
            lease = item.lease
            state = known_group(lease.topic, lease.group)
            if state is None or not lease.token:
                continue
            if state.leased.get(lease.position) != lease.token:
                continue
            del state.leased[lease.position]
            state.touched(lease.position)
            state.releasing[lease.position] = lease.token
            rows.append((state.gid, lease.position, item.visible_at_ms, item.attempt, item.retries))
            placed.append((state, lease.position, item.visible_at_ms, lease.token))
        if not rows:
            return None

        def committed() -> None:
            for state, pos, visible_at, token in placed:
                if state.releasing.get(pos) != token:
                    continue
                del state.releasing[pos]
                state.touched(pos)
                state.place(visible_at, pos)
                state.wake()

        return writes.released(rows), committed

    async def carry_out(
        self,
        copies: Mapping[str, Sequence[OutMessage]],
        acks: Sequence[Lease],
        releases: Sequence[Release],
    ) -> None:
        """See `Backend.carry_out`: the copies, acks and releases are queued on the writer
        together, in that order and with no await between them, so they commit in one
        transaction (one fsync for the whole settle batch). A copy the store refuses raises
        before the acks are queued: its original stays leased, as with `publish` then `ack`."""
        writer, _ = self._supervisor.ready()
        guard.check_releases(releases)
        pending: list[asyncio.Future[object]] = []
        for topic, messages in copies.items():
            if messages:
                write, committed, _ = self.stage(topic, messages)
                pending.append(_then(writer.submit(write), committed))
        released = self._released(releases)
        rows = self._acked(acks)
        if rows:
            pending.append(writer.submit(writes.settled(rows)))
        if released is not None:
            pending.append(_then(writer.submit(released[0]), released[1]))
        for future in pending:
            await asyncio.shield(future)

    async def stats(self, topic: str, group: str, now_ms: int, *,
                    publish_delays: bool = True) -> TopicStats:
        return await admin.stats(self._catalog, self._supervisor, topic, group, now_ms,
                                 publish_delays=publish_delays)

    async def outstanding(self, topic: str, group: str, now_ms: int) -> int:
        """See `Backend.outstanding`: from the index alone, never the disk (positions the group
        has not scanned yet count whether due or not; positions kept on disk only count one)."""
        self._supervisor.ready()
        state = self._catalog.known_group(topic, group)
        if state is None:
            return await super().outstanding(topic, group, now_ms)
        state.advance(now_ms)
        unscanned = max(state.topic.committed - state.cursor, 0)
        return (len(state.ready) + sum(len(held) for held in state.held.values())
                + len(state.leased) + len(state.releasing) + unscanned
                + (state.spill_at is not None))

    async def peek(self, topic: str, group: str, limit: int,
                   after_position: int = -1) -> list[StoredMessage]:
        writer, reader = self._supervisor.ready()
        return await admin.peek(self._catalog, writer, reader, topic, group, limit, after_position)

    async def remove(self, leases: Sequence[Lease], *, keep_leased: bool = False) -> int:
        self._supervisor.ready()
        return await admin.remove(self._catalog, self._supervisor, leases, keep_leased)

    async def purge(self, topic: str, group: str, *, leased: bool = False) -> int:
        writer, reader = self._supervisor.ready()
        return await admin.purge(self._catalog, writer, reader, topic, group, leased=leased)

    atomic_moves = True
    removes_by_position = True

    async def move(self, items: Sequence[Move]) -> int:
        """See `Backend.move`: here every copy and removal commits in one transaction."""
        writer, reader = self._supervisor.ready()
        return await moves.move(self, self._catalog, writer, reader, items)

    async def store_once(self, ledger: str, copies: Sequence[KeyedCopy],
                         earlier: Sequence[str] = ()) -> list[bool]:
        """See `Backend.store_once`: the ledger is a table written in the copies' transaction."""
        writer, reader = self._supervisor.ready()
        return await moves.store_once(self, writer, reader, self._ledger_lock, self._catalog,
                                      ledger, copies, earlier)

    async def create_group(self, topic: str, group: str, *, at_end: bool = False) -> bool:
        writer, _ = self._supervisor.ready()
        return await positions.create_group(self._catalog, writer, topic, group, at_end)

    async def seek(self, topic: str, group: str, *, message_id: str = "",
                   publish_ms: int = -1) -> None:
        writer, reader = self._supervisor.ready()
        await positions.seek(self._catalog, writer, reader, topic, group,
                             message_id=message_id, publish_ms=publish_ms)

    async def last_id(self, topic: str) -> str | None:
        _, reader = self._supervisor.ready()
        return await positions.last_id(self._catalog, reader, topic)

    async def properties_after(self, topic: str, message_id: str,
                               limit: int) -> list[tuple[str, Mapping[str, str]]]:
        _, reader = self._supervisor.ready()
        return await positions.properties_after(self._catalog, reader, topic, message_id, limit)

    async def drop_group(self, topic: str, group: str) -> bool:
        return await admin.drop_group(self._catalog, self._supervisor.ready()[0], topic, group)

    async def reset_retries(self, topic: str, group: str) -> int:
        """See `Backend.reset_retries`: one statement on the group's unacked rows."""
        writer, _ = self._supervisor.ready()
        return await admin.reset_retries(self._catalog, writer, topic, group)

    async def trim(self) -> int:
        """Delete the messages of every topic that all of its groups have acked; return how
        many positions were deleted (`gateway.store.admin.trim`)."""
        writer, _ = self._supervisor.ready()
        return await admin.trim(self._catalog, writer)

    async def _trim_loop(self) -> None:
        while True:
            await asyncio.sleep(self._trim_interval_s)
            try:
                await self.trim()
            except GatewayError as exc:
                _log.warning("embedded store trim failed: %s", exc.message)

    async def topics(self) -> list[str]:
        self._supervisor.ready()
        return sorted(name for name, index in self._catalog.topics.items() if index.persisted)

    async def groups(self) -> list[tuple[str, str]]:
        self._supervisor.ready()
        return sorted((g.topic.name, g.name) for g in self._catalog.groups.values() if g.durable)


async def _committed(future: asyncio.Future[object], then: Callable[[], None]) -> None:
    """Await a write; run `then` once it committed, even if the caller is cancelled meanwhile."""
    await asyncio.shield(_then(future, then))


def _then(future: asyncio.Future[object], then: Callable[[], None]) -> asyncio.Future[object]:
    """Have `then` run once the write of `future` committed; returns `future`."""

    def done(finished: asyncio.Future[object]) -> None:
        if not finished.cancelled() and finished.exception() is None:
            then()

    future.add_done_callback(done)
    return future
