"""Observer hooks: every state transition the engine makes, for telemetry, metrics and logs.

Observers must not slow the hot path; their failures are logged, never raised.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, cast

import structlog

from gateway.backend import OutMessage
from gateway.values import value

log = structlog.get_logger("gateway.engine")


@value
class Transition:
    """One state change of one message for one group, as observers see it (built for every
    delivery and every settle while an observer listens).

    Every change is told, in order, with the state left: `""` -> READY (the message's first
    event in the group, at its publish or deliver time), READY -> INFLIGHT (a delivery),
    INFLIGHT -> WAITING_RETRY (`delay_ms`: the wait set), WAITING_RETRY -> READY (the retry
    falls due, at its due time, told when the message goes out again), INFLIGHT -> READY (given
    back at once), INFLIGHT -> INFLIGHT (a changed invisible duration, `delay_ms` the new one),
    INFLIGHT -> COMMITTED / DEAD_LETTERED / DISCARDED. The READY and INFLIGHT -> INFLIGHT ones
    go to observers that take whole transitions only; counting observers count deliveries and
    their ends, as before."""

    ts_ms: int
    dialect: str
    policy: str
    backend: str
    topic: str
    group: str
    message_id: str
    attempt: int
    from_state: str
    to_state: str
    delay_ms: int = 0
    reason: str = ""
    destination: str = ""
    traceparent: str = ""
    """The message's W3C trace context (`gateway.core.properties.TRACEPARENT`; "" for none)."""
    tracestate: str = ""


Tally = dict[tuple[str, str, str, str, int], int]
"""Transition counts by (to state, topic, group, policy, attempt)."""


class Observer(Protocol):
    def on_transition(self, transition: Transition) -> None: ...


class TransitionCounter(Protocol):
    """An observer that only counts transitions may also offer `count_transition`: the engine
    then calls it with the few fields it needs and builds no `Transition` for it."""

    def on_transition(self, transition: Transition) -> None: ...

    def count_transition(
        self, to_state: str, topic: str, group: str, policy: str, attempt: int, n: int = 1
    ) -> None: ...


class SettleTimer(Protocol):
    """An observer that offers `observe_settle` is told how long each settled delivery was out:
    from its delivery to its settlement (or deadline), in real seconds, with the state the
    settlement led to. One that also offers `observe_settles(policy, to_state, seconds)` gets a
    batch settled alike in one call (a list of seconds)."""

    def on_transition(self, transition: Transition) -> None: ...

    def observe_settle(self, policy: str, to_state: str, seconds: float) -> None: ...


PublishDone = Callable[[Sequence[str] | None], None]
"""Told the ids of a published batch once it is durable, or None when publishing failed."""


class PublishObserver(Protocol):
    """An observer that also watches publishes offers `on_publish`: called before a batch is
    stored, it may return the messages with properties added (a trace context, say; never
    other changes) and a callback for the outcome."""

    def on_publish(
        self, topic: str, messages: Sequence[OutMessage]
    ) -> tuple[Sequence[OutMessage], PublishDone]: ...


class GroupForgetter(Protocol):
    """An observer that keeps something per group offers `forget_group`: told when the engine
    drops a group (a reader's non-durable subscription, a broadcast consumer's own group), it
    forgets what it kept for it."""

    def on_transition(self, transition: Transition) -> None: ...

    def forget_group(self, topic: str, group: str) -> None: ...


class Observers:
    """Fans transitions out to observers, logging (never raising) their failures."""

    def __init__(self, observers: Sequence[Observer] = ()) -> None:
        self.observers: list[Observer] = []
        self.full: list[Observer] = []
        """Observers that need the whole `Transition`."""
        self.counters: list[TransitionCounter] = []
        """Observers served by `count_transition`."""
        self.settle_timers: list[SettleTimer] = []
        """Observers told each settlement's latency (`observe_settle`)."""
        self.publishing: list[PublishObserver] = []
        """Observers that watch publishes too (`on_publish`)."""
        self.forgetting: list[GroupForgetter] = []
        """Observers told when a group is dropped (`forget_group`)."""
        for observer in observers:
            self.add(observer)

    def add(self, observer: Observer) -> None:
        self.observers.append(observer)
        if callable(getattr(observer, "observe_settle", None)):
            self.settle_timers.append(cast(SettleTimer, observer))
        if callable(getattr(observer, "on_publish", None)):
            self.publishing.append(cast(PublishObserver, observer))
        if callable(getattr(observer, "forget_group", None)):
            self.forgetting.append(cast(GroupForgetter, observer))
        if callable(getattr(observer, "count_transition", None)):
            self.counters.append(cast(TransitionCounter, observer))
        else:
            self.full.append(observer)

    def before_publish(
        self, topic: str, messages: Sequence[OutMessage]
    ) -> tuple[Sequence[OutMessage], list[PublishDone]]:
        """Give a batch about to be stored to the publish observers: the messages to store and
        the callbacks to tell the outcome (`published`)."""
        done: list[PublishDone] = []
        for observer in self.publishing:
            try:
                messages, callback = observer.on_publish(topic, messages)
            except Exception:  # observers never break message flow
                log.exception("observer failed", observer=type(observer).__name__)
                continue
            done.append(callback)
        return messages, done

    @staticmethod
    def published(done: list[PublishDone], ids: Sequence[str] | None) -> None:
        """Tell the publish observers the outcome of their batch (ids; None: it failed)."""
        for callback in done:
            try:
                callback(ids)
            except Exception:  # observers never break message flow
                log.exception("observer failed", observer="publish")

    def settled(self, policy: str, to_state: str, seconds: float) -> None:
        """Tell the settle timers how long a settled delivery was out."""
        for timer in self.settle_timers:
            try:
                timer.observe_settle(policy, to_state, seconds)
            except Exception:  # observers never break message flow
                log.exception("observer failed", observer=type(timer).__name__)

    def settled_all(self, policy: str, to_state: str, seconds: list[float]) -> None:
        """`settled` for a batch of deliveries settled alike: each settle timer that offers
        `observe_settles` gets the batch in one call, the others one call each."""
        for timer in self.settle_timers:
            try:
                many = getattr(timer, "observe_settles", None)
                if many is not None:
                    many(policy, to_state, seconds)
                else:
                    for one in seconds:
                        timer.observe_settle(policy, to_state, one)
            except Exception:  # observers never break message flow
                log.exception("observer failed", observer=type(timer).__name__)

    def group_dropped(self, topic: str, group: str) -> None:
        """Tell the observers that keep something per group that `group` is gone."""
        for observer in self.forgetting:
            try:
                observer.forget_group(topic, group)
            except Exception:  # observers never break message flow
                log.exception("observer failed", observer=type(observer).__name__)

    def emit(self, transition: Transition) -> None:
        """Give `transition` to every observer."""
        for observer in self.observers:
            try:
                observer.on_transition(transition)
            except Exception:  # observers never break message flow
                log.exception("observer failed", observer=type(observer).__name__)

    def emit_full(self, transition: Transition) -> None:
        """Give `transition` to the observers that need it whole (see `count`)."""
        for observer in self.full:
            try:
                observer.on_transition(transition)
            except Exception:  # observers never break message flow
                log.exception("observer failed", observer=type(observer).__name__)

    def count(self, to_state: str, topic: str, group: str, policy: str, attempt: int) -> None:
        """Tell the counting observers about a transition (no `Transition` is built)."""
        for counter in self.counters:
            try:
                counter.count_transition(to_state, topic, group, policy, attempt)
            except Exception:  # observers never break message flow
                log.exception("observer failed", observer=type(counter).__name__)

    def count_n(
        self, to_state: str, topic: str, group: str, policy: str, attempt: int, n: int
    ) -> None:
        """Tell the counting observers about `n` like transitions at once."""
        for counter in self.counters:
            try:
                counter.count_transition(to_state, topic, group, policy, attempt, n)
            except Exception:  # observers never break message flow
                log.exception("observer failed", observer=type(counter).__name__)

    def count_all(self, tally: Tally) -> None:
        """Tell the counting observers about a batch's transitions, `n` at a time."""
        for counter in self.counters:
            try:
                for (to_state, topic, group, policy, attempt), n in tally.items():
                    counter.count_transition(to_state, topic, group, policy, attempt, n)
            except Exception:  # observers never break message flow
                log.exception("observer failed", observer=type(counter).__name__)
