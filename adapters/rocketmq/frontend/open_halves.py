"""Each principal's share of open transactions: what its half messages not yet ended hold.

The transaction checker holds at most `CheckTimes.held_bytes` of half messages at once; past
that it takes no more until some end, and a producer whose half was not taken cannot end its
transaction. So with authentication one principal may have at most half of that open at once:
a transactional send past it is refused with `TOO_MANY_REQUESTS` before anything is stored, and
the other half is always there for everyone else. A half counts its body and `OVERHEAD` (so
empty bodies cannot make the checker hold without bound), from the send until its transaction
ends (commit, rollback, or dead-lettered after its last check). Halves left open before a
restart count against the checker's whole limit only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rocketmq.grpc_protocol import definition_pb2

from .codec import Rejected

OVERHEAD = 1024
"""What a half message counts beside its body (its record while the checker holds it)."""


class OpenHalves:
    """Bytes of open half messages by principal, against `share` (0: no share)."""

    def __init__(self, share: int) -> None:
        self.share = share
        self.by_owner: dict[str, int] = {}
        """Bytes of each principal's halves sent (or being sent) and not yet ended."""
        self._of: dict[str, tuple[str, int]] = {}
        """Transaction id -> (its principal, what it counts)."""

    def opening(self, owner: str, sizes: Mapping[int, int]) -> Opening:
        """Room for a send's halves (message index -> body size) of `owner`."""
        return Opening(self, owner, {i: size + OVERHEAD for i, size in sizes.items()})

    def reserve(self, owner: str, cost: int) -> None:
        held = self.by_owner.get(owner, 0)
        if self.share and held + cost > self.share:  # a whole send: one request holds 64 MiB
            raise Rejected(
                definition_pb2.Code.TOO_MANY_REQUESTS,
                f"open transactions of principal {owner[:200]!r}", f"{held} bytes",
                f"at most {self.share} bytes of half messages not yet ended (half of what the "
                "transaction checker holds, transaction_check.held_bytes); end some first")
        self.by_owner[owner] = held + cost

    def give_back(self, owner: str, cost: int) -> None:
        left = self.by_owner.get(owner, 0) - cost
        if left > 0:
            self.by_owner[owner] = left
        else:
            self.by_owner.pop(owner, None)

    def opened(self, transaction_id: str, owner: str, cost: int) -> None:
        self._of[transaction_id] = (owner, cost)

    def ended(self, transaction_id: str) -> None:
        """The transaction ended (or its half was dead-lettered): its room is given back."""
        entry = self._of.pop(transaction_id, None)
        if entry is not None:
            self.give_back(*entry)


class Opening:
    """A transactional send's room: reserved on entry (refused past the share), kept for the
    halves `stored`, given back for the rest on exit."""

    def __init__(self, halves: OpenHalves, owner: str, costs: dict[int, int]) -> None:
        self._halves = halves
        self._owner = owner
        self._costs = costs
        self._kept = 0

    def __enter__(self) -> Opening:
        if self._costs:
            self._halves.reserve(self._owner, sum(self._costs.values()))
        return self

    def stored(self, entries: Sequence[Any]) -> list[str]:
        """The send's answer came: its halves stored (with a transaction id) stay counted;
        their transaction ids."""
        ids = []
        for index, cost in self._costs.items():
            transaction_id = entries[index].transaction_id if index < len(entries) else ""
            if transaction_id:
                self._halves.opened(transaction_id, self._owner, cost)
                self._kept += cost
                ids.append(transaction_id)
        return ids

    def __exit__(self, *exc: object) -> None:
        if self._costs:
            self._halves.give_back(self._owner, sum(self._costs.values()) - self._kept)
