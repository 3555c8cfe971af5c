"""Paging a group's delayed positions in from disk, by due time.

A group whose positions do not all fit in memory keeps the rest on disk only, from its
`spill_at` key on (`gateway.store.index`, "Paging"). The fetch calls `page_in` (under the group's
lock) when that group holds fewer than `PAGE_LOW` positions in memory, or when the first position
on disk is due and few are ready: the next `PAGE` rows by (visible_at_ms, pos) are read through
the partial index `unacked_due` and go into the wheel, and `spill_at` moves past them (or is
cleared when the page comes back short: nothing is left on disk only).

Rows the read returns may be out of date by the time it answers: the positions acked, released
or removed meanwhile are skipped (`GroupIndex.touched`), as are those handed out; the positions
that went to disk only meanwhile (`GroupIndex.spilled`) are placed from what the store knows,
whether the read saw them or not. A barrier on the writer first makes every row queued before
it readable.
"""

from __future__ import annotations

from gateway.errors import Unavailable
from gateway.store import index, writes
from gateway.store import reader as rd
from gateway.store.catalog import Catalog
from gateway.store.index import GroupIndex
from gateway.store.supervisor import Supervisor


def wanted(state: GroupIndex, now_ms: int) -> bool:
    """Whether the fetch should page in first."""
    spill = state.spill_at
    if spill is None:
        return False
    ready = len(state.ready)
    low = index.PAGE_LOW
    return ready + len(state.timers) < low or (now_ms >= spill[0] and ready < low)


async def page_in(catalog: Catalog, supervisor: Supervisor, state: GroupIndex) -> None:
    """Read the next page of the group's positions on disk into its wheel (the caller holds
    the group's lock and advances the wheel afterwards)."""
    spill = state.spill_at
    if spill is None or state.paging is not None:
        return
    writer, reader = supervisor.ready()
    generation = catalog.generation
    gid = state.gid
    page = index.PAGE
    touched: set[int] = set()
    state.paging = touched
    state.arrivals = []
    try:
        await writer.submit(writes.BARRIER)
        rows = await reader.run(lambda conn: rd.due_page(conn, gid, spill, page))
        if generation != catalog.generation or supervisor.failure is not None:
            raise Unavailable("embedded store failed during the fetch")
        after = (rows[-1][0], rows[-1][1] + 1) if len(rows) >= page else None
        timers, leased, releasing = state.timers, state.leased, state.releasing
        for visible_at, pos in rows:
            if pos not in touched and pos not in leased and pos not in releasing:
                timers.schedule(visible_at, pos)
        for visible_at, pos in state.arrivals:
            if after is None or (visible_at, pos) < after:
                timers.schedule(visible_at, pos)
        state.spill_at = after
    finally:
        state.paging = None
        state.arrivals = []
    state.bound()


async def counts(
    supervisor: Supervisor, state: GroupIndex, now_ms: int
) -> tuple[int, int, int | None]:
    """(visible, delayed, earliest delayed visible-at) of the group's positions on disk only."""
    spill = state.spill_at
    if spill is None:
        return 0, 0, None
    writer, reader = supervisor.ready()
    await writer.submit(writes.BARRIER)
    gid = state.gid
    return await reader.run(lambda conn: rd.due_counts(conn, gid, spill, now_ms))


async def on_disk(supervisor: Supervisor, state: GroupIndex, positions: set[int]) -> set[int]:
    """Those of `positions` that are on disk only (not handed out, at or above `spill_at`)."""
    spill = state.spill_at
    if spill is None or not positions:
        return set()
    writer, reader = supervisor.ready()
    await writer.submit(writes.BARRIER)
    gid = state.gid
    wanted_positions = sorted(positions)
    rows = await reader.run(lambda conn: rd.due_of(conn, gid, wanted_positions))
    spill = state.spill_at
    if spill is None:
        return set()
    return {
        pos for visible_at, pos in rows
        if (visible_at, pos) >= spill and pos not in state.leased and pos not in state.releasing
    }
