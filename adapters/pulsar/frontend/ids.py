"""Pulsar message ids (ledgerId, entryId) handed out by the front end.

On a back end that keeps groups' positions (`EnginePort.positions`: the embedded store), a
message's id is its engine message id: the 32 hex digits the store gives (publish time, the
store's tag, a counter: increasing in topic order) are a number below 2^121, split into a
ledger id (the bits above the lowest 63) and an entry id (the lowest 63 bits). Clients read both
as signed 64-bit numbers, so neither may reach 2^63: split into two halves of 64 bits, half of
the stores' tags made every entry id negative to a client, which takes a negative entry id for
"no message" (`hasMessageAvailable` after a seek by time or a start at latest was False). So the
id a send receipt carries, the id of every delivery of the message (its redeliveries too) and the
id a client seeks to are one and the same, across restarts; a batch's receipt carries its first
message's id and message i of the batch is that entry + i, as the client counts. Elsewhere (a
broker's random ids would break the client's ordering of ids), and for a message id of another
shape (one a client chose), a message gets the next entry of a counter under the ledger id of
this front end's start (far below the others) when it is first delivered or receipted, and
keeps it while the front end remembers it (`MAX_OTHER_IDS`).
"""

from __future__ import annotations

import asyncio
import itertools
import re
import time
from collections import OrderedDict
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from adapters.pulsar.frontend.journal import Journal

MessageKey = tuple[int, int]
"""(ledgerId, entryId)."""
_HEX_ID = re.compile(r"[0-9a-f]{32}")
U64 = 2**64
ENTRY_BITS = 63
ENTRY_LIMIT = 2**ENTRY_BITS
"""Entry ids of store ids are below this (clients read entry ids as signed 64-bit numbers)."""
EARLIEST: MessageKey = (U64 - 1, U64 - 1)
"""MessageId.earliest as the clients send it (-1, -1 as uint64)."""
LATEST: MessageKey = (2**63 - 1, 2**63 - 1)
"""MessageId.latest."""
MAX_OTHER_IDS = 100_000
"""Ids of another shape remembered (for acks and redeliveries); the oldest go first."""


def engine_id(key: MessageKey, offset: int = 0) -> str:
    """The engine message id a Pulsar id stands for, or the one `offset` messages after it
    (message `offset` of a batch); "" for an id the front end did not make."""
    ledger, entry = key
    # Not a store id: those start with 48 bits of publish ms (a ledger id of 2^56 or more).
    if ledger >> 56 == 0 or entry >= ENTRY_LIMIT:
        return ""
    value = (ledger << ENTRY_BITS | entry) + offset
    return f"{value:032x}" if value >> 128 == 0 else ""


def store_key(message_id: str) -> MessageKey:
    """The Pulsar id of a store's message id (32 hex digits)."""
    value = int(message_id, 16)
    return value >> ENTRY_BITS, value & (ENTRY_LIMIT - 1)


def publish_ms(message_id: str) -> int:
    """The publish time a store's message id begins with (48 bits of ms)."""
    return int(message_id[:12], 16)


class IdAllocator:
    """Hands out increasing (ledgerId, entryId) pairs."""

    def __init__(self, ledger_id: int | None = None, *, ordered: bool = True) -> None:
        """`ordered`: the engine's message ids increase in topic order (see the module)."""
        self.ordered = ordered
        self.ledger_id = ledger_id if ledger_id is not None else time.time_ns() // 1_000_000
        self._entries = itertools.count()
        self.last_entry = -1
        self._others: OrderedDict[str, MessageKey] = OrderedDict()

    def next_entry(self) -> int:
        """A new entry id under `ledger_id`."""
        self.last_entry = next(self._entries)
        return self.last_entry

    def key(self, message_id: str) -> MessageKey:
        """The Pulsar id of an engine message id (see the module docstring)."""
        if self.ordered and _HEX_ID.fullmatch(message_id):
            return store_key(message_id)
        known = self._others.get(message_id)
        if known is None:
            known = self._others[message_id] = (self.ledger_id, self.next_entry())
            if len(self._others) > MAX_OTHER_IDS:
                self._others.popitem(last=False)
        return known


MAX_PRODUCER_NAMES = 100_000
"""Most (topic, producer name) pairs whose sequence ids are remembered; beyond it the pairs
unused longest, with no producer attached, are forgotten first."""


class DedupRegistry:
    """Producer names per topic: which are in use, and the highest sequence id each stored
    (Pulsar's message deduplication).

    A producer that reconnects resends what it has no receipt for; a resend whose sequence id is
    not above the stored one is answered with a receipt and not stored again. Each topic has its
    own sequence per producer name, and a name is used by one producer of a topic at a time
    (`attach`), so two producers never share a sequence and every receipt means stored. At most
    `limit` pairs; with a `journal` (`adapters.pulsar.frontend.journal`) the ids survive
    restarts, else they last as long as the front end.

    A store whose publish failed in a way that may have stored it all the same (the store's
    writer lost mid-commit: its send was refused, or never answered) puts its topic in doubt
    (`doubt`): before the topic's next store, or its next producer, `dedup_recovery.settle`
    raises the ids from the messages stored after it, so the client's resend is answered, not
    stored twice. Until then the store's journal token stays open (the journal's covered id
    stays below its messages, for the scan at the next start).
    """

    def __init__(self, limit: int = MAX_PRODUCER_NAMES, journal: Journal | None = None) -> None:
        self._journal = journal
        self._last: dict[tuple[str, str], int] = {}
        """Insertion order is the order of last use (oldest first)."""
        self._attached: set[tuple[str, str]] = set()
        self._limit = limit
        self._doubt: dict[str, dict[int, str]] = {}
        """Per topic: the stores whose outcome is unknown, token -> the message id their
        messages come after ("" for unknown: the topic's first kept message)."""
        self._held: set[int] = set()
        """Their journal tokens, kept open until settled."""
        self._settling: dict[str, asyncio.Lock] = {}

    def attach(self, topic: str, producer_name: str) -> bool:
        """Take the name on the topic for one producer; False when another producer holds it."""
        key = (topic, producer_name)
        if key in self._attached:
            return False
        self._attached.add(key)
        self._touch(key, self._last.pop(key, -1))
        return True

    def detach(self, topic: str, producer_name: str) -> None:
        """Give the name back once its producer has stopped (its stores are answered)."""
        self._attached.discard((topic, producer_name))

    def last(self, topic: str, producer_name: str) -> int:
        """The highest stored sequence id of the producer on the topic, -1 when none."""
        return self._last.get((topic, producer_name), -1)

    def record(self, topic: str, producer_name: str, sequence_id: int) -> None:
        """Remember that `sequence_id` (and everything below it) is stored."""
        key = (topic, producer_name)
        last = self._last.pop(key, -1)
        self._touch(key, max(last, sequence_id))

    def begin(self, topic: str) -> int:
        """A store of `topic` begins: a token for `persist` or `end` (0 without a journal)."""
        return 0 if self._journal is None else self._journal.begin(topic)

    def end(self, token: int) -> None:
        """The store of `token` is over (after `persist`, or failed; one in doubt stays open
        until settled)."""
        if self._journal is not None and token not in self._held:
            self._journal.end(token)

    def doubt(self, topic: str, token: int) -> None:
        """The store of `token` on `topic` failed, and may have stored its messages all the
        same: the topic is in doubt until `settled`."""
        floor = self._journal.floor(token) if self._journal is not None and token else ""
        self._doubt.setdefault(topic, {})[token] = floor
        if token:
            self._held.add(token)

    def in_doubt(self, topic: str) -> bool:
        return topic in self._doubt

    def doubts(self, topic: str) -> dict[int, str]:
        """The stores in doubt on `topic` (token -> the id their messages come after)."""
        return dict(self._doubt.get(topic, {}))

    def settling(self, topic: str) -> asyncio.Lock:
        """Held while the topic's doubts are settled (one scan at a time)."""
        return self._settling.setdefault(topic, asyncio.Lock())

    def settled(self, topic: str, tokens: Iterable[int]) -> None:
        """Those stores' messages are accounted for: their tokens end."""
        held = self._doubt.get(topic, {})
        for token in tokens:
            held.pop(token, None)
            if token in self._held:
                self._held.discard(token)
                self.end(token)
        if not held:
            self._doubt.pop(topic, None)

    async def persist(
        self, topic: str, producer_name: str, sequence_id: int, message_id: str = "",
        token: int = 0,
    ) -> None:
        """`record`, and with a journal, wait until it is on disk (`message_id`: the newest
        message of the store of `token`, "" where ids are not ordered; `Journal.record`)."""
        self.record(topic, producer_name, sequence_id)
        if self._journal is not None:
            await self._journal.record(topic, producer_name, sequence_id, message_id, token)

    def load(self) -> None:
        """Take the ids the journal kept (before any producer attaches)."""
        if self._journal is not None:
            for (topic, name), sequence_id in self._journal.load().items():
                self._touch((topic, name), sequence_id)

    def _touch(self, key: tuple[str, str], sequence_id: int) -> None:
        self._last[key] = sequence_id
        if len(self._last) > self._limit:
            # One pair in, at most one out: the oldest that no producer holds.
            victim = next((k for k in self._last if k not in self._attached), None)
            if victim is not None:
                del self._last[victim]
                if self._journal is not None:
                    self._journal.forget(victim)
