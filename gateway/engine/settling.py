"""Settling deliveries: the state machine decides, the engine carries the decisions out.

A settle batch is decided item by item at one time reading, its table changes are made at once,
and its back-end work (acks, releases, retry and dead-letter copies) goes out in a few calls at
its end (`Batch`).
"""

from __future__ import annotations

from collections.abc import Sequence

from gateway.backend import OutMessage, Release
from gateway.core import events as ev
from gateway.core.machine import (
    COMMIT,
    DEAD_LETTER,
    DISCARD,
    EXTEND,
    NO_CHANGE,
    REDELIVER,
    RETRY,
    Decision,
    decide,
)
from gateway.core.properties import BORN_MS, DEAD_AT, DEAD_REASON, ORIGIN_GROUP, ORIGIN_TOPIC
from gateway.core.states import INFLIGHT, WAITING_RETRY
from gateway.engine.api import ACK, SettleAction, SettleGuard, Settlement, SettleResult
from gateway.engine.base import Batch, EngineBase
from gateway.engine.dispatch import InFlight
from gateway.errors import GatewayError, InvalidArgument, StaleReceipt

_Decided = tuple[Settlement, InFlight, Decision, int, str]
"""A settlement, its delivery, the decision, and for EXTEND the new timer key and receipt."""


class Settling(EngineBase):
    """Settle and ack; carrying out decisions (also those of deadlines and lost consumers)."""

    async def settle(
        self, settlements: Sequence[Settlement], *, atomic: bool = False,
        guard: SettleGuard | None = None,
    ) -> list[SettleResult]:
        """Settle deliveries. Each result says what went wrong for its item; with `atomic` the
        first bad item raises its error (an `InvalidArgument` naming the item,
        `settlements[i].<field>`) and nothing is applied. `guard` (the caller's access
        check, None when auth is off) is asked about each delivery's topic and group first."""
        batch = Batch()
        results: list[SettleResult] = []
        now, real = self._time.both()
        # Atomic: every item is decided before any is applied, and the first bad one raises.
        decided = self._decide_all(settlements, now, guard) if atomic else None
        with self._counted():
            if decided is None and not self.observers.full and not self._trace_debug:
                results = self._settle_all(settlements, guard, batch, now, real)
            else:
                for i, item in enumerate(settlements):
                    try:
                        one = decided[i] if decided is not None else self._decide(item, now,
                                                                                  guard)
                        results.append(self._carry_out(*one, batch, now, real))
                    except GatewayError as exc:
                        results.append(SettleResult(item.receipt, False, exc.code, exc.message))
        try:
            await self._flush(batch)
        except GatewayError as exc:
            return [
                r if not r.ok else SettleResult(r.receipt, False, exc.code, exc.message)
                for r in results
            ]
        return results

    def _settle_all(
        self, settlements: Sequence[Settlement], guard: SettleGuard | None, batch: Batch,
        now: int, real: int,
    ) -> list[SettleResult]:
        """`settle` (not atomic) when no observer takes whole transitions: each item decided
        by the state machine as one by one, its counts and settle times told once per batch
        rather than per message. A changed invisible duration (a new receipt and deadline)
        goes the one-by-one way."""
        results: list[SettleResult] = []
        told = _Told(self, real)
        for item in settlements:
            try:
                one = self._decide(item, now, guard)
                _, inf, decision, _, _ = one
                outcome = decision.outcome
                if outcome is EXTEND or outcome is NO_CHANGE:
                    results.append(self._carry_out(*one, batch, now, real))
                    continue
            except GatewayError as exc:
                results.append(SettleResult(item.receipt, False, exc.code, exc.message))
                continue
            told.add(inf, decision)
            self._enact(inf, decision, batch, real)
            results.append(SettleResult(item.receipt, True))
        told.done()
        return results

    async def fail(
        self, receipts: Sequence[str], *, guard: SettleGuard | None = None
    ) -> dict[int, SettleResult]:
        """Fail deliveries by receipt with the policy's own wait and no reason: what `settle`
        does with such FAIL settlements, without a settlement or a result for each. Returns
        the failures by position in `receipts`."""
        batch = Batch()
        failed: dict[int, SettleResult] = {}
        now, real = self._time.both()
        fast = not self.observers.full and not self._trace_debug
        inflight = self.inflight
        with self._counted():
            told = _Told(self, real) if fast else None
            for i, receipt in enumerate(receipts):
                inf = inflight.get(receipt)
                try:
                    if inf is None or inf.held:
                        raise StaleReceipt(receipt)
                    if guard is not None:
                        guard(inf.sub.spec.topic, inf.sub.spec.group)
                    decision = decide(inf.record, ev.Fail(receipt), inf.policy, now)
                except GatewayError as exc:
                    failed[i] = SettleResult(receipt, False, exc.code, exc.message)
                    continue
                if told is None or decision.outcome is NO_CHANGE:
                    self._apply(inf, decision, batch, now, real)
                    continue
                told.add(inf, decision)
                self._enact(inf, decision, batch, real)
            if told is not None:
                told.done()
        try:
            await self._flush(batch)
        except GatewayError as exc:
            return {i: failed.get(i) or SettleResult(r, False, exc.code, exc.message)
                    for i, r in enumerate(receipts)}
        return failed

    async def ack(
        self, receipts: Sequence[str], *, guard: SettleGuard | None = None
    ) -> dict[int, SettleResult]:
        """Ack deliveries by receipt: what `settle` does with ACK settlements, without building
        a settlement or a result for each. Returns the failures by position in `receipts`."""
        batch = Batch()
        failed: dict[int, SettleResult] = {}
        now, real = self._time.both()
        with self._counted():
            if not self.observers.full and not self._trace_debug:
                self._ack_all(receipts, guard, batch, failed, now, real)
            else:
                self._ack_each(receipts, guard, batch, failed, now, real)
        try:
            await self._flush(batch)
        except GatewayError as exc:
            return {i: failed.get(i) or SettleResult(r, False, exc.code, exc.message)
                    for i, r in enumerate(receipts)}
        return failed

    def _ack_each(
        self, receipts: Sequence[str], guard: SettleGuard | None, batch: Batch,
        failed: dict[int, SettleResult], now: int, real: int,
    ) -> None:
        """`ack` one by one: each decided by the state machine, each told to observers."""
        inflight = self.inflight
        for i, receipt in enumerate(receipts):
                inf = inflight.get(receipt)
                try:
                    if inf is None or inf.held:
                        raise StaleReceipt(receipt)
                    if guard is not None:
                        guard(inf.sub.spec.topic, inf.sub.spec.group)
                    decision = decide(inf.record, ev.Ack(receipt), inf.policy, now)
                    self._apply(inf, decision, batch, now, real)
                except GatewayError as exc:
                    failed[i] = SettleResult(receipt, False, exc.code, exc.message)

    def _ack_all(
        self, receipts: Sequence[str], guard: SettleGuard | None, batch: Batch,
        failed: dict[int, SettleResult], now: int, real: int,
    ) -> None:
        """`ack` as a batch, when no observer takes whole transitions: an ack of the delivery
        in flight is COMMITTED without a decision object per message (what `decide` gives for
        it), its counts and settle times told once per batch; anything else (a stale, spent or
        refused receipt) goes through `decide` as in `_ack_each`."""
        inflight = self.inflight
        taken: list[InFlight] = []  # out of the table with the plain dict's pop: counted out
        pop = dict.pop
        acks = batch.acks
        tally = self._tally if self.observers.counters else None
        spans: dict[str, list[float]] | None = {} if self.observers.settle_timers else None
        t = self._time
        anchor, scale = t.anchor_ms, t.scale
        try:
            for i, receipt in enumerate(receipts):
                inf = inflight.get(receipt)
                if inf is None or inf.held:
                    exc: GatewayError = StaleReceipt(receipt)
                    failed[i] = SettleResult(receipt, False, exc.code, exc.message)
                    continue
                record = inf.record
                try:
                    if guard is not None:
                        guard(inf.sub.spec.topic, inf.sub.spec.group)
                    if record.state is not INFLIGHT or record.receipt != receipt or not receipt:
                        self._apply(inf, decide(record, ev.Ack(receipt), inf.policy, now), batch,
                                    now, real)
                        continue
                except GatewayError as exc:
                    failed[i] = SettleResult(receipt, False, exc.code, exc.message)
                    continue
                # COMMIT, carried out as `_apply` does.
                if inf.timer:
                    self._disarm(inf)
                pop(inflight, receipt)
                taken.append(inf)
                consumer = inf.consumer
                if consumer is not None:
                    consumer.settled(receipt)
                if inf.blocks:
                    inf.sub.blocked_keys.discard(inf.stored.key)
                    inf.sub.kick()
                acks.append(inf.stored.lease)
                if tally is not None:
                    key = ("COMMITTED", record.topic, record.group, inf.policy.name, record.attempt)
                    tally[key] = tally.get(key, 0) + 1
                if spans is not None:
                    out_ms = real - anchor - int((record.delivered_at_ms - anchor) * scale)
                    spans.setdefault(inf.policy.name, []).append(max(0, out_ms) / 1000)
        finally:
            inflight.drop_all(taken)
        if spans:
            for policy, seconds in spans.items():
                self.observers.settled_all(policy, "COMMITTED", seconds)

    def _decide_all(
        self, settlements: Sequence[Settlement], now: int, guard: SettleGuard | None
    ) -> list[_Decided]:
        """Every item decided, or the first bad one's error; an `InvalidArgument` names the
        item (`settlements[i].delay_ms`: its index and the `Settlement` field), since the
        caller cannot otherwise tell which of the batch it was."""
        seen: dict[str, int] = {}
        decided: list[_Decided] = []
        for i, item in enumerate(settlements):
            first = seen.setdefault(item.receipt, i)
            if first != i:  # valid maybe, but settled once only: say so, not "unknown"
                raise StaleReceipt(item.receipt, f"repeated: settlements[{i}] settles the "
                                                 f"delivery settlements[{first}] settles")
            try:
                decided.append(self._decide(item, now, guard))
            except InvalidArgument as exc:
                raise InvalidArgument(f"settlements[{i}].{exc.field}", exc.value,
                                      exc.allowed) from None
        return decided

    def _event(self, item: Settlement) -> tuple[ev.Event, int, str]:
        match item.action:
            case SettleAction.ACK:
                return ev.Ack(item.receipt), 0, ""
            case SettleAction.FAIL:
                return ev.Fail(item.receipt, item.delay_ms, item.delay_level, item.reason), 0, ""
            case SettleAction.DEAD_LETTER:
                return ev.DeadLetterNow(item.receipt, item.reason), 0, ""
            case SettleAction.RELEASE:
                # The receipt was checked against the delivery in flight (`_decide`).
                return ev.ConsumerLost(), 0, ""
            case SettleAction.EXTEND:
                if item.invisible_ms is None:
                    raise InvalidArgument("invisible_ms", None, "required to change it")
                n, receipt = self._new_receipt()
                return ev.Extend(item.receipt, item.invisible_ms, receipt), n, receipt
        raise InvalidArgument("action", item.action, "ack, fail, extend, dead_letter or release")

    def _decide(self, item: Settlement, now: int, guard: SettleGuard | None) -> _Decided:
        """What settling `item` would do; nothing changes yet."""
        inf = self.inflight.get(item.receipt)
        if inf is None or inf.held:
            raise StaleReceipt(item.receipt)
        if guard is not None:
            guard(inf.sub.spec.topic, inf.sub.spec.group)
        if item.action is ACK:
            event: ev.Event = ev.Ack(item.receipt)
            new_n, new_receipt = 0, ""
        else:
            event, new_n, new_receipt = self._event(item)
        return item, inf, decide(inf.record, event, inf.policy, now), new_n, new_receipt

    def _carry_out(
        self,
        item: Settlement,
        inf: InFlight,
        decision: Decision,
        new_n: int,
        new_receipt: str,
        batch: Batch,
        now: int,
        real: int,
    ) -> SettleResult:
        self._apply(inf, decision, batch, now, real)
        if decision.outcome is EXTEND:
            moved = self.inflight[new_receipt]
            moved.timer = new_n
            deadline = self._arm(new_n, new_receipt, moved.record, now, real)
            return SettleResult(item.receipt, True, new_receipt=new_receipt, deadline_ms=deadline)
        return SettleResult(item.receipt, True)

    def _apply(
        self, inf: InFlight, decision: Decision, batch: Batch, now: int, real: int
    ) -> None:
        """Carry out a decision: update tables now, queue back-end work in `batch`. `now` and
        `real` are the batch's policy and real times."""
        self._emit(inf, inf.record.state, decision, real, now)
        if decision.outcome is not NO_CHANGE:
            self._enact(inf, decision, batch, real)

    def _enact(self, inf: InFlight, decision: Decision, batch: Batch, real: int) -> None:
        """`_apply` after the observers were told: the tables now, the back-end work into
        `batch`. Not for NO_CHANGE."""
        record = decision.record
        stored = inf.stored
        sub = inf.sub
        policy = inf.policy
        outcome = decision.outcome
        self._disarm(inf)
        if outcome is EXTEND:
            self.inflight.pop(inf.receipt, None)
            moved = InFlight(record.receipt, record, stored, sub, inf.consumer, policy,
                             blocks=inf.blocks, owner=inf.owner)
            self.inflight[record.receipt] = moved
            if inf.consumer is not None:
                inf.consumer.moved(inf.receipt, record.receipt)
            return
        self.inflight.pop(inf.receipt, None)
        if inf.consumer is not None:
            inf.consumer.settled(inf.receipt)
        if outcome is REDELIVER and policy.blocks_queue:
            # Pushed or pulled alike: the key stays blocked until this retry goes out.
            self._hold(inf, decision, batch, real)
            return
        if inf.blocks:
            sub.blocked_keys.discard(stored.key)
            sub.kick()
        if outcome is COMMIT or outcome is DISCARD:
            batch.acks.append(stored.lease)
            return
        if outcome is REDELIVER:
            batch.releases.append(
                Release(stored.lease, real + self._time.real_ms(decision.delay_ms),
                        record.attempt, record.retries)
            )
            return
        dialect = self._registry.dialect(policy.dialect)
        props = dict(stored.properties)
        props.setdefault(ORIGIN_TOPIC, record.topic)
        props.setdefault(BORN_MS, str(stored.publish_ms))  # the copy keeps the first publish time
        props[ORIGIN_GROUP] = record.group  # the group that made this copy takes it back
        if outcome is RETRY and decision.destination:
            copy = dialect.retry_properties(
                props, topic=record.topic, retry_topic=decision.destination,
                message_id=record.message_id, retries=record.retries,
            )
            batch.copies[decision.destination].append(
                OutMessage(stored.body, copy, stored.key, stored.tag,
                           real + self._time.real_ms(decision.delay_ms), record.message_id,
                           record.attempt, record.retries)
            )
            batch.acks.append(stored.lease)
        elif outcome is DEAD_LETTER and decision.destination:
            copy = dialect.dead_letter_properties(
                props, topic=record.topic, dead_letter_topic=decision.destination,
                message_id=record.message_id, retries=record.retries, reason=decision.reason,
            )
            copy[DEAD_REASON] = decision.reason
            copy[DEAD_AT] = str(real)
            batch.copies[decision.destination].append(
                OutMessage(stored.body, copy, stored.key, stored.tag, 0, record.message_id,
                           record.attempt, record.retries)
            )
            batch.acks.append(stored.lease)

    def _hold(self, inf: InFlight, decision: Decision, batch: Batch, real: int) -> None:
        """Ordered queue: keep the failed message (and its key blocked) until its retry is due
        (the batch's retries due at one time share one timer entry, armed by `_flush`)."""
        due = real + self._time.real_ms(decision.delay_ms)
        n = batch.hold_keys.get(due)
        if n is None:
            n = batch.hold_keys[due] = next(self._counter)
            batch.held[n] = (due, [])
        _, receipt = self._new_receipt()
        held = InFlight(receipt, decision.record, inf.stored, inf.sub, inf.consumer, inf.policy,
                        held=True, due_ms=due, timer=n, blocks=inf.blocks, owner=inf.owner)
        self.inflight[receipt] = held
        batch.held[n][1].append(receipt)


class _Told:
    """A batch's settlements as the counting observers and settle timers learn of them: counted
    into the open batch's tally and told once at its end (`done`), not one call per message.
    Only while no observer takes whole transitions (they are told by `_emit`)."""

    __slots__ = ("anchor", "observers", "real", "scale", "spans", "tally")

    def __init__(self, engine: Settling, real: int) -> None:
        observers = engine.observers
        self.observers = observers
        self.tally = engine._tally if observers.counters else None
        self.spans: dict[tuple[str, str], list[float]] | None = (
            {} if observers.settle_timers else None)
        time = engine.time
        self.anchor, self.scale, self.real = time.anchor_ms, time.scale, real

    def add(self, inf: InFlight, decision: Decision) -> None:
        """A delivery settled under `decision` (not NO_CHANGE, not EXTEND), as `_emit` tells."""
        record = decision.record
        state = record.state
        if decision.outcome is REDELIVER and state is INFLIGHT:
            state = WAITING_RETRY
        to_state: str = state._value_
        tally = self.tally
        if tally is not None:
            key = (to_state, record.topic, record.group, inf.policy.name, record.attempt)
            tally[key] = tally.get(key, 0) + 1
        spans = self.spans
        if spans is not None:
            anchor = self.anchor
            out_ms = self.real - anchor - int((record.delivered_at_ms - anchor) * self.scale)
            spans.setdefault((inf.policy.name, to_state), []).append(max(0, out_ms) / 1000)

    def done(self) -> None:
        if self.spans:
            for (policy, to_state), seconds in self.spans.items():
                self.observers.settled_all(policy, to_state, seconds)
