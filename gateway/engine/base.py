"""The engine's state and the helpers every part of it shares.

The engine is one object built in layers, one module each (each layer sees the ones below it):

* `base` (here): the tables (subscriptions, deliveries in flight, timer keys), the time base,
  receipts, arming deadlines, telling observers, carrying out a batch's back-end work;
* `settling`: settle, ack, and carrying out the state machine's decisions;
* `expiry`: deadlines that pass and broadcast groups left idle;
* `delivering`: subscriptions, push dispatch and pull receives;
* `engine`: lifecycle, publishing and the read-only queries (`gateway.engine.port`).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import secrets
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import structlog

from gateway.backend import Backend, Lease, OutMessage, Release, StoredMessage
from gateway.core.machine import EXTEND, REDELIVER, Decision
from gateway.core.policy import RetryPolicy
from gateway.core.properties import TRACEPARENT, TRACESTATE
from gateway.core.record import Record
from gateway.core.registry import Registry
from gateway.core.states import INFLIGHT, WAITING_RETRY, State
from gateway.engine.api import SubscriptionSpec
from gateway.engine.budget import PublishBudget
from gateway.engine.clock import Clock, TimeBase
from gateway.engine.config import EngineConfig
from gateway.engine.counted import Counted
from gateway.engine.dispatch import InFlight, Subscription
from gateway.engine.holdings import Holdings
from gateway.engine.inflight import InFlightTable
from gateway.engine.observe import Observer, Observers, Tally, Transition
from gateway.engine.timers import TimerService
from gateway.errors import (
    InvalidArgument,
    NotFound,
    TooManyOwnStoredGroups,
    TooManyOwnTopics,
    TooManyStoredGroups,
    TooManyTopics,
)
from gateway.limits import check_name

log = structlog.get_logger("gateway.engine")

BROADCAST = "broadcast"
"""The option that turns a policy's broadcasting mode on: what a spec's `broadcast` sets."""
RECEIPT_POOL = 1024
"""Receipts' random parts drawn per call to the system's random source."""
DUE_REMEMBERED = 200_000
"""Retries whose due time the engine keeps for its observers (`_due`), at most: about 200 bytes
each. Past it the oldest are forgotten; such a retry, delivered again in place, then shows no
WAITING_RETRY -> READY transition (a retry copy still does: its deliver time says when)."""


@dataclass(eq=False, slots=True)
class Due:
    """Deliveries whose deadlines share one timer key: a dispatch batch's, handed out at one
    time under one policy, have one deadline, and so one entry in the timer wheel (a single
    delivery has a key of its own). `live` counts those not settled yet; at 0 the entry is
    cancelled. Settled receipts are dropped from `receipts` once they are most of it."""

    receipts: list[str]
    live: int


COMPACT_AT = 64
"""A shared timer entry with more receipts than this drops its settled ones once three in four
are settled (it keeps at most four times as many as are live)."""


class Batch:
    """Back-end work collected while settling, done in as few calls as possible."""

    def __init__(self) -> None:
        self.copies: dict[str, list[OutMessage]] = defaultdict(list)
        self.acks: list[Lease] = []
        self.releases: list[Release] = []
        self.held: dict[int, tuple[int, list[str]]] = {}
        """Ordered retries held in the engine, by timer key: their due time and receipts."""
        self.hold_keys: dict[int, int] = {}
        """The timer key of each due time in `held`."""

    def empty(self) -> bool:
        return not (self.copies or self.acks or self.releases)


class EngineBase:
    """The engine's state and shared helpers (see the module docstring for the layers)."""

    def __init__(
        self,
        backend: Backend,
        registry: Registry,
        clock: Clock,
        config: EngineConfig | None = None,
        observers: Sequence[Observer] = (),
    ) -> None:
        self.backend = backend
        """The back end (the engine's own: callers use the engine's methods)."""
        self._registry = registry
        self.clock = clock
        self._config = config or EngineConfig()
        self._time = TimeBase(clock, self._config.time_scale)
        self.publish_budget = PublishBudget(self._config.max_publish_bytes)
        """The bytes of publishes the back end stores at once (`Engine.publish`)."""
        self.observers = Observers(observers)
        self.subscriptions: dict[tuple[str, str], Subscription] = {}
        """By (topic, group): the engine's own table (callers use `group_state`)."""
        self.holdings = Holdings(self._config.max_held_bytes)
        """The bytes of bodies each principal's deliveries hold (`max_held_bytes`)."""
        self.inflight = InFlightTable(self.holdings)
        """By receipt: the engine's own table (callers use `unsettled`, `unsettled_count`)."""
        self._timer_receipts: dict[int, Due] = {}
        """By timer key: the deliveries whose deadline it stands for."""
        self._deadlines = 0
        """Deliveries (and held ordered retries) with a deadline armed, not yet passed."""
        self._expiring: dict[int, Subscription] = {}
        """Broadcast consumers' own groups waiting to be dropped, by timer key."""
        self._counter = itertools.count(1)
        self._random: list[str] = []
        self._epoch = secrets.token_hex(4)
        self.timers = TimerService(clock, self._on_due)
        """The one timer structure (callers use `pending_timers`, `run_due_timers`)."""
        self._accepting = True
        self._tasks: set[asyncio.Task[None]] = set()
        self._known_topics: set[str] = set(self._config.topics)
        """Topics known to exist (`known_topic`)."""
        config = self._config
        self._topic_count = Counted(config.max_topics, lambda: self.backend.topics(),
                                    share=config.max_topics_per_principal)
        """Topics counted against `max_topics` and its shares (`_check_topic`)."""
        self._group_count = Counted(config.max_stored_groups, lambda: self.backend.groups(),
                                    share=config.max_stored_groups_per_principal)
        """(topic, group) pairs counted against `max_stored_groups` and its shares
        (`_check_group`)."""
        self._tally: Tally | None = None
        """While a batch is carried out: its transition counts, given to the counting observers
        once at its end (see `_counted`)."""
        self._trace: Any = log.bind()
        """The logger bound once (not per transition), for the per-transition debug line."""
        self._trace_debug = debug_enabled(self._trace)
        self._due: dict[tuple[str, str], int] = {}
        """While full observers listen: by (group, message id), the real time at which a failed
        message's retry falls due, told to observers (WAITING_RETRY -> READY at that time) when
        the message is delivered again. Bounded by `DUE_REMEMBERED`."""

    @property
    def registry(self) -> Registry:
        """The policies, naming schemes and dialects the engine was given."""
        return self._registry

    @property
    def config(self) -> EngineConfig:
        """The engine's settings."""
        return self._config

    @property
    def time(self) -> TimeBase:
        """Real time and policy time, and the one conversion between them."""
        return self._time

    @property
    def accepting(self) -> bool:
        """False once the engine stops dispatching (drain or shutdown)."""
        return self._accepting

    def now_ms(self) -> int:
        """The engine's clock: real wall-clock ms."""
        return self.clock.now_ms()

    @property
    def positions(self) -> bool:
        """True when the back end keeps groups' positions (`Backend.seekable`)."""
        return self.backend.seekable

    @property
    def quiet_reads(self) -> bool:
        """True when reading messages without taking them leaves them as they were
        (`Backend.quiet_peeks`)."""
        return self.backend.quiet_peeks

    def _on_due(self, keys: list[int]) -> None:
        """Timer keys whose deadlines passed (`expiry` carries them out)."""
        raise NotImplementedError

    # ----------------------------------------------------------- validation
    def policy_for(self, spec: SubscriptionSpec) -> RetryPolicy:
        """The validated policy a subscription gets. A policy without a broadcasting mode
        refuses `broadcast` (the spec's field, not an option the subscriber set)."""
        check_name("topic", spec.topic)
        check_name("group", spec.group)
        registry = self._registry
        kind = spec.consumer_type.value
        if not spec.broadcast or BROADCAST in spec.options:
            return registry.policy(spec.policy, spec.options, spec.naming, kind)
        try:
            return registry.policy(spec.policy, {**spec.options, BROADCAST: "true"}, spec.naming,
                                   kind)
        except InvalidArgument as exc:
            if exc.field != "policy_options" or exc.value != BROADCAST:
                raise
            modes = sorted(p for p in registry.policies if registry.traits_of(p).broadcast)
            raise InvalidArgument(BROADCAST, True, f"false: policy {spec.policy} has no "
                                  f"broadcasting mode (policies that broadcast: "
                                  f"{', '.join(modes) or 'none'})") from None

    async def _check_topic(self, topic: str, owner: str | None = "") -> None:
        """Refuse a topic that does not exist when auto-create is off, or a new one when the
        back end holds `max_topics` or `owner` made its share of them (`gateway.engine.counted`;
        owner None: the gateway's own, no share)."""
        config = self._config
        if not config.auto_create:
            if topic not in self._known_topics:
                self._known_topics.update(await self.backend.topics())
                if topic not in self._known_topics:
                    raise NotFound(f"topic {topic!r} does not exist and auto-create is off")
            return
        refusal = await self._topic_count.admit(topic, owner)
        if refusal == "limit":
            raise TooManyTopics(config.max_topics)
        if refusal == "share":
            raise TooManyOwnTopics(self._topic_count.share, owner or "")

    async def _check_group(self, topic: str, group: str, owner: str | None = "") -> None:
        """Refuse a group the back end does not keep yet once it keeps `max_stored_groups` or
        `owner` made its share of them (`gateway.engine.counted`); not the gateway's own
        (`owner` None) nor one it runs."""
        if owner is None or (topic, group) in self.subscriptions:
            return
        refusal = await self._group_count.admit((topic, group), owner)
        if refusal == "limit":
            raise TooManyStoredGroups(self._config.max_stored_groups)
        if refusal == "share":
            raise TooManyOwnStoredGroups(self._group_count.share, owner)

    # ------------------------------------------------------------- receipts
    def _new_receipt(self) -> tuple[int, str]:
        n = next(self._counter)
        if not self._random:
            # One draw of random bytes serves many receipts.
            pool = secrets.token_hex(4 * RECEIPT_POOL)
            self._random = [pool[i:i + 8] for i in range(0, len(pool), 8)]
        return n, f"{self._epoch}.{n}.{self._random.pop()}"

    def _new_receipts(self, count: int) -> list[str]:
        """`count` receipts, as `_new_receipt` makes them (their numbers are not needed)."""
        counter, epoch, pool = self._counter, self._epoch, self._random
        out: list[str] = []
        for _ in range(count):
            if not pool:
                self._new_receipt()  # refills the pool (and uses one number)
                pool = self._random
            out.append(f"{epoch}.{next(counter)}.{pool.pop()}")
        return out

    def _arm(self, n: int, receipt: str, record: Record, now: int, real: int) -> int:
        """Schedule a delivery's deadline under timer key `n`; its real time (0: none). `now`
        and `real` are the batch's policy and real times."""
        if not record.deadline_ms:
            return 0
        deadline = real + self._time.real_ms(record.deadline_ms - now)
        self._arm_all(n, [receipt], deadline)
        return deadline

    def _arm_all(self, n: int, receipts: list[str], deadline_real: int) -> None:
        """Schedule one deadline (real time) for the deliveries `receipts` under timer key `n`
        (each InFlight's `timer` is `n`)."""
        self._timer_receipts[n] = Due(receipts, len(receipts))
        self._deadlines += len(receipts)
        self.timers.schedule(deadline_real, n)

    def _disarm(self, inf: InFlight) -> None:
        """Cancel the deadline of a delivery that is settled (or moves on under a new receipt),
        so settled deliveries do not keep timer entries until their deadlines: its timer
        entry goes once every delivery sharing it is settled."""
        n = inf.timer
        if not n:
            return
        inf.timer = 0
        due = self._timer_receipts.get(n)
        if due is None:
            return
        self._deadlines -= 1
        live = due.live = due.live - 1
        if live <= 0:
            del self._timer_receipts[n]
            self.timers.cancel(n)
        elif live * 4 < len(due.receipts) and len(due.receipts) > COMPACT_AT:
            inflight = self.inflight
            due.receipts = [r for r in due.receipts
                            if (other := inflight.get(r)) is not None and other.timer == n]

    def _take_due(self, n: int) -> list[InFlight]:
        """The deliveries whose deadline timer key `n` stood for, still waiting on it (their
        timer is cleared: it has fired)."""
        due = self._timer_receipts.pop(n, None)
        if due is None:
            return []
        inflight = self.inflight
        found: list[InFlight] = []
        for receipt in due.receipts:
            inf = inflight.get(receipt)
            if inf is not None and inf.timer == n:
                inf.timer = 0
                found.append(inf)
        self._deadlines -= len(found)
        return found

    async def _flush(self, batch: Batch) -> None:
        """The batch's back-end work in one call: copies first, then acks and releases
        (`Backend.carry_out`; the embedded store commits them in one transaction). The
        batch's held ordered retries get their timer entries first, one per due time."""
        for n, (due, receipts) in batch.held.items():
            self._arm_all(n, receipts, due)
        batch.held.clear()
        if batch.empty():
            return
        if batch.copies:
            self._known_topics.update(batch.copies)
        # One call: a back end may make the copies and the acks they replace all-or-nothing.
        await self.backend.carry_out(batch.copies, batch.acks, batch.releases)

    # ------------------------------------------------------------ observers
    def _count_all(
        self, to_state: str, group: str, policy: str, counts: dict[tuple[str, int], int]
    ) -> None:
        """Count a batch's transitions to `to_state`, `counts` by (topic, attempt), as `_emit`
        counts each: into the open batch's tally, or told to the counters now."""
        tally = self._tally
        if tally is None:
            for (topic, attempt), k in counts.items():
                self.observers.count_n(to_state, topic, group, policy, attempt, k)
            return
        for (topic, attempt), k in counts.items():
            key = (to_state, topic, group, policy, attempt)
            tally[key] = tally.get(key, 0) + k

    @contextlib.contextmanager
    def _counted(self) -> Iterator[None]:
        """Within the block, transitions are counted in one dict, handed to the counting
        observers at its end. A batch that starts while this one awaits takes the dict's place;
        this one's later transitions then go into that batch's dict, or are counted one by one
        once it has ended: each is counted once."""
        tally: Tally = {}
        self._tally = tally
        try:
            yield
        finally:
            if self._tally is tally:
                self._tally = None
            if tally:
                self.observers.count_all(tally)

    def _emit(
        self, inf: InFlight, before: State, decision: Decision, ts_ms: int, now: int = 0
    ) -> None:
        """Tell observers (and the debug log) about a state change made at real time `ts_ms`
        (policy time `now`, needed for a changed invisible duration). Nothing is built when
        nobody listens."""
        record = decision.record
        to_state = record.state
        outcome = decision.outcome
        extend = outcome is EXTEND
        if before is to_state and outcome is not REDELIVER and not extend:
            return
        observers = self.observers
        full = observers.full or self._trace_debug
        if not full and not observers.counters and not observers.settle_timers:
            return
        policy = inf.policy
        if outcome is REDELIVER and to_state is INFLIGHT:
            to_state = WAITING_RETRY
        to_name: str = to_state._value_
        if before is INFLIGHT and observers.settle_timers and not extend:
            # How long the delivery was out, in real time (delivered_at_ms is policy time).
            t = self._time
            out_ms = ts_ms - t.anchor_ms - int((record.delivered_at_ms - t.anchor_ms) * t.scale)
            observers.settled(policy.name, to_name, max(0, out_ms) / 1000)
        if observers.counters and not extend:
            tally = self._tally
            if tally is None:
                observers.count(to_name, record.topic, record.group, policy.name, record.attempt)
            else:
                key = (to_name, record.topic, record.group, policy.name, record.attempt)
                tally[key] = tally.get(key, 0) + 1
        if not full:
            return
        delay_ms = decision.delay_ms
        reason = decision.reason
        if extend:
            # The new invisible period, counted from the call (policy ms, as every delay).
            delay_ms = max(0, record.deadline_ms - now)
            reason = "invisible duration changed"
        elif to_state is WAITING_RETRY:
            self._remember_due(record.group, record.message_id,
                               ts_ms + self._time.real_ms(delay_ms))
        props = inf.stored.properties
        transition = Transition(
            ts_ms, policy.dialect, policy.name, self._config.backend_name, record.topic,
            record.group, record.message_id, record.attempt, before._value_, to_name,
            delay_ms, reason, decision.destination or "",
            props.get(TRACEPARENT, ""), props.get(TRACESTATE, ""),
        )
        if self._trace_debug:
            self._trace.debug("transition", message_id=record.message_id, topic=record.topic,
                              group=record.group, attempt=record.attempt, state=to_name)
        observers.emit_full(transition)

    # ------------------------------------------- how a message became READY
    def _listening(self) -> bool:
        """True when some observer (or the debug log) takes whole transitions."""
        return bool(self.observers.full) or self._trace_debug

    def _remember_due(self, group: str, message_id: str, due_real_ms: int) -> None:
        due = self._due
        due[(group, message_id)] = due_real_ms
        if len(due) > DUE_REMEMBERED:
            del due[next(iter(due))]  # the oldest entry (dicts keep insertion order)

    def _emit_arrival(
        self, policy: RetryPolicy, stored: StoredMessage, record: Record, real: int
    ) -> None:
        """Before delivering `stored` (as `record`, READY): tell observers how it became READY,
        which the engine learns only now that the back end hands it out. A retry falls due
        (WAITING_RETRY -> READY at its due time), or a message comes for the first time to
        this group (its first event, "" -> READY at its publish or deliver time). A message
        made READY again at once (a lost consumer, a simple consumer's timeout) was told about
        when it happened."""
        due = self._due.pop((record.group, record.message_id), None)
        if due is not None:
            self._emit_ready(policy, record, WAITING_RETRY, min(due, real), "retry due")
        elif stored.attempt == 0:
            published = min(max(stored.publish_ms, stored.deliver_at_ms), real)
            self._emit_ready(policy, record, None, published, "published")
        elif stored.deliver_at_ms and stored.topic != record.topic:
            # A retry copy whose due time this process does not know (written before a
            # restart, or forgotten): its deliver time is when it fell due.
            self._emit_ready(policy, record, WAITING_RETRY, min(stored.deliver_at_ms, real),
                             "retry due")

    def _emit_ready(
        self, policy: RetryPolicy, record: Record, before: State | None, ts_ms: int, reason: str
    ) -> None:
        """Tell the observers that take whole transitions that `record` became READY (`before`
        None: its first event). Not counted: the counters count deliveries and their ends."""
        transition = Transition(
            ts_ms, policy.dialect, policy.name, self._config.backend_name, record.topic,
            record.group, record.message_id, record.attempt,
            "" if before is None else before._value_, "READY", 0, reason, "",
        )
        if self._trace_debug:
            self._trace.debug("transition", message_id=record.message_id, topic=record.topic,
                              group=record.group, attempt=record.attempt, state="READY")
        self.observers.emit_full(transition)


def debug_enabled(logger: Any) -> bool:
    """False only when the bound logger surely drops debug lines (structlog's level filter)."""
    is_enabled = getattr(logger, "is_enabled_for", None)
    if is_enabled is None:
        return True
    try:
        return bool(is_enabled(10))
    except Exception:  # an unexpected logger: keep logging
        return True
