"""The shapes front ends and the admin service exchange with the engine (`gateway.engine.port`).

Front ends translate their protocol into these shapes and back; they never touch the back end or
the state machine directly.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from gateway.backend.base import OutMessage, StoredMessage
from gateway.core.selector import MessageSelector
from gateway.values import value


class ConsumerType(enum.Enum):
    """Subscription types, for the policies that distinguish them (`Registry.typed`); the
    others use SHARED."""

    SHARED = "shared"
    KEY_SHARED = "key_shared"
    EXCLUSIVE = "exclusive"
    FAILOVER = "failover"


class InitialPosition(enum.Enum):
    """Where a new group starts reading its topic (an existing group keeps its position)."""

    EARLIEST = "earliest"
    """At the earliest message the back end still keeps."""
    LATEST = "latest"
    """After the last message published before it was created: only later ones."""


class SettleAction(enum.Enum):
    ACK = "ack"
    FAIL = "fail"
    """RECONSUME_LATER, nack/reject, reconsumeLater, negativeAcknowledge: optional delay/level."""
    EXTEND = "extend"
    """Change invisible duration: a new deadline counted from now."""
    DEAD_LETTER = "dead_letter"
    """Move to the dead-letter destination now (a client's own forward to its dead letters)."""
    RELEASE = "release"
    """Give the delivery back unprocessed, as when its consumer goes away: visible again at
    once, counted only where the policy counts a lost consumer (a protocol's requeue of pulled
    deliveries still unsettled when the client's session ends)."""


ACK = SettleAction.ACK
"""`SettleAction.ACK` as a module constant for the per-message paths (see `gateway.core.states`)."""
FAIL = SettleAction.FAIL


@dataclass(frozen=True, slots=True)
class SubscriptionSpec:
    topic: str
    group: str
    policy: str
    """A registered policy name (`Registry.policies`)."""
    options: Mapping[str, str] = field(default_factory=dict)
    """Policy overrides by option name (e.g. `max_retries`, `x_retry_interval_s`); validated."""
    consumer_type: ConsumerType = ConsumerType.SHARED
    broadcast: bool = False
    """Broadcasting mode: every consumer gets every message; failures are dropped, never retried."""
    naming: str = ""
    """Naming scheme for retry and dead-letter destinations; "" means the policy's own default."""
    consumer_id: str = ""
    tag_filter: str = ""
    """A tag expression (`*`, `a||b`); "" or `*` matches every message."""
    selector: MessageSelector | None = None
    """A condition on properties (`gateway.core.selector`); a message it does not select is
    not for this group, as one the tag filter leaves out. None selects every message."""
    initial_position: InitialPosition = InitialPosition.EARLIEST
    """Where the group starts when the back end does not know it yet (on back ends that keep
    groups' positions, `Backend.seekable`; others start groups where they do)."""
    owner: str | None = ""
    """The principal subscribing ("": anonymous, as every caller is without auth): a group it
    makes counts against its `max_groups_per_principal` for as long as the engine runs it.
    None: the gateway's own (a front end's internal routing), counted in `max_groups` only."""


@value
class Delivery:
    receipt: str
    """New on every delivery; settles this delivery once."""
    message_id: str
    """The same on every retry of the message."""
    topic: str
    """Topic the message was fetched from (a retry topic for retry copies)."""
    original_topic: str
    body: bytes
    properties: Mapping[str, str]
    key: str
    tag: str
    attempt: int
    """1 on the first delivery."""
    retries: int
    """Failures counted so far (the retry count a product shows its consumers)."""
    deadline_ms: int
    """Wall-clock ms at which the delivery times out (0: no deadline)."""
    publish_ms: int
    """When this copy was stored (a retry or dead-letter copy is stored anew)."""
    deliver_at_ms: int
    group: str = ""
    born_ms: int = 0
    """The message's first publish time, the same on its retry and dead-letter copies (0: the
    same as `publish_ms`)."""


@value
class Settlement:
    receipt: str
    action: SettleAction
    delay_ms: int | None = None
    delay_level: int | None = None
    invisible_ms: int | None = None
    reason: str = ""


@value
class SettleResult:
    receipt: str
    ok: bool
    error_code: str = ""
    """A `gateway.errors` code name when not ok (FAILED_PRECONDITION, INVALID_ARGUMENT, …)."""
    error: str = ""
    new_receipt: str = ""
    """For EXTEND: the receipt that settles the delivery from now on (the same one here)."""
    deadline_ms: int = 0


SettleGuard = Callable[[str, str], None]
"""A caller's access check for settling: given a delivery's subscribed topic and group, raises
`PermissionDenied` unless the caller may settle it (`gateway.server.auth.Authorizer`)."""


@dataclass(frozen=True, slots=True)
class ConsumerView:
    """A push consumer open on a group."""

    consumer_id: str
    unsettled: int
    """Deliveries it holds unsettled."""


@dataclass(frozen=True, slots=True)
class GroupView:
    """Where a group's messages are: counts by state, and its retry and dead-letter topics."""

    ready: int
    delayed: int
    inflight: int
    waiting_retry: int
    dead_letters: int
    oldest_ready_ms: int
    next_retry_ms: int
    retry_topic: str
    dead_letter_topic: str
    policy: str = ""
    """The policy of the subscription the engine runs for the group ("" when it runs none)."""
    naming: str = ""
    """The naming scheme of its retry and dead-letter topics."""
    max_retries: int = -1
    """The policy's retry limit (-1: unlimited, or no subscription runs)."""
    consumers: tuple[ConsumerView, ...] = ()
    removes_exported: bool = True
    """The back end removes exported messages by position (`Backend.removes_by_position`): the
    gateway can be the source of `migrate copy`."""


@dataclass(frozen=True, slots=True)
class DeadLetterFilter:
    """Which dead letters an admin verb means; an empty filter matches every one. Text fields
    match case-insensitively as substrings; 0 means no bound."""

    reason: str = ""
    min_attempt: int = 0
    max_attempt: int = 0
    since_ms: int = 0
    until_ms: int = 0
    text: str = ""
    """Matched against the message id, key, tag, property keys and values, and the body."""

    def empty(self) -> bool:
        return self == _NO_FILTER


_NO_FILTER = DeadLetterFilter()


@dataclass(frozen=True, slots=True)
class AttemptRetries:
    """A group's waiting retries of one attempt number."""

    attempt: int
    """Deliveries the messages had so far."""
    count: int
    next_due_ms: int
    """When the earliest of them becomes ready (wall-clock ms)."""


@dataclass(frozen=True, slots=True)
class WaitingRetries:
    """A group's waiting retries by attempt number."""

    by_attempt: tuple[AttemptRetries, ...]
    next_due_ms: int
    """When the earliest waiting retry becomes ready (0: none waits)."""
    total: int
    complete: bool
    """False when only the first `gateway.engine.admin.MAX_WAITING_SCAN` were counted."""


@dataclass(frozen=True, slots=True)
class DeadLetterPage:
    """A page of dead letters."""

    views: tuple[DeadLetterView, ...]
    next_after: int
    """The position to continue after; -1 at the end."""
    scanned: int
    """Dead letters looked at (matching or not)."""


@dataclass(frozen=True, slots=True)
class DeadLetterView:
    """One dead letter, with what the engine wrote on it."""

    message: StoredMessage
    original_topic: str
    reason: str
    dead_lettered_ms: int
    properties: dict[str, str]


@dataclass(frozen=True, slots=True)
class ExportPage:
    """A page of one part of a group's messages."""

    source_topic: str
    messages: tuple[StoredMessage, ...]
    next_after: int
    """Position to continue after; -1 at the end."""


@dataclass(frozen=True, slots=True)
class Copy:
    """A message from elsewhere to store once (`import_copies`)."""

    source_key: str
    part: str
    message: OutMessage
    first_delivery: bool = False
    """Stored even when the ledger knows `source_key` (see `Backend.store_once`)."""


@dataclass(frozen=True, slots=True)
class ImportResult:
    stored: int
    skipped: int
    retry_topic: str
    dead_letter_topic: str


@dataclass(frozen=True, slots=True)
class Scanned:
    """What one read of a group-wide destination found."""

    rows: list[tuple[str | None, str | None, str, int, int]]
    """(origin topic or None, origin group or None, message id, deliver at ms, publish ms) per
    message."""
    complete: bool
    """False when the destination holds more than the read looked at."""


Scans = dict[tuple[str, str], Scanned]
"""Group-wide destinations already read, by (destination, group), for one request."""
