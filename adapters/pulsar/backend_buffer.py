"""What the Pulsar back end holds for one (topic, subscription): received and leased messages.

Pulsar pushes messages to the consumer's listener (on a client thread); they land here, on the
event loop, in arrival order. `take` hands them out without blocking, honouring deliver-at times
and excluded keys; `put_back` returns a message to the front. Nothing here talks to the broker.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from gateway.backend.base import Lease, OutMessage, Release, StoredMessage
from gateway.backend.envelope import Envelope


def same_copy(a: Envelope, b: Envelope) -> bool:
    """Whether two deliveries are the same stored copy of a message."""
    return (a.message_id, a.publish_ms, a.stated_attempt, a.retries, a.deliver_at_ms) == (
        b.message_id,
        b.publish_ms,
        b.stated_attempt,
        b.retries,
        b.deliver_at_ms,
    )


@dataclass(slots=True)
class Held:
    """One received Pulsar message, buffered or leased."""

    message: Any
    """The `pulsar.Message` (acknowledged through its subscription's consumer)."""
    seq: int
    token: str
    envelope: Envelope
    attempt: int
    retries: int
    passed: bool = False
    """A purge moved the subscription past it while it was leased: the broker no longer
    holds it, so a release must send a copy."""

    def retry_copy(self, release: Release, now_ms: int) -> tuple[OutMessage, str, int]:
        """Its retry copy with the released counters and visible time, its id and publish
        time."""
        env = self.envelope
        return (env.released_copy(self.message.data(), release, now_ms), env.message_id,
                env.publish_ms)

    @property
    def key(self) -> str:
        return self.envelope.key

    def stored(self, topic: str, group: str, body: bytes | None = None) -> StoredMessage:
        env = self.envelope
        return StoredMessage(
            lease=Lease(topic, group, self.seq, self.token),
            message_id=env.message_id,
            topic=topic,
            body=self.message.data() if body is None else body,
            properties=dict(env.properties),
            key=env.key,
            tag=env.tag,
            publish_ms=env.publish_ms,
            deliver_at_ms=env.deliver_at_ms,
            attempt=self.attempt,
            retries=self.retries,
        )


@dataclass(slots=True, eq=False)
class SubState:
    """Buffered and leased messages of one subscription, and who waits for new ones."""

    topic: str
    group: str
    consumer: Any = None
    """The `pulsar.Consumer` once subscribed."""
    buffer: deque[Held] = field(default_factory=deque)
    leased: dict[str, Held] = field(default_factory=dict)
    remembered: dict[str, int] = field(default_factory=dict)
    """Message id -> the attempt last handed out, while the message is held here."""
    arrived: asyncio.Event = field(default_factory=asyncio.Event)
    paused: bool = False
    connected: bool = True
    """Whether the consumer was connected when last looked at."""
    received: tuple[int, int] = (-1, -1)
    """(ledger, entry) of the newest message the consumer received (`PulsarBackend.catch_up`)."""

    def add(self, held: Held) -> None:
        """Buffer a received message; an identical copy still buffered (the broker delivering
        again after a reconnect) is replaced by the new delivery, which is the live one."""
        for index, old in enumerate(self.buffer):
            if same_copy(old.envelope, held.envelope):
                del self.buffer[index]
                break
        self.buffer.append(held)
        self.arrived.set()

    async def receive_up_to(self, position: tuple[int, int], seconds: float) -> None:
        """Wait until the consumer received the message at (ledger, entry) `position`, at most
        `seconds`: one it will not get soon (dealt to another gateway's consumer, or held by
        the broker until its delivery time) costs that wait."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        while self.received < position and (left := deadline - loop.time()) > 0:
            self.arrived.clear()  # set by the next arrival (a buffered one had set it)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.arrived.wait(), left)
        if self.buffer:
            self.arrived.set()

    def drop_buffered(self) -> int:
        """Forget buffered messages after the consumer lost its connection: the broker delivers
        them again once it is back. Returns how many."""
        dropped = len(self.buffer)
        self.buffer.clear()
        return dropped

    def take(self, limit: int, now_ms: int, exclude_keys: frozenset[str]) -> list[Held]:
        """Lease up to `limit` buffered messages due at `now_ms`, in buffer order.

        A key whose message is skipped (excluded or not due yet) is skipped for the rest of the
        pass, so one key's messages never overtake each other.
        """
        out: list[Held] = []
        kept: deque[Held] = deque()
        blocked: set[str] = set(exclude_keys)
        while self.buffer:
            held = self.buffer.popleft()
            if len(out) >= limit:
                kept.append(held)
                kept.extend(self.buffer)
                self.buffer.clear()
                break
            key = held.key
            if (key and key in blocked) or held.envelope.deliver_at_ms > now_ms:
                if key:
                    blocked.add(key)
                kept.append(held)
                continue
            self.leased[held.token] = held
            self.remembered[held.envelope.message_id] = held.attempt
            out.append(held)
        self.buffer = kept
        if len(out) < limit or not self.buffer:
            self.arrived.clear()
        return out

    def put_back(self, helds: list[Held]) -> None:
        """Return messages to the front of the buffer, oldest first."""
        for held in sorted(helds, key=lambda h: h.seq, reverse=True):
            self.buffer.appendleft(held)
        if helds:
            self.arrived.set()

    def unlease(self, token: str) -> Held | None:
        """Remove a lease; None when unknown or already settled."""
        return self.leased.pop(token, None)

    def forget(self, held: Held) -> None:
        """The message left this subscription (acked or replaced by a copy)."""
        self.remembered.pop(held.envelope.message_id, None)

    def pull(self, token: str) -> Held | None:
        """Remove a message by token, leased or buffered."""
        held = self.leased.pop(token, None)
        if held is not None:
            return held
        for candidate in self.buffer:
            if candidate.token == token:
                self.buffer.remove(candidate)
                return candidate
        return None

    def all_held(self) -> Iterator[Held]:
        """Buffered and leased messages in arrival order."""
        yield from sorted([*self.buffer, *self.leased.values()], key=lambda h: h.seq)

    def next_due_ms(self, now_ms: int) -> int | None:
        """The earliest deliver-at time of a buffered message not due at `now_ms`."""
        return min(
            (h.envelope.deliver_at_ms for h in self.buffer if h.envelope.deliver_at_ms > now_ms),
            default=None,
        )
