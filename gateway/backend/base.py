"""Back-end interface: durable topics with delayed delivery and per-group individual acks.

The engine drives the retry state machine; a back end only keeps messages. Its model is the
common ground of the products behind it:

* a *topic* is an append-only sequence of messages; `publish` returns only once they are durable;
* a *group* consumes a topic independently of other groups, starting from the earliest retained
  message (or, where the back end keeps groups' positions, where `create_group` or `seek` put
  it); each message is handed out by `fetch` and stays *leased* to the group until `ack`
  removes it or `release` gives it back (visible again at a given time, with new counters);
* a message published with `deliver_at_ms` in the future is not fetched before that time: this is
  how retry copies wait (RocketMQ `%RETRY%group`, Pulsar `-RETRY` topics, RabbitMQ delay queues);
  a group that does not honour publish delays (`fetch(..., publish_delays=False)`, on back ends
  that `skip_delays`) gets it at once, while the topic's other groups wait;
* leases are not durable: after a restart every message that was leased and not acked is visible
  again at once (delivered at least once, never lost), while released messages keep their
  visible-at time and counters.

Retry and dead-letter destinations are ordinary topics. Product-specific code lives in
`adapters/<product>/backend.py`; the embedded store in `gateway/store/`.
"""

from __future__ import annotations

import abc
import asyncio
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from gateway.errors import FailedPrecondition, Unimplemented
from gateway.values import value


@value
class OutMessage:
    """A message to append to a topic."""

    body: bytes
    properties: Mapping[str, str] = field(default_factory=dict)
    """A back end may keep this mapping as it is (the embedded store's tail does): the caller
    does not change it after publishing."""
    key: str = ""
    """Message group / ordering key / routing key ("" for none)."""
    tag: str = ""
    deliver_at_ms: int = 0
    """Wall-clock ms before which the message is not delivered; 0 means at once."""
    message_id: str = ""
    """The stable id a client sees; "" lets the back end assign a new one."""
    attempt: int = 0
    """Deliveries the message already had (carried on retry copies)."""
    retries: int = 0
    """Failures already counted against the policy's max retries (carried on retry copies)."""


@value
class StoredMessage:
    """A message as fetched from a topic for a group."""

    lease: Lease
    message_id: str
    topic: str
    body: bytes
    properties: Mapping[str, str]
    key: str
    tag: str
    publish_ms: int
    deliver_at_ms: int
    attempt: int
    """Deliveries before this one (0 on the first delivery)."""
    retries: int
    """Failures counted so far (0 on the first delivery)."""


@value
class Lease:
    """Opaque handle of one stored message for one group; only its back end interprets it."""

    topic: str
    group: str
    position: int
    token: str = ""
    """Back-end specific extra (e.g. a RabbitMQ delivery tag with its channel generation)."""


@value
class Release:
    """Give a leased message back to its group: visible again at `visible_at_ms`."""

    lease: Lease
    visible_at_ms: int
    attempt: int
    retries: int


@value
class Move:
    """Take a message away from a group (`lease`) and append `message`, its copy, to `topic`."""

    lease: Lease
    topic: str
    message: OutMessage


@value
class KeyedCopy:
    """A copy to store in `topic` once: `key` names its source message in a copy ledger."""

    key: str
    topic: str
    message: OutMessage
    first_delivery: bool = False
    """Stored even when the ledger records `key`: its source never handed it out before."""


@dataclass(frozen=True, slots=True)
class TopicStats:
    """Counts for one (topic, group)."""

    ready: int
    """Visible now, not leased."""
    delayed: int
    """Not visible yet (delayed publish or released with a future time)."""
    leased: int
    oldest_ready_ms: int | None
    """Publish time of the oldest visible message, if any."""
    next_visible_ms: int | None
    """When the earliest delayed message becomes visible, if any."""


class Backend(abc.ABC):
    """Durable topics with per-group consumption.

    Every method may raise `gateway.errors.Unavailable`.
    """

    name: str = "backend"

    @abc.abstractmethod
    async def open(self) -> None:
        """Connect or load; after it returns the back end serves requests, or says why not
        with `healthy()` False until it can (a broker back end that waits for its broker at
        start: the RabbitMQ one's `start_wait_s`). `gateway.errors.BackendUnreachable` when it
        cannot start now: `gateway serve` exits with status 75."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Flush what is pending and release resources; leases are dropped (visible on reopen)."""

    @abc.abstractmethod
    def healthy(self) -> bool:
        """True while requests can succeed (broker reachable, store open)."""

    def fatal(self) -> str | None:
        """Why the back end cannot serve again within this process (it gave up recovering by
        itself): the process should exit so that its supervisor restarts it. None while it
        serves or may still recover."""
        return None

    def on_state_change(self, callback: Callable[[], None]) -> None:
        """Have `callback()` called (on the event loop) whenever `healthy()` or `fatal()` may
        have changed. Back ends that do not call it are polled."""
        return None

    def on_leases_lost(self, callback: Callable[[], None]) -> None:
        """Have `callback()` called when every lease handed out so far became void: the back end
        recovered from a failure by reloading its durable state, and the messages of those
        leases are delivered again. Called before `healthy()` is true again."""
        return None

    @abc.abstractmethod
    async def publish(self, topic: str, messages: Sequence[OutMessage]) -> list[str]:
        """Append a batch to `topic`; return the message ids once all are durable."""

    @abc.abstractmethod
    async def fetch(
        self,
        topic: str,
        group: str,
        max_messages: int,
        now_ms: int,
        *,
        exclude_keys: frozenset[str] = frozenset(),
        max_bytes: int | None = None,
        publish_delays: bool = True,
    ) -> list[StoredMessage]:
        """Lease up to `max_messages` messages of `topic` visible at `now_ms` to `group`.

        Returns at once (possibly empty); messages come in topic order, released ones in
        visible-at order first. Messages whose `key` is in `exclude_keys` are skipped (left
        visible): ordered consumption uses this to block a message group behind its failing head.
        Where the back end keeps per-key order, a key is skipped entirely after the first skipped
        message so its later messages are not handed out before it.

        `max_bytes` (None: no bound) asks for no more bodies than that, the message that passes
        it being the last (at least one is handed out): a back end that reads messages from
        disk to hand them out (the embedded store) reads no more; one that holds them in
        memory anyway may ignore it.

        `publish_delays=False` (for a group whose product delivers delayed messages at once:
        Pulsar's Exclusive and Failover subscriptions) hands out a message published with a
        future `deliver_at_ms` as if it were due, to this group only; a message the group
        released still waits for its visible-at time. The group decides when it first looks at
        a message: one it already holds as delayed keeps waiting. Back ends that cannot
        (`skips_delays` False) ignore it: the message waits for every group.
        """

    @abc.abstractmethod
    async def wait(self, topic: str, group: str, timeout_s: float) -> None:
        """Return when `fetch` may find something new for (topic, group), or after `timeout_s`.

        Spurious returns are allowed; it never raises on timeout.
        """

    async def catch_up(self, topic: str, group: str) -> bool:
        """Make `fetch` see every message of `topic` that was durable before this call, and
        return whether it may find something now. For a back end that fetches from a buffer
        something else fills asynchronously (a broker consumer), whose `fetch` can find
        nothing just after a publish the broker confirmed: it asks its store for what it has
        not received yet. A receive that finds nothing calls it before it waits and once more
        before it answers "nothing" (one round trip to the store each; it never waits for
        messages to come). Default: `fetch` reads the store itself, there is nothing to catch
        up (False)."""
        return False

    @abc.abstractmethod
    async def ack(self, leases: Sequence[Lease]) -> None:
        """Remove leased messages for their group; durable on return; unknown leases are ignored."""

    @abc.abstractmethod
    async def release(self, releases: Sequence[Release]) -> None:
        """Give leased messages back, visible at the given times with new counters; durable."""

    async def carry_out(
        self,
        copies: Mapping[str, Sequence[OutMessage]],
        acks: Sequence[Lease],
        releases: Sequence[Release],
    ) -> None:
        """Carry out one settle batch, durable on return: publish `copies` (retry and dead-letter
        copies, by topic; a copy carries the message id of the leased message in `acks` it
        replaces), ack `acks` and release `releases`.

        The default does them in that order, each durable before the next: a crash in between
        may keep a copy *and* its original (the original is delivered again: at least once,
        never lost). A back end that can make the batch all-or-nothing overrides it: the
        embedded store commits it in one transaction; several processes sharing one broker need
        it for each retry to fire once and each dead letter to be written once when one of them
        dies (RabbitMQ: one AMQP transaction)."""
        if copies:
            await asyncio.gather(*(self.publish(topic, messages)
                                   for topic, messages in copies.items() if messages))
        if acks:
            await self.ack(acks)
        if releases:
            await self.release(releases)

    @abc.abstractmethod
    async def stats(
        self, topic: str, group: str, now_ms: int, *, publish_delays: bool = True
    ) -> TopicStats:
        """Counts for (topic, group). `publish_delays` is the group's rule as `fetch` takes it:
        False counts a message published with a future `deliver_at_ms` that the group has not
        looked at yet as ready (it is handed out at once), where the back end `skips_delays`."""

    async def outstanding(self, topic: str, group: str, now_ms: int) -> int:
        """Messages of (topic, group) not acknowledged and not waiting for their time: visible
        or leased, and, where a back end counts them without reading them, those it has not
        looked at yet (delayed ones among them). For a frequent "is anything left?", which
        `stats` answers exactly but may have to read for. Default: `stats`' ready + leased."""
        stats = await self.stats(topic, group, now_ms)
        return stats.ready + stats.leased

    @abc.abstractmethod
    async def peek(
        self, topic: str, group: str, limit: int, after_position: int = -1
    ) -> list[StoredMessage]:
        """Read unacked messages of `topic` for `group` without leasing them (admin). A message
        released to come again later may show that time as its `deliver_at_ms` (the embedded
        store's does: `migrate copy` keeps a retry in place waiting)."""

    @abc.abstractmethod
    async def remove(self, leases: Sequence[Lease], *, keep_leased: bool = False) -> int:
        """Remove given messages for a group, leased or not (admin); return how many. With
        `keep_leased`, those leased now are left alone (not counted)."""

    @abc.abstractmethod
    async def purge(self, topic: str, group: str, *, leased: bool = False) -> int:
        """Remove the messages of `topic` that wait for `group` (ready, delayed, released to
        come again later); return how many. Leased ones stay leased, as a broker keeps
        unacknowledged messages on a queue purge: an ack of one commits it, a release brings it
        back. With `leased`, those go too (their leases are void): a deleted queue's."""

    async def topics(self) -> list[str]:
        """Names of the topics the back end knows (may be empty where it cannot list)."""
        return []

    async def groups(self) -> list[tuple[str, str]]:
        """(topic, group) pairs whose position the back end keeps, sorted: groups that consumed
        or were created, also after a restart (default: none known this way)."""
        return []

    atomic_moves: bool = False
    """True when `move` commits every copy and removal at once (else copy, then remove)."""

    removes_by_position: bool = False
    """True when `remove` takes a lease `peek` listed by its position alone (no token), at any
    later time: what `migrate copy` exports is removed by position once its copy is stored.
    Back ends whose listing positions do not name a message (a broker's) set it False."""

    async def move(self, moves: Sequence[Move]) -> int:
        """Append each move's copy to its topic and remove its leased message; return how many
        were removed. Here (back ends without transactions over topics): every copy is
        published first, then the originals are removed, so a crash in between leaves both and
        the caller, on a second run, finds the copies already there (by message id) and only
        removes. A back end that can do it in one transaction sets `atomic_moves`."""
        by_topic: dict[str, list[OutMessage]] = {}
        for item in moves:
            by_topic.setdefault(item.topic, []).append(item.message)
        for topic, messages in by_topic.items():
            await self.publish(topic, messages)
        return await self.remove([item.lease for item in moves])

    async def store_once(self, ledger: str, copies: Sequence[KeyedCopy],
                         earlier: Sequence[str] = ()) -> list[bool]:
        """Store each copy in its topic unless the copy ledger `ledger` (or one of its `earlier`
        names, that the same source had before) already records its key, and record the keys
        under `ledger`, all in one transaction: True where a copy was stored now, False where it
        had been stored before. Back ends without such a ledger refuse."""
        raise FailedPrecondition(
            f"the {self.name} back end keeps no copy ledger: copy into the broker directly, "
            "or into a gateway on its embedded store")

    async def create_group(self, topic: str, group: str, *, at_end: bool = False) -> bool:
        """Make `group` a group of `topic` that keeps its position, unless it is one already:
        starting at the earliest retained message, or (`at_end`) after every message published
        so far, durably when it returns. True when it was created; False when it existed (it
        keeps its position) or the back end places groups itself (`seekable` is False: every
        group then starts where the back end starts it)."""
        return False

    skips_delays: bool = False
    """True when `fetch(..., publish_delays=False)` hands a group delayed messages at once
    (capability `delay-skip`); False where a delayed message waits for every group (a broker
    that holds it until its time for the whole topic)."""

    quiet_peeks: bool = True
    """True when `peek` leaves the messages it reads as they were; False where looking marks
    them (a broker that gives a looked-at message back as redelivered, counting an attempt)."""

    independent_groups: bool = True
    """True when each group of a topic reads every message of it (the model above); False where
    a topic's groups share one queue and each message goes to one of them (capability
    `independent-groups` missing): a group then must not drop another group's message."""

    seekable: bool = False
    """True when the back end keeps each group's position itself and can move it
    (`create_group` at the end, `seek`), and the message ids it assigns increase in topic
    order (publish time first)."""

    async def seek(
        self, topic: str, group: str, *, message_id: str = "", publish_ms: int = -1
    ) -> None:
        """Move `group` to the message `message_id` of `topic`, or (without an id) to the first
        message published at or after `publish_ms`: that message and every later one is
        delivered again, earlier ones are not; whatever the group had leased, released or
        delayed is forgotten (its leases are void). `NotFound` when the message is not in the
        topic (any more); `Unimplemented` where the back end cannot (`seekable` False)."""
        raise Unimplemented(f"the {self.name} back end cannot move a group's position")

    async def last_id(self, topic: str) -> str | None:
        """The message id of the newest message `topic` holds (the last one published and
        still kept), or None when it holds none or the back end cannot tell. Back ends that are
        `seekable` answer it (the embedded store and the in-memory one keep a topic's newest
        message through trims); the default, for back ends that cannot read a topic without
        consuming it (a broker's queue), is None."""
        return None

    async def properties_after(
        self, topic: str, message_id: str, limit: int
    ) -> list[tuple[str, Mapping[str, str]]] | None:
        """(message id, properties) of up to `limit` messages of `topic` published after the
        message `message_id`, oldest first, read without touching any group (from the oldest
        kept message when `message_id` is "" or no longer kept). None where the back end cannot
        read a topic that way (the default: a broker's queue); `seekable` back ends answer."""
        return None

    async def reset_retries(self, topic: str, group: str) -> int:
        """Count the failures of `group`'s messages on `topic` from 0 again: each message it has
        released or delayed (not leased) gets `retries` 0; its attempt count stays. This is for
        products that keep the count for their consumers only while one is there (Pulsar's
        redelivery count starts again when every consumer of the subscription has left).
        Returns how many messages had a count; `Unimplemented` where the count travels with
        each message in the broker (capability `retry-reset` missing)."""
        raise Unimplemented(f"the {self.name} back end cannot reset retry counts")

    async def drop_group(self, topic: str, group: str) -> bool:
        """Forget `group` on `topic`: its position and its unacked messages, so the topic's
        messages are no longer kept for it. True if there was something to forget. Leases of
        the group are void afterwards; a later fetch under the same name starts a new group.
        Back ends that keep nothing per group have nothing to do."""
        return False
