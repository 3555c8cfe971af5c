"""Subscriptions and push consumers: who gets which message, under how much credit."""

from __future__ import annotations

import asyncio
import itertools
import zlib
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from gateway.backend import StoredMessage
from gateway.core.policy import Placement, RetryPolicy
from gateway.core.record import Record
from gateway.engine.api import ConsumerType, Delivery, SubscriptionSpec
from gateway.engine.holdings import Holdings
from gateway.engine.keyring import KeyRing
from gateway.errors import Unavailable

MAX_UNACKED_BYTES = 64 << 20
"""Bytes of bodies one push consumer holds unsettled at most, by default (`--max-unacked-mb`)."""
KEY_SHARED = ConsumerType.KEY_SHARED
"""A module constant for `pick`, once per message (see `gateway.core.states`)."""


@dataclass(eq=False, slots=True)
class InFlight:
    """One delivery the engine is waiting on (or, for ordered queues, holding for its retry)."""

    receipt: str
    record: Record
    stored: StoredMessage
    sub: Subscription
    consumer: Consumer | None
    policy: RetryPolicy
    """The policy it was delivered under (its consumer's): it is settled, timed out and
    retried under this one, whatever the group's other consumers run."""
    held: bool = False
    """Ordered queue: failed and waiting in the engine for its in-place retry."""
    timer: int = 0
    """The engine's timer key for its deadline (0: none); cancelled when it is settled."""
    blocks: bool = False
    """Its key is blocked on its account (it was fetched while the group consumed in order):
    settling it frees the key, whichever policy it is settled under."""
    due_ms: int = 0
    """Held: the clock time its retry is due."""
    owner: str | None = None
    """The principal that holds its body: its consumer's, or the one whose pull took it
    (`gateway.engine.inflight`); None: not counted."""


class Consumer:
    """A push consumer: deliveries wait in its outbox until `next_batch` takes them
    (`gateway.engine.port.ConsumerPort`)."""

    def __init__(
        self, sub: Subscription, consumer_id: str, credit: int, max_unacked: int = 50_000,
        policy: RetryPolicy | None = None, max_unacked_bytes: int = MAX_UNACKED_BYTES,
        *, owner: str | None = None, holdings: Holdings | None = None,
    ) -> None:
        self.sub = sub
        self.owner = owner if holdings is not None else None
        """The principal whose `holdings` its deliveries count in (None: not counted)."""
        self.holdings = holdings if owner is not None else None
        self._as = owner or ""
        self._policy = policy
        self.id = consumer_id
        self.credit = credit
        self.max_unacked = max_unacked
        """Most deliveries this consumer may hold unsettled; more credit waits until it settles
        (bounds the memory a consumer that never settles can hold in the gateway)."""
        self.max_unacked_bytes = max_unacked_bytes
        """Most bytes of bodies it may hold unsettled (at least one delivery): with large
        messages the count alone bounds nothing (50,000 of 4 MiB)."""
        self.unacked_bytes = 0
        self.outbox: deque[Delivery] = deque()
        self.ready = asyncio.Event()
        self.closed = False
        self.receipts: dict[str, int] = {}
        """The receipts of its unsettled deliveries, with their bodies' sizes."""
        self.cancelled = False
        self.on_close: Callable[[Consumer], object] | None = None
        self.on_cancel: Callable[[Consumer, list[str]], object] | None = None
        self.active = True
        """It gets deliveries: False while another consumer of an exclusive or failover
        subscription is the one that does."""
        self._on_active: Callable[[bool], object] | None = None

    def watch_active(self, callback: Callable[[bool], object] | None) -> None:
        """Have `callback(active)` called whenever `active` changes (None: no more calls)."""
        self._on_active = callback

    def set_active(self, active: bool) -> None:
        if active is not self.active:
            self.active = active
            if self._on_active is not None:
                self._on_active(active)

    @property
    def group(self) -> str:
        """The group it consumes in (a broadcast consumer's own group: `group#id`)."""
        return self.sub.group

    @property
    def policy(self) -> RetryPolicy:
        """The policy it consumes under (its own subscribe's), which its deliveries are settled
        under; its subscription's when none was given."""
        return self._policy if self._policy is not None else self.sub.policy

    async def next_batch(self, max_messages: int = 256) -> list[Delivery]:
        while True:
            if self.outbox:
                count = min(max_messages, len(self.outbox))
                return [self.outbox.popleft() for _ in range(count)]
            if self.closed:
                raise Unavailable(f"consumer {self.id} is closed")
            self.ready.clear()
            await self.ready.wait()

    def add_credit(self, n: int) -> None:
        """More credit; the dispatcher is woken only if it had none (with credit left, the
        dispatcher is busy or waits for messages)."""
        if n <= 0 or self.closed or self.cancelled:
            return
        had = self.credit
        self.credit = had + n
        if had <= 0:
            self.sub.wake.set()

    def take_credit(self, n: int) -> int:
        """Withdraw up to `n` of the credit not used yet; how much was withdrawn."""
        taken = max(min(n, self.credit), 0)
        self.credit -= taken
        return taken

    def room(self) -> int:
        """Deliveries it may take now: its credit within `max_unacked` and `max_unacked_bytes`."""
        if self.unacked_bytes >= self.max_unacked_bytes:
            return 0
        holdings = self.holdings
        if holdings is not None and holdings.full(self._as):
            holdings.starved.add(self.sub)  # woken when there is room again
            return 0
        return min(self.credit, self.max_unacked - len(self.receipts))

    def byte_room(self) -> int:
        """Bytes of bodies it may take now (the delivery that passes it is the last), within
        its principal's room."""
        room = self.max_unacked_bytes - self.unacked_bytes
        if self.holdings is not None:
            return min(room, self.holdings.room(self._as))
        return room

    def settled(self, receipt: str) -> None:
        """A delivery of its own is settled; wakes the dispatcher if that gave room. A cancelled
        consumer that kept its place (`Subscription.hand_over`) leaves with its last one."""
        size = self.forget(receipt)
        if self.cancelled and not self.receipts:
            self.sub.hand_over(self)
            return
        if self.credit > 0 and (len(self.receipts) == self.max_unacked - 1 or (
                self.unacked_bytes < self.max_unacked_bytes <= self.unacked_bytes + size)):
            self.sub.wake.set()

    def forget(self, receipt: str) -> int:
        """Drop an unsettled delivery from the counts without waking anyone; its size."""
        size = self.receipts.pop(receipt, 0)
        self.unacked_bytes -= size
        return size

    def forget_all(self) -> None:
        self.receipts.clear()
        self.unacked_bytes = 0

    def moved(self, old: str, new: str) -> None:
        """A delivery got a new receipt (its invisible time changed)."""
        self.receipts[new] = self.receipts.pop(old, 0)

    def push(self, delivery: Delivery) -> None:
        self.outbox.append(delivery)
        size = len(delivery.body)
        self.receipts[delivery.receipt] = size
        self.unacked_bytes += size
        self.credit -= 1
        self.ready.set()

    def push_all(self, deliveries: list[Delivery]) -> None:
        """`push` each of `deliveries`, in order."""
        if not deliveries:
            return
        self.outbox.extend(deliveries)
        sizes = [len(d.body) for d in deliveries]
        self.receipts.update(zip([d.receipt for d in deliveries], sizes, strict=True))
        self.unacked_bytes += sum(sizes)
        self.credit -= len(deliveries)
        self.ready.set()

    async def cancel(self) -> None:
        """No more deliveries; those still in the outbox are given back (`ConsumerPort`)."""
        if self.cancelled or self.closed:
            return
        self.cancelled = True
        self.credit = 0
        untaken = [d.receipt for d in self.outbox]
        self.outbox.clear()
        if self.on_cancel is not None:
            result = self.on_cancel(self, untaken)
            if asyncio.iscoroutine(result):
                await result

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.ready.set()
        if self.on_close is not None:
            result = self.on_close(self)
            if asyncio.iscoroutine(result):
                await result


@dataclass(eq=False)
class Subscription:
    """A group's consumption of a topic (and of its retry destination) under one policy."""

    spec: SubscriptionSpec
    policy: RetryPolicy
    group: str
    consumers: list[Consumer] = field(default_factory=list)
    blocked_keys: set[str] = field(default_factory=set)
    parked: dict[str, Consumer] = field(default_factory=dict)
    """Key-shared keys whose consumer had no room, by that consumer: their messages stay in the
    back end (fetches exclude them, keeping their order) until it has room again or leaves."""
    held: deque[InFlight] = field(default_factory=deque)
    """Ordered retries due again: delivered before anything new."""
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    pulls_woken: asyncio.Future[None] | None = None  # see `woken`, `kick`
    task: asyncio.Task[None] | None = None
    closed: bool = False
    own_group: bool = False
    """A broadcast consumer's own group (`group#consumer`), dropped after it is left alone."""
    anonymous: bool = False
    """The consumer gave no id (the gateway made one up): nobody can resume its group."""
    expiry_key: int = 0
    """The timer key of the group's pending drop, 0 when none is pending."""
    retry_sources: list[str] = field(default_factory=list)
    """Retry destinations that may hold this group's retries of this topic besides the current
    policy's: those of every policy its consumers used, and those of every naming scheme that
    existed when it was created (a group handed over from one client kind or policy to another
    keeps its waiting retries)."""
    placed: bool = False
    """The back end was asked to create the group where its spec starts it."""
    counts_forgotten: bool = False
    """Its last consumer left under a policy whose product then forgets the failure counts
    (`RetryPolicy.count_resets_unattended`); the next consumer settles what that means."""
    pulls: int = 0
    """Pull receives of the group going on now (the group is in use, not idle)."""
    owner: str | None = ""
    """The principal that made the subscription (`SubscriptionSpec.owner` of the first): it
    counts against that one's `max_groups_per_principal`, whoever joins later."""
    _rr: itertools.count[int] = field(default_factory=itertools.count)
    _turn: int = 0
    """Where `share` goes on dealing (an index into the consumers with room)."""
    _run: tuple[Consumer | None, int] = (None, 0)
    """`pick`'s current run: its consumer and how many more messages it may take in a row."""
    _ring: KeyRing[Consumer] = field(default_factory=lambda: KeyRing())

    @property
    def topic(self) -> str:
        return self.spec.topic

    @property
    def sources(self) -> list[str]:
        """Where the group's messages come from: the topic, the current policy's retry
        destination, then the other retry destinations it may have retries on."""
        out = [self.spec.topic]
        own = retry_source(self.policy, self.spec.topic, self.group)
        if own:
            out.append(own)
        out.extend(s for s in self.retry_sources if s != own)
        return out

    def remember(self, policy: RetryPolicy) -> None:
        """A consumer of the group uses `policy`: read its retry destination from now on."""
        own = retry_source(policy, self.spec.topic, self.group)
        if own and own not in self.retry_sources:
            self.retry_sources.append(own)

    def credit(self, enough: int | None = None) -> int:
        """The room of the consumers that get deliveries, summed; the sum stops once it reaches
        `enough` (a dispatcher that fetches at most that many needs to know no more)."""
        total = 0
        for consumer in self.receivers():
            room = consumer.room()
            if room > 0:
                total += room
                if enough is not None and total >= enough:
                    break
        return total

    def woken(self) -> asyncio.Future[None]:
        """Done at the next `kick` (a pull receive takes it before it fetches)."""
        if self.pulls_woken is None or self.pulls_woken.done():
            self.pulls_woken = asyncio.get_running_loop().create_future()
        return self.pulls_woken

    def kick(self) -> None:
        """What fetches left out may go now (a key freed, an ordered retry due): wake the
        dispatcher and the waiting pull receives (the back end wakes those for new messages)."""
        self.wake.set()
        if self.pulls_woken is not None and not self.pulls_woken.done():
            self.pulls_woken.set_result(None)

    def holder(self) -> str | None:
        """The principal whose holdings its receivers' deliveries all count in, if one."""
        owners = {c.owner for c in self.receivers()}
        return owners.pop() if len(owners) == 1 else None

    def byte_room(self, enough: int) -> int:
        """The byte room of the consumers with room that get deliveries, summed (at least 1);
        the sum stops once it reaches `enough`."""
        total = 0
        for consumer in self.receivers():
            if consumer.room() > 0:
                total += consumer.byte_room()
                if total >= enough:
                    break
        return max(1, total)

    def ordered(self) -> bool:
        """One consumer at a time gets deliveries (exclusive and failover subscriptions)."""
        return self.spec.consumer_type in (ConsumerType.EXCLUSIVE, ConsumerType.FAILOVER)

    def hand_over(self, consumer: Consumer) -> None:
        """A cancelled consumer of an ordered subscription settled the last of its deliveries:
        it leaves, and the next consumer gets deliveries from now on (until then nobody did:
        one consumer at a time, in order)."""
        if consumer in self.consumers and not consumer.closed:
            self.consumers.remove(consumer)
            consumer.set_active(False)
            self.announce()
            self.wake.set()

    def announce(self) -> None:
        """Tell each consumer whether it is the one that gets deliveries, after the consumers
        changed (exclusive and failover subscriptions have one such at a time, in the order
        the consumers subscribed; for the others every consumer gets deliveries)."""
        receivers = {id(c) for c in self.receivers()}
        for consumer in self.consumers:
            consumer.set_active(id(consumer) in receivers)

    def unpark(self) -> None:
        """Let parked keys go again whose consumer has room now or is gone."""
        if self.parked:
            gone = [k for k, c in self.parked.items() if c.closed or c.room() > 0
                    or c not in self.consumers]
            for key in gone:
                del self.parked[key]

    def receivers(self) -> list[Consumer]:
        live = [c for c in self.consumers if not c.closed]
        if self.ordered():
            return live[:1]
        return live

    def choose(self, key: str) -> Consumer | None:
        """The consumer for a message: by key hash where order or key affinity matters."""
        return self.pick(self.receivers(), key)

    def share(
        self, live: list[Consumer], got: list[StoredMessage]
    ) -> tuple[list[tuple[Consumer, list[StoredMessage]]], list[StoredMessage]]:
        """Deal `got` out round robin over `live` (shared consumption, no key rules): runs of
        up to the policy's `dispatch_run` messages to the next consumer in turn that has room
        (its room permitting), then the next one's turn. Returns each consumer's share, in
        order, and the messages none had room for. Consumers of one principal share its room
        (`Holdings`): the message that passes it is the last of the batch."""
        count = len(live)
        if not count:
            return [], got
        holder = self.holder()
        holdings = live[0].holdings
        cap = holdings.room(holder) if holder is not None and holdings is not None else None
        run = max(1, self.policy.dispatch_run)
        rooms = [max(0, c.room()) for c in live]
        byte_rooms = [c.byte_room() for c in live]
        left = sum(rooms)
        shares: list[list[StoredMessage]] = [[] for _ in live]
        turn = self._turn % count
        taken = 0
        total = len(got)
        while taken < total and left > 0:
            while not rooms[turn]:
                turn = (turn + 1) % count
            n = min(run, rooms[turn], total - taken)
            budget = byte_rooms[turn] if cap is None else min(byte_rooms[turn], cap)
            spent = 0
            for i in range(taken, taken + n):  # the bytes it may hold: the last one passes them
                spent += len(got[i].body)
                if spent >= budget:
                    n = i + 1 - taken
                    break
            byte_rooms[turn] -= spent
            shares[turn].extend(got[taken:taken + n])
            rooms[turn] -= n
            left -= n
            if byte_rooms[turn] <= 0:  # full: no more for it in this batch
                left -= rooms[turn]
                rooms[turn] = 0
            taken += n
            turn = (turn + 1) % count
            if cap is not None:
                cap -= spent
                if cap <= 0:  # the principal's room is spent: that was the batch's last
                    break
        self._turn = turn
        return _dealt(live, shares), got[taken:]

    def pick(self, live: list[Consumer], key: str) -> Consumer | None:
        """`choose` among `live` (this subscription's `receivers()`, taken once per batch)."""
        if not live:
            return None
        if self.spec.consumer_type is KEY_SHARED:
            owner = self._ring.owner(live, key)
            if key in self.parked or owner.room() <= 0:
                self.parked[key] = owner
                return None
            return owner
        if self.policy.blocks_queue:
            return live[zlib.crc32(key.encode()) % len(live)]
        if len(live) == 1:
            only = live[0]
            if only.room() <= 0:
                return None
            next(self._rr)
            return only
        runner, more = self._run
        if more > 0 and runner is not None and runner.room() > 0 and runner in live:
            self._run = (runner, more - 1)
            return runner
        with_credit = [c for c in live if c.room() > 0]
        if not with_credit:
            return None
        chosen = with_credit[next(self._rr) % len(with_credit)]
        self._run = (chosen, max(1, self.policy.dispatch_run) - 1)
        return chosen


def _dealt(
    live: list[Consumer], shares: list[list[StoredMessage]]
) -> list[tuple[Consumer, list[StoredMessage]]]:
    return [(consumer, share) for consumer, share in zip(live, shares, strict=True) if share]


def retry_source(policy: RetryPolicy, topic: str, group: str) -> str:
    """The destination where `policy` keeps a group's waiting retries as copies, or "" when
    its retries stay in the topic."""
    if policy.placement is Placement.COPY and policy.retries_enabled:
        return policy.naming.retry_topic(topic, group)
    return ""


def matches_all(expression: str) -> bool:
    """True when a tag expression lets every message through (`*` or empty)."""
    expr = expression.strip()
    return not expr or expr == "*"


def matches_tag(expression: str, tag: str) -> bool:
    """A tag expression: `*` or empty matches all, else `a || b` lists tags. Empty pieces
    (`a ||`) name no tag: they matched every untagged message."""
    if matches_all(expression):
        return True
    return bool(tag) and tag in {part.strip() for part in expression.split("||")}


async def wait_any(waiters: list[asyncio.Future[object] | asyncio.Task[object]]) -> None:
    """Return when one waiter finishes; cancel the rest (also when the caller is cancelled:
    none is left behind to fail unseen, e.g. a store's `wait` once the store has closed)."""
    try:
        await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in waiters:
            if not task.done():
                task.cancel()
            elif not task.cancelled():
                task.exception()
