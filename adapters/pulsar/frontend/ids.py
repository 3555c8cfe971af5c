"""Pulsar message ids (ledgerId, entryId) handed out by the front end.

Ids only have to be unique and increasing: the client drops a message whose id is not newer than
one it acknowledged cumulatively, and keys its nack and ack-timeout trackers by id. So every
delivery and every send receipt takes the next entry id of one counter, under a ledger id taken
from the wall clock when the front end starts (later runs get larger ledger ids).
"""

from __future__ import annotations

import itertools
import time


class IdAllocator:
    """Hands out increasing (ledgerId, entryId) pairs."""

    def __init__(self, ledger_id: int | None = None) -> None:
        self.ledger_id = ledger_id if ledger_id is not None else time.time_ns() // 1_000_000
        self._entries = itertools.count()
        self.last_entry = -1

    def next_entry(self) -> int:
        """A new entry id under `ledger_id`."""
        self.last_entry = next(self._entries)
        return self.last_entry


MAX_PRODUCER_NAMES = 100_000
"""Most (topic, producer name) pairs whose sequence ids are remembered; beyond it the pairs
unused longest, with no producer attached, are forgotten first."""


class DedupRegistry:
    """Producer names per topic: which are in use, and the highest sequence id each stored
    (Pulsar's message deduplication).

    A producer that reconnects resends what it has no receipt for; a resend whose sequence id is
    not above the stored one is answered with a receipt and not stored again. Each topic has its
    own sequence per producer name, and a name is used by one producer of a topic at a time
    (`attach`), so two producers never share a sequence and every receipt means stored. Kept in
    memory for the life of the front end, at most `limit` pairs.
    """

    def __init__(self, limit: int = MAX_PRODUCER_NAMES) -> None:
        self._last: dict[tuple[str, str], int] = {}
        """Insertion order is the order of last use (oldest first)."""
        self._attached: set[tuple[str, str]] = set()
        self._limit = limit

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

    def _touch(self, key: tuple[str, str], sequence_id: int) -> None:
        self._last[key] = sequence_id
        if len(self._last) > self._limit:
            # One pair in, at most one out: the oldest that no producer holds.
            victim = next((k for k in self._last if k not in self._attached), None)
            if victim is not None:
                del self._last[victim]
