"""What a policy looks like to someone moving to or from it: facts a dialect declares.

A `RetryPolicy` says what the state machine does; `PolicyTraits` says how a product's clients
see it (what the attempt count is called, which properties a retry copy carries) and which
options or client calls tune it (`Knob`s), so that `gateway migrate plan` can compare two
policies and suggest the target options that come closest without naming any product. Each
dialect registers the traits of its policies (`Registry.add_traits`); the numbers and names
come from the dialect, never from here.

Pure values: no I/O, no clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar


@dataclass(frozen=True, slots=True)
class CountName:
    """One way a consumer of the policy sees the message's attempt count."""

    name: str
    """As the client spells it (a property, a header, a client call or a field)."""
    kind: str
    """`property`, `header`, `field` (of the delivered message) or `flag`."""
    first: int
    """Its value on the first delivery: 0 when it counts retries, 1 when it counts
    deliveries."""
    note: str = ""
    """Where it appears or when it differs (e.g. only on retry copies)."""


@dataclass(frozen=True, slots=True)
class IntervalOption:
    """A policy option that sets one fixed wait for every retry."""

    option: str
    """The option's key (as `--option KEY=VALUE` or a front end's argument)."""
    low: int
    high: int
    """Allowed range, in the option's unit."""
    unit_ms: int
    """Milliseconds per unit of the option (1000 for seconds)."""
    label: str = ""
    """The name users know it by (a queue argument, a client setting), for messages."""


@dataclass(frozen=True, slots=True)
class LevelRequest:
    """On each failure the consumer may name a level of a delay table (level k waits entry
    k-1)."""

    levels_ms: tuple[int, ...]
    call: str
    """How the consumer asks, with `{level}` where the level goes."""


@dataclass(frozen=True, slots=True)
class DelayRequest:
    """On each failure the consumer may ask for any wait in a range."""

    low_ms: int
    high_ms: int
    unit_ms: int
    """The request's granularity (1000: whole seconds)."""
    call: str
    """How the consumer asks, with `{delay}` where the wait goes, in units."""


@dataclass(frozen=True, slots=True)
class RetriesOption:
    """A policy option that sets how many retries come before the end."""

    option: str
    low: int
    high: int
    label: str = ""


@dataclass(frozen=True, slots=True)
class TimeoutOption:
    """A policy option that sets the time a delivery may stay unacknowledged before it counts
    as a failure."""

    option: str
    low: int
    high: int
    unit_ms: int
    label: str = ""


@dataclass(frozen=True, slots=True)
class DeadLetterOption:
    """A policy option that turns dead-lettering on (exhausted messages are kept rather than
    discarded)."""

    option: str
    value: str
    """The value to give it; `{topic}` and `{group}` are filled in."""
    label: str = ""
    off: str = ""
    """The value that turns dead-lettering off ("" when leaving the option out does)."""


Knob = IntervalOption | LevelRequest | DelayRequest | RetriesOption | TimeoutOption | \
    DeadLetterOption
"""Something that tunes a policy: an option of the policy or a request its consumer makes."""
K = TypeVar("K")


@dataclass(frozen=True, slots=True)
class PolicyTraits:
    """How a policy's clients see it and what tunes it (see the module docstring)."""

    count: tuple[CountName, ...]
    """How a consumer sees the attempt count, first the name its client shows best."""
    retry_properties: tuple[str, ...] = ()
    """Properties the product writes on a retry copy (none when retries stay in place)."""
    dead_letter_properties: tuple[str, ...] = ()
    """Properties the product writes on a dead letter."""
    knobs: tuple[Knob, ...] = ()
    count_resets: str = ""
    """When the count shown goes back to 0 by itself ("" when it never does)."""
    broadcast: bool = False
    """Whether the policy has a broadcasting mode (every consumer gets every message, a failure
    is dropped); its option is the engine's `broadcast`."""
    ordered_policy: str = ""
    """The sibling policy that keeps order (a failing message suspends its queue), if any."""
    delivery_timeout: str = ""
    """What the delivery timeout is called (a client setting), for messages."""

    def knob(self, kind: type[K]) -> K | None:
        """The first knob of the given kind, or None."""
        for knob in self.knobs:
            if isinstance(knob, kind):
                return knob
        return None


NO_TRAITS = PolicyTraits(count=())
"""For a policy whose dialect declared nothing: every comparison still works, without names."""
