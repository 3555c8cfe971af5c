"""What the state machine knows of one message for one consumer group."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.core.states import State


@dataclass(frozen=True, slots=True)
class Record:
    message_id: str
    topic: str
    """The original topic (retry copies keep it)."""
    group: str
    state: State = State.READY
    attempt: int = 0
    """Deliveries so far; the delivery in flight counts (1 on the first delivery)."""
    retries: int = 0
    """Failures counted against max retries (RocketMQ reconsumeTimes, Pulsar RECONSUMETIMES)."""
    visible_at_ms: int = 0
    """READY / WAITING_RETRY: when the message may be delivered."""
    deadline_ms: int = 0
    """INFLIGHT: when the delivery times out (0: no deadline)."""
    delivered_at_ms: int = 0
    receipt: str = ""
    """INFLIGHT: the receipt that may settle this delivery; "" once spent (failed, invisible)."""
