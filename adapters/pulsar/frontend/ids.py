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


class DedupRegistry:
    """The highest sequence id stored per producer name (Pulsar's message deduplication).

    A producer that reconnects resends what it has no receipt for; a resend whose sequence id is
    not above the stored one is answered with a receipt and not stored again. Kept in memory for
    the life of the front end.
    """

    def __init__(self) -> None:
        self._last: dict[str, int] = {}

    def last(self, producer_name: str) -> int:
        """The highest stored sequence id of the producer, -1 when none."""
        return self._last.get(producer_name, -1)

    def record(self, producer_name: str, sequence_id: int) -> None:
        """Remember that `sequence_id` (and everything below it) is stored."""
        if sequence_id > self._last.get(producer_name, -1):
            self._last[producer_name] = sequence_id
