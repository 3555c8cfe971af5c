"""The embedded durable store: the default back end, on SQLite in WAL mode.

SQLite is the durable record (messages, per-group cursors, per-group unacked rows); the
consumption index lives in memory (`gateway.store.index`) and is rebuilt from the tables on
open. Writes go through one group-commit writer process; reads run on a thread and connection
of their own, so the event loop never waits on SQLite. Fresh messages are fetched from memory
(`gateway.store.tail`), and messages every group has acked are deleted periodically (`trim`).

A failed commit (disk full) or a lost writer fails the writes waiting for it, and the store
recovers by itself: while it is down every call fails with Unavailable at once; it restarts the
writer (with back-off, `gateway.store.recovery`) and rebuilds the index from the tables, the
durable truth, as `open` does. Leases handed out before are void then (a new session) and their
messages are delivered again. At too many failures in a row it gives up (`fatal`).
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import json
import logging
import pathlib
import sqlite3
import time
import uuid
from collections.abc import Callable, Mapping, Sequence

from gateway.backend.base import (
    Backend,
    Lease,
    OutMessage,
    Release,
    StoredMessage,
    TopicStats,
)
from gateway.errors import GatewayError, InvalidArgument, Unavailable
from gateway.store import guard, recovery, schema, writes
from gateway.store import reader as rd
from gateway.store.index import GroupIndex, ReadyEntry, TopicIndex
from gateway.store.tail import PROPERTY_OVERHEAD, Entry, TailCache
from gateway.store.writer import GroupCommitWriter
from gateway.store.writes import MessageRow, UnackedRow
from gateway.timewheel import TimerWheel

SCAN_CAP = 4096
"""Most not-yet-seen messages one fetch looks at."""
EXAMINE_CAP = 4096
"""Most ready entries one fetch looks at (skipping excluded keys)."""
TAIL_BYTES = 64 << 20
"""Default memory for recently published messages (`gateway.store.tail`)."""
TRIM_INTERVAL_S = 5.0
"""How often messages every group has acked are deleted (`EmbeddedStore.trim`)."""
TRIM_ROWS = 50_000
"""Most message rows one topic's trim deletes in one transaction."""


_log = logging.getLogger(__name__)


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


_escape = json.encoder.encode_basestring_ascii


def _props_json(properties: Mapping[str, str]) -> str:
    """`json.dumps(properties)` for a dict of strings, without building an encoder per call."""
    try:
        return "{" + ", ".join([f"{_escape(k)}: {_escape(v)}" for k, v in properties.items()]) + "}"
    except TypeError:  # not all strings
        guard.check_properties(properties)
        raise


def _props(text: str) -> Mapping[str, str]:
    if text == "{}":
        return {}
    loaded: dict[str, str] = json.loads(text)
    return loaded


class EmbeddedStore(Backend):
    """Durable topics in one SQLite file under `data_dir`; see the module docstring."""

    name = "embedded"

    def __init__(
        self,
        data_dir: pathlib.Path,
        clock: Callable[[], int] | None = None,
        *,
        fsync: bool = True,
        tail_bytes: int = TAIL_BYTES,
        trim_interval_s: float = TRIM_INTERVAL_S,
        restart_backoff_s: tuple[float, float] | None = None,
        give_up_after: int | None = None,
        stable_s: float | None = None,
    ) -> None:
        """The last three: see `gateway.store.recovery` (None: its defaults)."""
        self._dir = pathlib.Path(data_dir)
        self._tail = TailCache(tail_bytes)
        self._trim_interval_s = trim_interval_s
        self._trimmer: asyncio.Task[None] | None = None
        self._clock = clock or _wall_ms
        self._fsync = fsync
        self._writer: GroupCommitWriter | None = None
        self._reader: rd.Reader | None = None
        self._topics: dict[str, TopicIndex] = {}
        self._groups: dict[int, GroupIndex] = {}
        self._next_topic_id = 1
        self._next_gid = 1
        self._session = ""
        self._seq = 0
        self._id_tag = "00000000"
        self._id_seq = 0
        self._open = False
        self._failure: BaseException | None = None
        """Why the store is down (it is recovering), or None."""
        self._fatal: str | None = None
        self._recovery = recovery.Recovery(
            recovery.BACKOFF_S if restart_backoff_s is None else restart_backoff_s,
            recovery.GIVE_UP_AFTER if give_up_after is None else give_up_after,
            recovery.STABLE_S if stable_s is None else stable_s,
        )
        self._recovering: asyncio.Task[None] | None = None
        self._generation = 0
        """Counts index rebuilds: a fetch that awaited across one hands nothing out."""
        self._state_listeners: list[Callable[[], None]] = []
        self._reset_listeners: list[Callable[[], None]] = []

    # ----------------------------------------------------------------- lifecycle

    @property
    def transactions(self) -> int:
        """Write transactions committed since open (group commit makes this < writes)."""
        return 0 if self._writer is None else self._writer.transactions

    @property
    def writes(self) -> int:
        """Write requests applied since open."""
        return 0 if self._writer is None else self._writer.writes

    async def open(self) -> None:
        if self._open:
            return
        # The writer first: it takes the directory's lock (so an earlier writer has ended)
        # and creates the tables; only then is the index loaded.
        self._failure = None
        self._fatal = None
        self._recovery.reset()
        writer = self._new_writer()
        await writer.start()
        try:
            self._reader = rd.Reader(self._dir)
            loaded = await self._reader.run(rd.load)
            if writer.failed is not None:  # it ended meanwhile: nobody would restart it
                raise Unavailable(f"embedded store did not open: {writer.failed}")
        except BaseException:
            await writer.stop()
            if self._reader is not None:
                await self._reader.close()
                self._reader = None
            raise
        self._install(writer, loaded)
        self._id_tag = uuid.uuid4().hex[:8]
        self._id_seq = 0
        self._open = True
        if self._trim_interval_s > 0:
            self._trimmer = asyncio.ensure_future(self._trim_loop())

    def _new_writer(self) -> GroupCommitWriter:
        writer: GroupCommitWriter

        def failed(error: BaseException) -> None:
            self._writer_failed(writer, error)

        writer = GroupCommitWriter(
            self._dir, asyncio.get_running_loop(), fsync=self._fsync, on_failure=failed
        )
        return writer

    def _install(self, writer: GroupCommitWriter, loaded: rd.Loaded) -> None:
        """Serve with `writer` and an index rebuilt from `loaded`, in a new lease session."""
        for group in self._groups.values():
            group.wake()  # their waiters look again, at the new index
        self._writer = writer
        self._tail.clear()
        self._rebuild(loaded)
        self._session = uuid.uuid4().hex[:12]
        self._generation += 1

    def _rebuild(self, loaded: rd.Loaded) -> None:
        self._topics.clear()
        self._groups.clear()
        by_id: dict[int, TopicIndex] = {}
        for topic_id, name, first, nxt in loaded.topics:
            by_id[topic_id] = self._topics[name] = TopicIndex(topic_id, name, first, nxt, True)
        self._next_topic_id = max(by_id, default=0) + 1
        for gid, topic_id, grp, next_pos in loaded.groups:
            topic = by_id.get(topic_id)
            if topic is not None:
                group = GroupIndex(gid, topic, grp, next_pos, TimerWheel(0))
                topic.groups[grp] = self._groups[gid] = group
            self._next_gid = max(self._next_gid, gid + 1)
        for gid, pos, visible_at in loaded.unacked:
            group_or_none = self._groups.get(gid)
            if group_or_none is None:
                continue
            # Anything with a visible-at time waits in the wheel: the first fetch's `now_ms`
            # (not the store's clock) decides whether it is visible yet.
            if visible_at > 0:
                group_or_none.timers.schedule(visible_at, pos)
            else:
                group_or_none.ready.append((visible_at, pos, None))
        for group in self._groups.values():
            heapq.heapify(group.ready)

    async def close(self) -> None:
        if not self._open:
            return
        self._open = False
        for task in (self._trimmer, self._recovering):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._trimmer = self._recovering = None
        for group in self._groups.values():
            group.wake()
        if self._writer is not None:
            await self._writer.stop()
        if self._reader is not None:
            await self._reader.close()
        self._tail.clear()
        self._writer = None
        self._reader = None

    def healthy(self) -> bool:
        return self._open and self._failure is None and self._fatal is None

    def fatal(self) -> str | None:
        return self._fatal

    def on_state_change(self, callback: Callable[[], None]) -> None:
        self._state_listeners.append(callback)

    def on_leases_lost(self, callback: Callable[[], None]) -> None:
        self._reset_listeners.append(callback)

    def _tell(self, listeners: list[Callable[[], None]]) -> None:
        for listener in listeners:
            try:
                listener()
            except Exception:  # a listener's bug must not stop the store's recovery
                _log.exception("embedded store listener failed")

    def _ready(self) -> tuple[GroupCommitWriter, rd.Reader]:
        if self._fatal is not None:
            raise Unavailable(self._fatal)
        if not self._open or self._writer is None or self._reader is None:
            raise Unavailable("embedded store is not open")
        if self._failure is not None:
            raise Unavailable(f"embedded store is recovering from: {self._failure}")
        return self._writer, self._reader

    # ----------------------------------------------------------------- recovery

    def _writer_failed(self, writer: GroupCommitWriter, error: BaseException) -> None:
        """The serving writer failed (a restart attempt's own writer is not looked at here:
        the attempt sees its failure)."""
        if writer is not self._writer or not self._open or self._failure is not None:
            return
        self._failure = error
        self._recovery.failed()
        for group in self._groups.values():
            group.wake()
        self._recovering = asyncio.ensure_future(self._recover(writer))
        self._tell(self._state_listeners)

    async def _recover(self, old: GroupCommitWriter) -> None:
        """Restart the writer and rebuild the index until that works or the store gives up."""
        try:
            await self._restart(old)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug here must not leave the store down for good, unsaid
            _log.exception("embedded store recovery failed")
            self._give_up(f"embedded store recovery failed: {exc!r}")

    async def _restart(self, old: GroupCommitWriter) -> None:
        await old.kill()  # and reaped: its last frames are committed (or lost) by now
        while not self._recovery.exhausted:
            await asyncio.sleep(self._recovery.delay_s())
            writer = self._new_writer()
            try:
                await writer.start()
                await writer.submit(writes.BARRIER)
                assert self._reader is not None
                loaded = await self._reader.run(rd.load)
                if writer.failed is not None:
                    raise writer.failed
            except asyncio.CancelledError:
                await writer.kill(0.0)
                raise
            except Exception as exc:  # any reason: count it and try again
                await writer.kill(0.0)
                self._failure = exc
                self._recovery.failed()
                _log.error("embedded store restart failed (%d in a row): %s",
                           self._recovery.failures, exc)
                continue
            self._install(writer, loaded)
            self._tell(self._reset_listeners)
            self._failure = None
            self._recovery.healed()
            self._recovering = None
            _log.warning("embedded store recovered: writer restarted, index rebuilt")
            self._tell(self._state_listeners)
            return
        self._give_up(
            f"embedded store gave up after {self._recovery.failures} failures in a row;"
            f" the last: {self._failure}"
        )

    def _give_up(self, reason: str) -> None:
        self._fatal = reason
        _log.critical("%s", reason)
        self._recovering = None
        self._tell(self._state_listeners)

    # ----------------------------------------------------------------- index helpers

    def _topic(self, name: str) -> TopicIndex:
        topic = self._topics.get(name)
        if topic is None:
            if not name:
                raise InvalidArgument("topic", name, "a non-empty topic name")
            guard.text("topic", name)
            topic = TopicIndex(self._next_topic_id, name, 1, 1, False)
            self._next_topic_id += 1
            self._topics[name] = topic
        return topic

    def _group(self, topic: TopicIndex, name: str) -> GroupIndex:
        group = topic.groups.get(name)
        if group is None:
            if not name:
                raise InvalidArgument("group", name, "a non-empty group name")
            guard.text("group", name)
            # The wheel's time is the callers' `now_ms` (fetch, stats): it starts at 0 and moves
            # on their first call, so a caller clock unlike the store's one is still honoured.
            group = GroupIndex(self._next_gid, topic, name, topic.first_pos, TimerWheel(0))
            self._next_gid += 1
            topic.groups[name] = self._groups[group.gid] = group
        return group

    def _known_group(self, topic: str, group: str) -> GroupIndex | None:
        found = self._topics.get(topic)
        return None if found is None else found.groups.get(group)

    @staticmethod
    def _advance(group: GroupIndex, now_ms: int) -> None:
        """Move the group's delayed positions whose time has come to its ready heap.

        They enter the heap in position order at `now_ms` (the wheel hands back keys only).
        """
        due = group.timers.advance(now_ms)
        if due:
            visible_at = group.timers.now_ms
            for pos in sorted(due):
                group.push_ready(visible_at, pos, None)
            group.wake()

    def _absorb(
        self,
        group: GroupIndex,
        metas: Sequence[rd.Meta],
        now_ms: int,
        exclude_keys: frozenset[str] = frozenset(),
    ) -> list[UnackedRow]:
        """Place scanned, not handed out messages (delayed or visible); return their rows."""
        rows: list[UnackedRow] = []
        for meta in metas:
            if meta.deliver_at_ms > now_ms:
                group.timers.schedule(meta.deliver_at_ms, meta.pos)
            elif meta.key in exclude_keys:
                group.hold((meta.deliver_at_ms, meta.pos, meta.key), meta.key)
            else:
                group.push_ready(meta.deliver_at_ms, meta.pos, meta.key)
            rows.append((group.gid, meta.pos, meta.deliver_at_ms, meta.attempt, meta.retries))
        return rows

    def _write_scanned(
        self, writer: GroupCommitWriter, group: GroupIndex, rows: list[UnackedRow]
    ) -> None:
        """Persist scanned positions and the cursor; not awaited (leases are not durable)."""
        cursor = (group.gid, group.topic.topic_id, group.name, group.cursor)
        writer.submit_nowait(writes.scanned(rows, cursor))

    def _id_prefix(self, now_ms: int) -> str:
        """The first 20 of a new message id's 32 hex chars: publish ms and this open's random
        tag; `_new_id` adds a counter. Time-ordered within a store, unique across opens (the
        tag) without a random draw per id."""
        return f"{now_ms & 0xFFFFFFFFFFFF:012x}{self._id_tag}"

    def _new_id(self, prefix: str) -> str:
        self._id_seq += 1
        return f"{prefix}{self._id_seq & 0xFFFFFFFFFFFF:012x}"

    def _lease_token(self, group: GroupIndex, pos: int) -> str:
        """A new lease token for `pos`, recorded as the group's lease of it."""
        self._seq += 1
        token = f"{self._session}.{self._seq}"
        group.leased[pos] = token
        return token

    def _lease(self, group: GroupIndex, row: rd.Row) -> StoredMessage:
        return self._stored(group, row, self._lease_token(group, row.pos))

    @staticmethod
    def _stored(group: GroupIndex, row: rd.Row, token: str) -> StoredMessage:
        return StoredMessage(
            lease=Lease(group.topic.name, group.name, row.pos, token),
            message_id=row.message_id,
            topic=group.topic.name,
            body=row.body,
            properties=_props(row.props),
            key=row.key,
            tag=row.tag,
            publish_ms=row.publish_ms,
            deliver_at_ms=row.deliver_at_ms,
            attempt=row.attempt,
            retries=row.retries,
        )

    # ----------------------------------------------------------------- verbs

    async def publish(self, topic: str, messages: Sequence[OutMessage]) -> list[str]:
        writer, _ = self._ready()
        if not messages:
            return []
        index = self._topic(topic)
        now_ms = self._clock()
        base = schema.topic_base(index.topic_id)
        ids: list[str] = []
        rows: list[MessageRow] = []
        entries: list[Entry] = []
        first = index.next_pos
        rowid = base + first
        size = 0  # what the tail counts: bodies, keys, tags and properties
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
            if properties:
                props = _props_json(properties)
                size += len(props) + PROPERTY_OVERHEAD * (len(properties) + 1)
            else:
                props = "{}"
            size += len(body) + len(key) + len(tag)
            rows.append(
                (rowid, message_id, key, tag, body, props, now_ms, deliver_at, attempt, retries)
            )
            rowid += 1
            entries.append(
                (message_id, key, tag, body, properties, now_ms, deliver_at, attempt, retries)
            )
        index.next_pos = end = first + len(rows)
        self._tail.add(index, first, entries, size)
        topic_row = None if index.persisted else (index.topic_id, index.name)

        def committed() -> None:
            index.persisted = True
            TailCache.committed(index, end)
            for group in index.groups.values():
                group.wake()

        await _committed(writer.submit(writes.append(topic_row, rows)), committed)
        return ids

    async def fetch(
        self,
        topic: str,
        group: str,
        max_messages: int,
        now_ms: int,
        *,
        exclude_keys: frozenset[str] = frozenset(),
    ) -> list[StoredMessage]:
        writer, reader = self._ready()
        if max_messages <= 0:
            return []
        if now_ms >> 63:  # negative or beyond SQLite's INTEGER
            guard.count("now_ms", now_ms)
        index = self._topic(topic)
        state = self._group(index, group)
        generation = self._generation
        async with state.lock:
            state.dirty = False
            self._advance(state, now_ms)
            state.unhold(exclude_keys)
            candidates: list[ReadyEntry] = []
            examined = 0
            while state.ready and len(candidates) < max_messages and examined < EXAMINE_CAP:
                entry = heapq.heappop(state.ready)
                examined += 1
                if entry[2] is not None and entry[2] in exclude_keys:
                    state.hold(entry, entry[2])
                else:
                    candidates.append(entry)
            # Older visible entries not looked at yet go first: scan only once the heap is empty.
            need = 0 if state.ready else max_messages - len(candidates)
            if not candidates and TailCache.covers(index, state.cursor):
                return self._fetch_tail(writer, state, need, now_ms, exclude_keys)
            args = (
                index.topic_id,
                state.gid,
                [entry[1] for entry in candidates],
                state.cursor,
                index.next_pos,
                need,
                now_ms,
                exclude_keys,
                SCAN_CAP,
            )
            try:
                scan = await reader.run(lambda conn: rd.scan(conn, *args))
            except BaseException:
                for entry in candidates:
                    heapq.heappush(state.ready, entry)
                raise
            if generation != self._generation or self._failure is not None:
                # The store failed meanwhile: this index is gone, its leases would be void.
                raise Unavailable("embedded store failed during the fetch")
            out: list[StoredMessage] = []
            for visible_at, pos, _ in candidates:
                row = scan.rows.get(pos)
                if row is None:
                    continue
                if row.key in exclude_keys:
                    state.hold((visible_at, pos, row.key), row.key)
                    state.dirty = True
                    continue
                out.append(self._lease(state, row))
            if scan.taken or scan.passed:
                rows = self._absorb(state, scan.passed, now_ms, exclude_keys)
                for meta in scan.taken:
                    out.append(self._lease(state, scan.rows[meta.pos]))
                    rows.append(
                        (state.gid, meta.pos, meta.deliver_at_ms, meta.attempt, meta.retries)
                    )
                state.cursor = scan.next_pos
                self._write_scanned(writer, state, rows)
            if scan.more or state.ready or len(out) >= max_messages:
                state.dirty = True
            return out

    def _fetch_tail(
        self,
        writer: GroupCommitWriter,
        state: GroupIndex,
        need: int,
        now_ms: int,
        exclude_keys: frozenset[str],
    ) -> list[StoredMessage]:
        """`fetch` of not yet scanned positions, all of them in the topic's tail (no SQLite
        read): the same choices as `reader.scan` makes over the message rows."""
        index = state.topic
        tail = index.tail
        cursor = state.cursor
        end = min(index.committed, cursor + SCAN_CAP)
        out: list[StoredMessage] = []
        passed: list[rd.Meta] = []
        rows: list[UnackedRow] = []
        gid = state.gid
        pos = cursor
        while pos < end and len(out) < need:
            entry = tail[pos]
            _, key, _, _, _, _, deliver_at, attempt, retries = entry
            if deliver_at > now_ms or key in exclude_keys:
                passed.append(rd.Meta(pos, key, deliver_at, attempt, retries))
            else:
                out.append(self._lease_entry(state, pos, entry))
                rows.append((gid, pos, deliver_at, attempt, retries))
            pos += 1
        if pos > cursor:
            rows.extend(self._absorb(state, passed, now_ms, exclude_keys))
            state.cursor = pos
            self._write_scanned(writer, state, rows)
        if len(out) >= need or pos - cursor >= SCAN_CAP or state.ready:
            state.dirty = True
        return out

    def _lease_entry(self, group: GroupIndex, pos: int, entry: Entry) -> StoredMessage:
        token = self._lease_token(group, pos)
        message_id, key, tag, body, properties, publish_ms, deliver_at, attempt, retries = entry
        return StoredMessage(
            lease=Lease(group.topic.name, group.name, pos, token),
            message_id=message_id,
            topic=group.topic.name,
            body=body,
            properties=properties,
            key=key,
            tag=tag,
            publish_ms=publish_ms,
            deliver_at_ms=deliver_at,
            attempt=attempt,
            retries=retries,
        )

    async def wait(self, topic: str, group: str, timeout_s: float) -> None:
        """See `Backend.wait`; delayed positions are due by the store's clock.

        Visibility itself is decided by `fetch` at the caller's `now_ms`, so the store's clock
        should be the caller's clock (pass the engine's clock to the constructor).
        """
        self._ready()
        state = self._group(self._topic(topic), group)
        if state.dirty:
            return
        timeout = max(0.0, timeout_s)
        deadline = state.timers.next_deadline_ms()
        if deadline is not None:
            until_due_ms = deadline - self._clock()
            if until_due_ms <= 0:
                return
            timeout = min(timeout, until_due_ms / 1000)
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        state.waiters.append(waiter)
        try:
            await asyncio.wait({waiter}, timeout=timeout)
        finally:
            if waiter in state.waiters:
                state.waiters.remove(waiter)
            waiter.cancel()

    async def ack(self, leases: Sequence[Lease]) -> None:
        writer, _ = self._ready()
        rows: list[tuple[int, int]] = []
        for lease in leases:
            state = self._known_group(lease.topic, lease.group)
            if state is None or not lease.token:
                continue
            if state.leased.get(lease.position) != lease.token:
                continue
            del state.leased[lease.position]
            rows.append((state.gid, lease.position))
        if rows:
            await writer.submit(writes.settled(rows))

    async def release(self, releases: Sequence[Release]) -> None:
        writer, _ = self._ready()
        for item in releases:
            if (item.visible_at_ms | item.attempt | item.retries) >> 63:
                guard.count("visible_at_ms", item.visible_at_ms)
                guard.count("attempt", item.attempt)
                guard.count("retries", item.retries)
        rows: list[UnackedRow] = []
        placed: list[tuple[GroupIndex, int, int, str]] = []
        for item in releases:
            lease = item.lease
            state = self._known_group(lease.topic, lease.group)
            if state is None or not lease.token:
                continue
            if state.leased.get(lease.position) != lease.token:
                continue
            del state.leased[lease.position]
            state.releasing[lease.position] = lease.token
            rows.append((state.gid, lease.position, item.visible_at_ms, item.attempt, item.retries))
            placed.append((state, lease.position, item.visible_at_ms, lease.token))
        if not rows:
            return

        def committed() -> None:
            for state, pos, visible_at, token in placed:
                if state.releasing.get(pos) != token:
                    continue
                del state.releasing[pos]
                if visible_at > state.timers.now_ms:
                    state.timers.schedule(visible_at, pos)
                else:
                    state.push_ready(visible_at, pos, None)
                state.wake()

        await _committed(writer.submit(writes.released(rows)), committed)

    async def stats(self, topic: str, group: str, now_ms: int) -> TopicStats:
        _, reader = self._ready()
        guard.count("now_ms", now_ms)
        index = self._topic(topic)
        state = self._group(index, group)
        async with state.lock:
            self._advance(state, now_ms)
            cursor, until, topic_id = state.cursor, index.next_pos, index.topic_id
            visible = state.visible()
            first_ready = min((entry[1] for entry in visible), default=None)

            def query(conn: sqlite3.Connection) -> tuple[rd.Backlog, int | None]:
                backlog = rd.backlog(conn, topic_id, cursor, until, now_ms)
                firsts = [p for p in (first_ready, backlog.first_visible_pos) if p is not None]
                oldest = rd.publish_ms_of(conn, topic_id, min(firsts)) if firsts else None
                return backlog, oldest

            backlog, oldest = await reader.run(query)
            next_times = []
            next_timer = state.timers.next_deadline_ms()
            if next_timer is not None:
                next_times.append(next_timer)
            if backlog.next_visible_ms is not None:
                next_times.append(backlog.next_visible_ms)
            return TopicStats(
                ready=len(visible) + backlog.visible,
                delayed=len(state.timers) + backlog.delayed,
                leased=len(state.leased) + len(state.releasing),
                oldest_ready_ms=oldest,
                next_visible_ms=min(next_times, default=None),
            )

    async def peek(
        self, topic: str, group: str, limit: int, after_position: int = -1
    ) -> list[StoredMessage]:
        writer, reader = self._ready()
        guard.position("after_position", after_position)
        if limit <= 0:
            return []
        guard.count("limit", limit)
        index = self._topic(topic)
        state = self._group(index, group)
        async with state.lock:
            await writer.submit(writes.BARRIER)
            start = max(state.cursor, after_position + 1)
            until, topic_id, gid = index.next_pos, index.topic_id, state.gid

            def query(conn: sqlite3.Connection) -> dict[int, rd.Row]:
                seen = rd.unacked_page(conn, gid, after_position, limit)
                fresh = [m.pos for m in rd.scan_meta(conn, topic_id, start, until, limit)]
                chosen = sorted(set(seen) | set(fresh))[:limit]
                return rd.load_rows(conn, topic_id, gid, chosen, seen)

            rows = await reader.run(query)
        return [self._stored(state, rows[pos], "") for pos in sorted(rows)]

    async def remove(self, leases: Sequence[Lease]) -> int:
        writer, reader = self._ready()
        wanted: dict[tuple[str, str], set[int]] = {}
        for lease in leases:
            wanted.setdefault((lease.topic, lease.group), set()).add(lease.position)
        removed = 0
        for (topic, group), positions in wanted.items():
            index = self._topics.get(topic)
            if index is None:
                continue
            state = self._group(index, group)
            async with state.lock:
                removed += await self._remove(writer, reader, state, positions)
        return removed

    async def _remove(
        self, writer: GroupCommitWriter, reader: rd.Reader, state: GroupIndex, positions: set[int]
    ) -> int:
        index = state.topic
        top = min(max(positions) + 1, index.next_pos)
        if top > state.cursor:
            args = (index.topic_id, state.cursor, top, -1)
            metas = await reader.run(lambda conn: rd.scan_meta(conn, *args))
            if metas:
                rows = self._absorb(state, metas, state.timers.now_ms)
                state.cursor = metas[-1].pos + 1
                self._write_scanned(writer, state, rows)
        gone: set[int] = set()
        for pos in positions:
            handed_out = state.leased.pop(pos, "") or state.releasing.pop(pos, "")
            if handed_out or state.timers.cancel(pos):
                gone.add(pos)
        gone |= state.drop_visible(positions - gone)
        if not gone:
            return 0
        deletes = [(state.gid, pos) for pos in gone]
        await writer.submit(writes.settled(deletes))
        return len(gone)

    async def purge(self, topic: str, group: str) -> int:
        writer, reader = self._ready()
        index = self._topics.get(topic)
        if index is None:
            return 0
        state = self._group(index, group)
        async with state.lock:
            until, cursor, topic_id = index.next_pos, state.cursor, index.topic_id
            await writer.submit(writes.BARRIER)
            gid = state.gid

            def count(conn: sqlite3.Connection) -> int:
                return rd.count_unacked(conn, gid) + rd.count_from(conn, topic_id, cursor, until)

            removed = await reader.run(count)
            state.timers = TimerWheel(state.timers.now_ms)
            state.ready.clear()
            state.held.clear()
            state.leased.clear()
            state.releasing.clear()
            state.cursor = until
            await writer.submit(writes.purged((topic_id, index.name), gid, state.name, until))
            return removed

    async def drop_group(self, topic: str, group: str) -> bool:
        writer, _ = self._ready()
        state = self._known_group(topic, group)
        if state is None:
            return False
        generation = self._generation
        async with state.lock:
            index = state.topic
            if index.groups.get(group) is not state or generation != self._generation:
                return False
            del index.groups[group]
            self._groups.pop(state.gid, None)
            state.leased.clear()
            state.releasing.clear()
            state.wake()
            await writer.submit(writes.dropped(state.gid))
        return True

    async def trim(self) -> int:
        """Delete the messages of every topic that all of its groups have acked; return how
        many positions were deleted. Topics nobody consumes keep everything (a group created
        later starts at the earliest message still kept)."""
        writer, _ = self._ready()
        deleted = 0
        for index in list(self._topics.values()):
            if not index.groups or not index.persisted:
                continue
            below = min(group.cursor for group in index.groups.values())
            first = index.first_pos
            if below <= first:
                continue
            gids = [group.gid for group in index.groups.values()]
            stop = await writer.submit(
                writes.trimmed(index.topic_id, gids, first, below, TRIM_ROWS)
            )
            if isinstance(stop, int) and stop > index.first_pos:
                deleted += stop - index.first_pos
                index.first_pos = stop
        return deleted

    async def _trim_loop(self) -> None:
        while True:
            await asyncio.sleep(self._trim_interval_s)
            try:
                await self.trim()
            except GatewayError as exc:
                _log.warning("embedded store trim failed: %s", exc.message)

    async def topics(self) -> list[str]:
        self._ready()
        return sorted(name for name, index in self._topics.items() if index.persisted)


async def _committed(future: asyncio.Future[object], then: Callable[[], None]) -> None:
    """Await a write; run `then` once it committed, even if the caller is cancelled meanwhile."""

    def done(finished: asyncio.Future[object]) -> None:
        if not finished.cancelled() and finished.exception() is None:
            then()

    future.add_done_callback(done)
    await asyncio.shield(future)
