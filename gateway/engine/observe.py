"""Observer hooks: every state transition the engine makes, for telemetry, metrics and logs.

Observers must not slow the hot path; their failures are logged, never raised.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import structlog

log = structlog.get_logger("gateway.engine")


@dataclass(frozen=True, slots=True)
class Transition:
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


class Observer(Protocol):
    def on_transition(self, transition: Transition) -> None: ...


class Observers:
    """Fans transitions out to observers, logging (never raising) their failures."""

    def __init__(self, observers: Sequence[Observer] = ()) -> None:
        self.observers = list(observers)

    def add(self, observer: Observer) -> None:
        self.observers.append(observer)

    def emit(self, transition: Transition) -> None:
        for observer in self.observers:
            try:
                observer.on_transition(transition)
            except Exception:  # observers never break message flow
                log.exception("observer failed", observer=type(observer).__name__)
