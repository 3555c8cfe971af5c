"""Writes over several topics that commit at once: `move` (take messages away from a group and
append their copies elsewhere; `migrate rename`) and `store_once` (append copies unless a ledger
already records them; `migrate copy` into this store).

Both validate everything first, change the in-memory index only after that, and queue their
whole change as one write (`writes.together`), which the writer process applies in one
transaction: after a crash either every part of it is there or none is. A failed commit makes
the store rebuild its index from the tables, as any failed write does.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import Callable, Sequence
from typing import Protocol

from gateway.backend.base import KeyedCopy, Move, OutMessage
from gateway.errors import Unavailable
from gateway.store import guard, writes
from gateway.store import reader as rd
from gateway.store.catalog import Catalog, scan_through
from gateway.store.index import GroupIndex
from gateway.store.writer import GroupCommitWriter

MAX_LEDGER_CHARS = 1024
"""Longest ledger name or key."""


class Stager(Protocol):
    """The store's publish path, split: `EmbeddedStore.stage`."""

    def stage(
        self, topic: str, messages: Sequence[OutMessage]
    ) -> tuple[writes.Write, Callable[[], None], list[str]]: ...


def _check(topic: str, message: OutMessage, catalog: Catalog) -> None:
    catalog.topic(topic)  # a bad name is refused here, before anything changes
    guard.check_message(message)
    if type(message.body) is not bytes:
        guard.body(message.body)


def _stage_all(
    store: Stager, copies: Sequence[tuple[str, OutMessage]]
) -> tuple[list[writes.Write], list[Callable[[], None]]]:
    by_topic: dict[str, list[OutMessage]] = {}
    for topic, message in copies:
        by_topic.setdefault(topic, []).append(message)
    parts: list[writes.Write] = []
    then: list[Callable[[], None]] = []
    for topic, messages in by_topic.items():
        write, committed, _ = store.stage(topic, messages)
        parts.append(write)
        then.append(committed)
    return parts, then


async def _commit(
    writer: GroupCommitWriter, parts: list[writes.Write], then: list[Callable[[], None]]
) -> None:
    future = writer.submit(writes.together(parts))

    def done(finished: asyncio.Future[object]) -> None:
        if not finished.cancelled() and finished.exception() is None:
            for step in then:
                step()

    future.add_done_callback(done)
    await asyncio.shield(future)


async def _take(
    writer: GroupCommitWriter, reader: rd.Reader, state: GroupIndex, positions: set[int]
) -> set[int]:
    """Take `positions` out of the group's index unless they are handed out (leased): the
    positions taken. Nothing is written yet."""
    await scan_through(writer, reader, state, positions)
    free = {pos for pos in positions if pos not in state.leased and pos not in state.releasing}
    taken = {pos for pos in free if state.timers.cancel(pos)}
    return taken | state.drop_visible(free - taken)


async def move(
    store: Stager, catalog: Catalog, writer: GroupCommitWriter, reader: rd.Reader,
    items: Sequence[Move],
) -> int:
    """See `Backend.move`. Messages handed out to a consumer (leased) are not moved; neither
    are those already gone. Returns how many were moved."""
    for item in items:
        _check(item.topic, item.message, catalog)
    wanted: dict[tuple[str, str], dict[int, Move]] = {}
    for item in items:
        lease = item.lease
        wanted.setdefault((lease.topic, lease.group), {})[lease.position] = item
    states: list[tuple[GroupIndex, dict[int, Move]]] = []
    for (topic, group), by_pos in wanted.items():
        known = catalog.topics.get(topic)
        if known is not None:
            states.append((catalog.group(known, group), by_pos))
    states.sort(key=lambda pair: pair[0].gid)  # one lock order: no deadlock between two moves
    async with contextlib.AsyncExitStack() as stack:
        for state, _ in states:
            await stack.enter_async_context(state.lock)
        generation = catalog.generation
        deletes: list[tuple[int, int]] = []
        copies: list[tuple[str, OutMessage]] = []
        for state, by_pos in states:
            taken = await _take(writer, reader, state, set(by_pos))
            if generation != catalog.generation:  # the store recovered meanwhile: start over
                raise Unavailable("the store reloaded its index during the move: nothing was "
                                  "moved; run it again")
            for pos in sorted(taken):
                deletes.append((state.gid, pos))
                copies.append((by_pos[pos].topic, by_pos[pos].message))
        if not deletes:
            return 0
        parts, then = _stage_all(store, copies)
        await _commit(writer, [writes.settled(deletes), *parts], then)
    return len(deletes)


async def store_once(
    store: Stager, writer: GroupCommitWriter, reader: rd.Reader, lock: asyncio.Lock,
    catalog: Catalog, ledger: str, copies: Sequence[KeyedCopy], earlier: Sequence[str] = (),
) -> list[bool]:
    """See `Backend.store_once`. `lock` serialises ledger writes (a key looked up, then
    written, by one caller at a time)."""
    _ledger_text("ledger", ledger)
    for copy in copies:
        _ledger_text("key", copy.key)
        _check(copy.topic, copy.message, catalog)
    for name in earlier:
        _ledger_text("ledger", name)
    async with lock:
        keys = [copy.key for copy in copies]

        def recorded(conn: sqlite3.Connection) -> set[str]:
            found: set[str] = set()
            for name in (ledger, *earlier):
                found |= rd.copied_keys(conn, name, keys)
            return found

        known = await reader.run(recorded)
        stored: list[bool] = []
        fresh: list[KeyedCopy] = []
        for copy in copies:
            new = copy.first_delivery or copy.key not in known
            stored.append(new)
            if new:
                known.add(copy.key)
                fresh.append(copy)
        if fresh:
            parts, then = _stage_all(store, [(c.topic, c.message) for c in fresh])
            await _commit(writer, [*parts, writes.copied(ledger, [c.key for c in fresh])], then)
    return stored


def _ledger_text(field: str, value: str) -> None:
    guard.text(field, value)
    if not value or len(value) > MAX_LEDGER_CHARS:
        raise guard.refuse(field, value, f"1..{MAX_LEDGER_CHARS} characters")
