"""The engine's deliveries by receipt, counting the bytes each principal's hold.

`InFlightTable` is the engine's `inflight` mapping itself: a delivery's body is counted
against its principal (`InFlight.owner`: its consumer's, or the one whose pull took it) in
`Holdings` when it enters the table and given back on every way it leaves (`pop`, `del`,
`clear`), so the count cannot drift from what the table holds.
"""

from __future__ import annotations

from typing import Any

from gateway.engine.dispatch import InFlight
from gateway.engine.holdings import Holdings


class InFlightTable(dict[str, InFlight]):
    """`receipt -> InFlight`, with the bytes of bodies each principal holds (`holdings`)."""

    __slots__ = ("holdings",)

    def __init__(self, holdings: Holdings) -> None:
        super().__init__()
        self.holdings = holdings

    def __setitem__(self, receipt: str, inf: InFlight) -> None:
        owner = inf.owner
        if owner is None and inf.consumer is not None:
            owner = inf.owner = inf.consumer.owner
        if owner is not None:
            old = dict.get(self, receipt)
            if old is not None:
                self._gone(old)
            self.holdings.add(owner, len(inf.stored.body))
        dict.__setitem__(self, receipt, inf)

    def __delitem__(self, receipt: str) -> None:
        inf = dict.pop(self, receipt)
        if inf.owner is not None:
            self._gone(inf)

    def pop(self, receipt: str, *default: Any) -> Any:
        inf = dict.pop(self, receipt, *default)
        if inf is not None and inf.owner is not None:
            self._gone(inf)
        return inf

    def clear(self) -> None:
        for inf in dict.values(self):
            if inf.owner is not None:
                self._gone(inf)
        dict.clear(self)

    def popitem(self) -> tuple[str, InFlight]:
        raise TypeError("InFlightTable: pop a receipt by name")

    def setdefault(self, *args: Any) -> Any:
        raise TypeError("InFlightTable: set a receipt with []")

    def update(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("InFlightTable: set a receipt with []")

    def put_all(self, entries: dict[str, InFlight], owner: str | None) -> None:
        """Add new deliveries (new receipts), all of `owner` (their `owner`), as a batch."""
        dict.update(self, entries)
        if owner is not None:
            self.holdings.add(owner, sum([len(inf.stored.body) for inf in entries.values()]))

    def drop_all(self, gone: list[InFlight]) -> None:
        """Count out deliveries taken out of the table with `dict.pop` (a batch of acks)."""
        by_owner: dict[str, int] = {}
        for inf in gone:
            if inf.owner is not None:
                by_owner[inf.owner] = by_owner.get(inf.owner, 0) + len(inf.stored.body)
        for owner, size in by_owner.items():
            self.holdings.less(owner, size)

    def pulled(self, receipts: list[str], owner: str) -> None:
        """The deliveries of `receipts` (just made, for no consumer) are held by `owner`'s
        pull."""
        held = 0
        for receipt in receipts:
            inf = dict.__getitem__(self, receipt)
            inf.owner = owner
            held += len(inf.stored.body)
        self.holdings.add(owner, held)

    def _gone(self, inf: InFlight) -> None:
        assert inf.owner is not None
        self.holdings.less(inf.owner, len(inf.stored.body))
