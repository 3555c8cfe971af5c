"""What the state machine knows of one message for one consumer group."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.core.states import State


@dataclass(frozen=True, slots=True, init=False)
class Record:
    """An immutable value; `evolve` is the cheap copy-with-changes the state machine uses.

    The constructor and `evolve` fill the slots directly: a frozen dataclass's generated
    `__init__` and `dataclasses.replace` cost several times more, twice per message."""

    message_id: str
    topic: str
    """The original topic (retry copies keep it)."""
    group: str
    state: State
    attempt: int
    """Deliveries so far; the delivery in flight counts (1 on the first delivery)."""
    retries: int
    """Failures counted against max retries (RocketMQ reconsumeTimes, Pulsar RECONSUMETIMES)."""
    visible_at_ms: int
    """READY / WAITING_RETRY: when the message may be delivered."""
    deadline_ms: int
    """INFLIGHT: when the delivery times out (0: no deadline)."""
    delivered_at_ms: int
    receipt: str
    """INFLIGHT: the receipt that may settle this delivery; "" once spent (failed, invisible)."""

    def __init__(
        self,
        message_id: str,
        topic: str,
        group: str,
        state: State = State.READY,
        attempt: int = 0,
        retries: int = 0,
        visible_at_ms: int = 0,
        deadline_ms: int = 0,
        delivered_at_ms: int = 0,
        receipt: str = "",
    ) -> None:
        _message_id(self, message_id)
        _topic(self, topic)
        _group(self, group)
        _state(self, state)
        _attempt(self, attempt)
        _retries(self, retries)
        _visible_at_ms(self, visible_at_ms)
        _deadline_ms(self, deadline_ms)
        _delivered_at_ms(self, delivered_at_ms)
        _receipt(self, receipt)

    def evolve(
        self,
        *,
        state: State | None = None,
        attempt: int | None = None,
        retries: int | None = None,
        visible_at_ms: int | None = None,
        deadline_ms: int | None = None,
        delivered_at_ms: int | None = None,
        receipt: str | None = None,
    ) -> Record:
        """A new record with the given fields changed (None keeps a field); `self` is untouched.

        The identity (message id, topic, group) never changes along a message's life."""
        new = _new(Record)
        _message_id(new, self.message_id)
        _topic(new, self.topic)
        _group(new, self.group)
        _state(new, self.state if state is None else state)
        _attempt(new, self.attempt if attempt is None else attempt)
        _retries(new, self.retries if retries is None else retries)
        _visible_at_ms(new, self.visible_at_ms if visible_at_ms is None else visible_at_ms)
        _deadline_ms(new, self.deadline_ms if deadline_ms is None else deadline_ms)
        _delivered_at_ms(new, self.delivered_at_ms if delivered_at_ms is None else delivered_at_ms)
        _receipt(new, self.receipt if receipt is None else receipt)
        return new


# The slots' own setters: they store without passing through the frozen `__setattr__`.
_new = object.__new__
_message_id = Record.__dict__["message_id"].__set__
_topic = Record.__dict__["topic"].__set__
_group = Record.__dict__["group"].__set__
_state = Record.__dict__["state"].__set__
_attempt = Record.__dict__["attempt"].__set__
_retries = Record.__dict__["retries"].__set__
_visible_at_ms = Record.__dict__["visible_at_ms"].__set__
_deadline_ms = Record.__dict__["deadline_ms"].__set__
_delivered_at_ms = Record.__dict__["delivered_at_ms"].__set__
_receipt = Record.__dict__["receipt"].__set__

