"""The pure retry core: states, events, records, policies, naming and the decision function."""

from gateway.core.events import (
    Ack,
    ConsumerLost,
    DeadLetterNow,
    DeadlinePassed,
    Deliver,
    Event,
    Extend,
    Fail,
    RetryDue,
)
from gateway.core.machine import Decision, Outcome, decide
from gateway.core.naming import NamingScheme
from gateway.core.policy import Placement, RetryMode, RetryPolicy, RetryRequest
from gateway.core.record import Record
from gateway.core.registry import Registry
from gateway.core.states import State

__all__ = [
    "Ack",
    "ConsumerLost",
    "DeadLetterNow",
    "DeadlinePassed",
    "Decision",
    "Deliver",
    "Event",
    "Extend",
    "Fail",
    "NamingScheme",
    "Outcome",
    "Placement",
    "Record",
    "Registry",
    "RetryDue",
    "RetryMode",
    "RetryPolicy",
    "RetryRequest",
    "State",
    "decide",
]
