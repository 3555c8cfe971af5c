"""What the state machine knows of one message for one consumer group."""

from __future__ import annotations

from gateway.core.states import State
from gateway.values import value


@value
class Record:
    """An immutable value; `evolve` is the copy-with-changes the state machine uses (cheaper
    than `dataclasses.replace`)."""

    message_id: str
    topic: str
    """The original topic (retry copies keep it)."""
    group: str
    state: State = State.READY
    attempt: int = 0
    """Deliveries so far; the delivery in flight counts (1 on the first delivery)."""
    retries: int = 0
    """Failures counted against max retries (the retry count a product shows its consumers)."""
    visible_at_ms: int = 0
    """READY / WAITING_RETRY: when the message may be delivered."""
    deadline_ms: int = 0
    """INFLIGHT: when the delivery times out (0: no deadline)."""
    delivered_at_ms: int = 0
    receipt: str = ""
    """INFLIGHT: the receipt that may settle this delivery; "" once spent (failed, invisible)."""

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
        return Record(
            self.message_id,
            self.topic,
            self.group,
            self.state if state is None else state,
            self.attempt if attempt is None else attempt,
            self.retries if retries is None else retries,
            self.visible_at_ms if visible_at_ms is None else visible_at_ms,
            self.deadline_ms if deadline_ms is None else deadline_ms,
            self.delivered_at_ms if delivered_at_ms is None else delivered_at_ms,
            self.receipt if receipt is None else receipt,
        )
