"""Admin verbs that move a group's messages: rename its destinations from one naming scheme to
another (`migrate rename`), and export, remove and import messages (`migrate copy`).

`MoveVerbs` is part of `gateway.engine.admin.GroupAdmin`; what to move and how a copy looks is
`gateway.migrate.rename`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from gateway.backend import Backend, KeyedCopy, Lease, Move, OutMessage, StoredMessage
from gateway.core.naming import NamingScheme
from gateway.core.properties import (
    BORN_MS,
    DEAD_AT,
    DEAD_REASON,
    ORIGIN_GROUP,
    ORIGIN_TOPIC,
    RESERVED_PREFIX,
    made_by,
)
from gateway.engine.admin_scan import PEEK_CHUNK, pages
from gateway.engine.api import Copy, ExportPage, ImportResult
from gateway.engine.port import EngineQueries, Unsettled
from gateway.errors import FailedPrecondition, InvalidArgument
from gateway.limits import check_deliver_at
from gateway.migrate import rename as rn

if TYPE_CHECKING:
    from collections.abc import Coroutine
    from typing import Any

READY = "ready"
RETRY = "retry"
DEAD_LETTER = "dead-letter"
PARTS = (READY, RETRY, DEAD_LETTER)
KEPT_RESERVED = frozenset({DEAD_REASON, DEAD_AT, BORN_MS})
"""Reserved properties an imported copy keeps (a dead letter's reason and time, the first
publish time)."""


class MoveVerbs:
    """Rename, export, remove exported, import (a mixin of `GroupAdmin`)."""

    _backend: Backend
    _engine: EngineQueries
    _now_ms: Callable[[], int]

    if TYPE_CHECKING:
        naming_of: Callable[[str, str], Coroutine[Any, Any, NamingScheme]]

    def _no_consumers(self, topic: str, group: str, scheme: NamingScheme | None = None) -> None:
        state = self._engine.group_state(topic, group)
        if state is None or not state.consumers:
            return
        if scheme is not None and state.policy.naming.name != scheme.name:
            return
        using = f" under naming {scheme.name}" if scheme is not None else ""
        raise FailedPrecondition(
            f"group {group!r} of topic {topic!r} has {state.consumers} consumer(s) open"
            f"{using}; stop them first")

    def _none_in_flight(self, topic: str, group: str, verb: str = "export") -> None:
        """Refuse while deliveries of the group are in flight to pull consumers (push ones are
        refused above): each would be processed twice, there and where it is copied to."""
        flying = sum(1 for u in self._engine.unsettled(topic, group) if not u.held)
        if flying:
            raise FailedPrecondition(
                f"group {group!r} of topic {topic!r} has {flying} "
                f"{'delivery' if flying == 1 else 'deliveries'} in flight; stop its consumers "
                f"and {verb} once they are settled or their time to settle has passed")

    # ----------------------------------------------------------------- rename
    async def rename(
        self, topic: str, group: str, from_naming: str, to_naming: str, dry_run: bool = False,
    ) -> rn.RenameResult:
        """Move the group's waiting retries and dead letters of `topic` from one scheme's
        destinations to another's (`gateway.migrate.rename`)."""
        registry = self._engine.registry
        old, new = registry.scheme(from_naming), registry.scheme(to_naming)
        self._no_consumers(topic, group, old)
        names = rn.parts(topic, group, old, new)
        renames = {n.old: n.new for n in names}
        found: dict[str, list[StoredMessage]] = {n.part: [] for n in names}
        more = False
        total = 0
        held = {u.message_id for u in self._engine.unsettled(topic, group)}
        left = 0
        for part in names:
            async for chunk in pages(self._backend, part.old, group):
                for m in chunk:
                    if not rn.belongs(m, topic, group, part):
                        continue
                    if m.message_id in held:
                        left += 1
                        continue
                    if total == rn.MAX_RENAME:
                        more = True
                        break
                    total += 1
                    found[part.part].append(m)
                if more:
                    break
        moved = {part: len(messages) for part, messages in found.items()}
        if not dry_run and total:
            moves: list[Move] = []
            removals: list[Lease] = []
            for part in names:
                present = await self._present(part.new, topic, group)
                for m in found[part.part]:
                    if m.message_id in present:
                        removals.append(m.lease)  # copied by an earlier, interrupted run
                    else:
                        moves.append(Move(m.lease, part.new, rn.copy_of(m, renames, topic,
                                                                    group)))
            done = await self._backend.move(moves) if moves else 0
            if removals:
                done += await self._backend.remove(removals)
            left += total - done
            moved = _shrink(moved, total - done)
        by = {n.part: n for n in names}
        retry, dead = by.get(rn.RETRIES), by.get(rn.DEAD_LETTERS)
        return rn.RenameResult(
            retry_from=retry.old if retry else "", retry_to=retry.new if retry else "",
            dead_letter_from=dead.old if dead else "", dead_letter_to=dead.new if dead else "",
            retries=moved.get(rn.RETRIES, 0), dead_letters=moved.get(rn.DEAD_LETTERS, 0),
            left=left, more=more, dry_run=dry_run,
        )

    async def _present(self, name: str, topic: str, group: str) -> set[str]:
        """Ids of the group's messages of `topic` at `name`: on a back end that moves atomically
        none can be a copy of a message still at its old name, so nothing is read. A name
        shared by groups or topics holds others' copies of the same message too: they are not
        this group's, and taking them for its copies lost its own (removed, never written)."""
        if self._backend.atomic_moves:
            return set()
        present: set[str] = set()
        async for chunk in pages(self._backend, name, group):
            present.update(m.message_id for m in chunk if made_by(m.properties, topic, group))
        return present

    # ----------------------------------------------------------------- copy: the source side
    def _removable(self) -> None:
        """Refuse to remove exported messages on a back end whose listing positions name no
        message (a broker's: they number one listing only): it removed nothing, and a copy
        from it left every message at the source too. Exporting stays a listing there."""
        if not self._backend.removes_by_position:
            name = self._backend.name
            raise FailedPrecondition(
                f"the {name} back end cannot remove exported messages by position: copy from "
                f"the broker directly (`gateway migrate copy --from` a {name} URL)")

    async def _part_topic(self, topic: str, group: str, part: str, naming: str = "") -> str:
        # An unknown scheme is refused for every part, ready included (it has no use there).
        chosen = self._engine.registry.scheme(naming) if naming else None
        if part == READY:
            return topic
        scheme = chosen or await self.naming_of(topic, group)
        if part == RETRY:
            return scheme.retry_topic(topic, group)
        if part == DEAD_LETTER:
            return scheme.dead_letter_topic(topic, group)
        raise InvalidArgument("part", part, ", ".join(PARTS))

    async def export(
        self, topic: str, group: str, part: str, after: int, limit: int, naming: str = "",
    ) -> ExportPage:
        """Up to `limit` of the group's messages of one part after position `after`, not
        taken: ready (the topic itself: ready, delayed and released messages), retry (its
        waiting retries of this topic) or dead-letter."""
        if not 1 <= limit <= 1000:
            raise InvalidArgument("limit", limit, "1..1000")
        self._no_consumers(topic, group)
        self._none_in_flight(topic, group)
        source = await self._part_topic(topic, group, part, naming)
        if part != READY and source == topic:
            return ExportPage(source, (), -1)
        taken: list[StoredMessage] = []
        held = self._held(topic, group) if part == READY else {}
        last, more = after, False
        async for chunk in pages(self._backend, source, group, after):
            for m in chunk:
                if len(taken) == limit:
                    more = True
                    break
                last = m.lease.position
                if part == READY or made_by(m.properties, topic, group):
                    waiting = held.get(m.lease.position)
                    taken.append(m if waiting is None else dataclasses.replace(
                        m, deliver_at_ms=max(m.deliver_at_ms, waiting.due_ms),
                        attempt=waiting.attempt, retries=waiting.retries))
            if more:
                break
        return ExportPage(source, tuple(taken), last if more else -1)

    def _held(self, topic: str, group: str) -> dict[int, Unsettled]:
        """The group's ordered retries the engine holds for their in-place retry, by position:
        the back end lists them as the plain messages it keeps (leased), without their due time
        and counts, which the engine alone knows."""
        return {u.position: u for u in self._engine.unsettled(topic, group) if u.held}

    async def remove_exported(
        self, topic: str, group: str, part: str, positions: Sequence[int], naming: str = "",
    ) -> int:
        """Remove exported messages by position, once their copies are stored elsewhere. A
        position must hold a message of this part of `topic`: a retry or dead-letter
        destination may be shared by the group's topics (`%DLQ%{group}`), and the position of
        another topic's message there would remove that message (refused, nothing removed)."""
        self._removable()
        # As for export: a consumer that took an exported message after the export would
        # process it here while its copy is processed where it went (and settle what is gone).
        self._no_consumers(topic, group)
        self._none_in_flight(topic, group, "remove")
        source = await self._part_topic(topic, group, part, naming)
        if part != READY:
            await self._check_owned(topic, group, part, source, positions)
        else:
            # An ordered retry the engine holds goes from the engine too: else it stayed a
            # waiting retry there (its key blocked) and came again, removed, when due.
            self._engine.drop_held(topic, group, positions)
        return await self._backend.remove([Lease(source, group, p) for p in positions])

    async def _check_owned(self, topic: str, group: str, part: str, source: str,
                           positions: Sequence[int]) -> None:
        """Refuse a position that holds a message of another topic (or, where the group
        keeps its retries in the topic itself, a ready message); positions no message holds
        are left to `remove`, which skips them. Reads from each wanted position on, a chunk at
        a time, jumping over the gaps between wanted positions."""
        wanted = sorted(set(positions))
        origin_of: dict[int, tuple[str, str]] = {}
        i = 0
        while i < len(wanted):
            page = await self._backend.peek(source, group, PEEK_CHUNK, wanted[i] - 1)
            for m in page:
                origin_of[m.lease.position] = (m.properties.get(ORIGIN_TOPIC, topic),
                                               m.properties.get(ORIGIN_GROUP, group))
            if len(page) < PEEK_CHUNK:
                break
            last = page[-1].lease.position
            while i < len(wanted) and wanted[i] <= last:
                i += 1
        for index, position in enumerate(positions):
            found = origin_of.get(position)
            if found is None:
                continue
            origin, by = found
            if source == topic or origin != topic or by != group:
                holds = ("a message of the topic itself (the group keeps its retries there)"
                         if source == topic else f"a message of topic {origin!r}"
                         if origin != topic else f"a message of group {by!r}")
                raise InvalidArgument(
                    f"positions[{index}]", position,
                    f"a position ExportMessages gave for the {part} part of topic {topic!r} "
                    f"of group {group!r}; it holds {holds}: nothing was removed")

    # ----------------------------------------------------------------- copy: the destination
    async def import_copies(
        self, topic: str, group: str, ledger: str, naming: str, copies: Sequence[Copy],
        source_names: Sequence[str] = ("", ""), earlier: Sequence[str] = (),
    ) -> ImportResult:
        """Store each copy once (the ledger records its source key in the same transaction; a
        key an `earlier` name of the ledger records counts as stored): ready ones in the topic,
        retries and dead letters in the group's destinations."""
        retry_topic = dead_topic = ""
        chosen = self._engine.registry.scheme(naming) if naming else None  # checked, group or not
        if group:
            scheme = chosen or await self.naming_of(topic, group)
            retry_topic = scheme.retry_topic(topic, group)
            dead_topic = scheme.dead_letter_topic(topic, group)
        renames = {old: new for old, new in zip(source_names, (retry_topic, dead_topic),
                                                strict=True) if old and new}
        keyed: list[KeyedCopy] = []
        now = self._now_ms()
        for i, copy in enumerate(copies):
            check_deliver_at(f"messages[{i}].deliver_at_ms", copy.message.deliver_at_ms, now)
            where = {READY: topic, RETRY: retry_topic, DEAD_LETTER: dead_topic}.get(copy.part)
            if where is None:
                raise InvalidArgument(f"messages[{i}].part", copy.part, ", ".join(PARTS))
            if not where:
                raise InvalidArgument("group", group, "a group, for retries and dead letters")
            keyed.append(KeyedCopy(copy.source_key, where, _imported(copy, topic, group, renames),
                                   copy.first_delivery))
        stored = await self._backend.store_once(ledger, keyed, earlier)
        fresh = sum(stored)
        return ImportResult(fresh, len(stored) - fresh, retry_topic, dead_topic)


def _imported(copy: Copy, topic: str, group: str, renames: dict[str, str]) -> OutMessage:
    m = copy.message
    props = {k: renames.get(v, v) for k, v in m.properties.items()
             if not k.startswith(RESERVED_PREFIX) or k in KEPT_RESERVED}
    if copy.part != READY:
        props[ORIGIN_TOPIC] = topic
        props[ORIGIN_GROUP] = group
    return OutMessage(m.body, props, m.key, m.tag, m.deliver_at_ms, m.message_id, m.attempt,
                      m.retries)


def _shrink(moved: dict[str, int], missing: int) -> dict[str, int]:
    """Counts by part less what was not moved after all (taken off the last parts first)."""
    out = dict(moved)
    for part in reversed(list(out)):
        cut = min(out[part], missing)
        out[part] -= cut
        missing -= cut
    return out
