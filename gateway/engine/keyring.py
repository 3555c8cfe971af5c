"""Consistent hashing of message keys onto the consumers of a key-shared subscription."""

from __future__ import annotations

import bisect
import hashlib
from typing import Generic, Protocol, TypeVar


class Member(Protocol):
    @property
    def id(self) -> str: ...


M = TypeVar("M", bound=Member)

RING_POINTS = 64
"""Points each consumer has on a key-shared subscription's hash ring."""


class KeyRing(Generic[M]):
    """Consistent hashing of message keys onto a key-shared subscription's consumers.

    Each consumer owns the arcs before its `RING_POINTS` points (hashes of its id); a key goes
    to the owner of its hash. While the consumers stay the same a key always goes to the same
    consumer; one that joins takes over only keys from its own points' arcs, and the keys of
    one that leaves spread over the rest: no other key moves. Rebuilt only when the consumers
    change.
    """

    def __init__(self) -> None:
        self._members: tuple[M, ...] = ()
        self._points: list[int] = []
        self._owners: list[M] = []

    def owner(self, live: list[M], key: str) -> M:
        if tuple(live) != self._members:
            self._build(live)
        at = bisect.bisect_left(self._points, _hash(key))
        return self._owners[at % len(self._owners)]

    def _build(self, live: list[M]) -> None:
        ring = sorted(
            (_hash(f"{consumer.id}#{i}"), n, consumer)
            for n, consumer in enumerate(live)
            for i in range(RING_POINTS)
        )
        self._members = tuple(live)
        self._points = [point for point, _, _ in ring]
        self._owners = [consumer for _, _, consumer in ring]


def _hash(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")
