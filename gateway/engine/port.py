"""The engine's public surface: what front ends, the admin service, metrics and the composition
root may call. `gateway.engine.engine.Engine` satisfies every protocol here.

Three audiences, three protocols:

* `EnginePort`, for every front end (the gateway.v1 API and each product's protocol): publish,
  consume (push through a `ConsumerPort`, or pull with `receive`), settle, the policy a
  subscription gets, and the time (`time`: real time and policy time, one conversion).
* `EngineQueries`, read-only snapshots for admin, metrics and tests: counts and views, never the
  engine's own tables; and `admin` (`AdminPort`), the admin verbs over a group.
* `EngineControl`, for the composition root: start, drain, stop.

Front ends translate their protocol into the shapes of `gateway.engine.api` and back; they never
touch the back end or the state machine. Errors are `gateway.errors` exceptions.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Protocol

from gateway.backend.base import Lease, OutMessage
from gateway.core.naming import NamingScheme
from gateway.core.policy import RetryPolicy
from gateway.core.registry import Registry
from gateway.engine.api import (
    Copy,
    DeadLetterFilter,
    DeadLetterPage,
    DeadLetterView,
    Delivery,
    ExportPage,
    GroupView,
    ImportResult,
    Scans,
    SettleGuard,
    Settlement,
    SettleResult,
    SubscriptionSpec,
    WaitingRetries,
)
from gateway.engine.clock import TimeBase
from gateway.engine.config import EngineConfig
from gateway.migrate.rename import RenameResult
from gateway.values import value


class ConsumerPort(Protocol):
    """A push consumer: deliveries as its credit allows, in batches."""

    @property
    def id(self) -> str:
        """The consumer's id (the one it subscribed with, or one the engine made up)."""
        ...

    @property
    def group(self) -> str:
        """The group it consumes in (a broadcast consumer's own group: `group#id`)."""
        ...

    @property
    def policy(self) -> RetryPolicy:
        """The policy its subscription runs under."""
        ...

    @property
    def credit(self) -> int:
        """Credit granted and not used yet (deliveries it may still be sent)."""
        ...

    @property
    def active(self) -> bool:
        """True while it is a consumer that gets deliveries: an exclusive or failover
        subscription has one at a time (the earliest subscribed of those open), the others
        all of theirs."""
        ...

    def watch_active(self, callback: Callable[[bool], object] | None) -> None:
        """Have `callback(active)` called whenever `active` changes (a failover consumer that
        takes over, or hands over); None stops the calls."""
        ...

    async def next_batch(self, max_messages: int = 256) -> list[Delivery]:
        """Wait for deliveries; `Unavailable` once the consumer is closed or the engine stops."""
        ...

    def add_credit(self, n: int) -> None:
        """Allow `n` more deliveries (each delivery uses one)."""
        ...

    def take_credit(self, n: int) -> int:
        """Withdraw up to `n` of the credit not used yet (deliveries already on their way stay
        on their way); how much was withdrawn."""
        ...

    async def cancel(self) -> None:
        """Take no more deliveries: those not yet taken by `next_batch` are given back at once;
        those taken stay with the caller, who may still settle them (or their deadline passes);
        `close` gives back whatever is still unsettled then."""
        ...

    async def close(self) -> None:
        """Stop; unsettled deliveries are given back under the policy's rules."""
        ...


class EnginePort(Protocol):
    """What every front end calls on the engine."""

    @property
    def config(self) -> EngineConfig:
        """The engine's settings (e.g. `max_message_bytes`, the largest message it takes)."""
        ...

    @property
    def time(self) -> TimeBase:
        """Real time (`time.now_ms()`, the engine's clock) and policy time, and the one
        conversion between them: durations a front end gives to or gets from the engine's
        policies are in policy time, deadlines in real time."""
        ...

    def now_ms(self) -> int:
        """The engine's clock: real wall-clock ms."""
        ...

    @property
    def positions(self) -> bool:
        """True when groups keep positions the engine can set (initial positions, `seek`) and
        message ids the back end assigns increase in topic order (`Backend.seekable`)."""
        ...

    @property
    def quiet_reads(self) -> bool:
        """True when reading a group's messages without taking them (`AdminPort.export`)
        leaves them as they were; False where the back end marks what was looked at (its next
        delivery then counts one attempt more)."""
        ...

    def policy_for(self, spec: SubscriptionSpec) -> RetryPolicy:
        """The validated policy a subscription gets; bad names and options: InvalidArgument."""
        ...

    async def publish(self, topic: str, messages: Sequence[OutMessage], *,
                      grown: Sequence[int] = (), born: Sequence[int] = (),
                      owner: str | None = "") -> list[str]:
        """Append to `topic`, durably when it returns; the message ids, in order. `grown`: for
        copies a front end made of messages it had already taken (dead letters), the bytes each
        grew by the front end's own headers; they do not count against `max_message_bytes`.
        `born`: each message's first publish time as its producer gave it (ms since the epoch,
        0: none), which its deliveries, retry copies and dead letter show (`Delivery.born_ms`);
        out of range: InvalidArgument. `owner`: the publishing principal ("": anonymous; None:
        the gateway's own), whose share of `max_topics_per_principal` a new topic takes."""
        ...

    async def open_consumer(self, spec: SubscriptionSpec, credit: int = 0) -> ConsumerPort:
        """A push consumer on `spec`, with `credit` to start with."""
        ...

    async def receive(
        self, spec: SubscriptionSpec, max_messages: int, invisible_ms: int | None, wait_ms: int,
        *, counted: bool = True,
    ) -> list[Delivery]:
        """Pull: lease up to `max_messages`, waiting up to `wait_ms` for the first (may return
        none). `invisible_ms` (policy time) where the policy lets a receive choose it. The
        bodies held count against `spec.owner`'s `max_held_bytes` unless not `counted` (a
        front end's own receive that settles what it gets at once)."""
        ...

    async def settle(
        self,
        settlements: Sequence[Settlement],
        *,
        atomic: bool = False,
        guard: SettleGuard | None = None,
    ) -> list[SettleResult]:
        """Settle deliveries; each result says what went wrong for its item (never raises for a
        bad receipt). With `atomic` the first bad item raises and nothing is applied. `guard`
        (the caller's access check, None when auth is off) is asked with each delivery's
        subscribed topic and group first; a refusal is that item's PERMISSION_DENIED."""
        ...

    async def ack(
        self, receipts: Sequence[str], *, guard: SettleGuard | None = None
    ) -> dict[int, SettleResult]:
        """Ack by receipt, without a settlement or a result per item: the failures by position."""
        ...

    async def fail(
        self, receipts: Sequence[str], *, guard: SettleGuard | None = None
    ) -> dict[int, SettleResult]:
        """Fail by receipt with the policy's own wait and no reason, without a settlement or a
        result per item: the failures by position."""
        ...

    async def create_group(self, topic: str, group: str, *, at_end: bool = False,
                           owner: str | None = "") -> bool:
        """Create `group` on `topic` (at the earliest message kept, or after the last) unless
        it exists, so that it keeps the topic's messages from then on before anyone consumes;
        True when created. False where the back end places groups itself. `owner`: as for
        `publish`; a new group takes its share of `max_stored_groups_per_principal`."""
        ...

    async def drop_group(self, topic: str, group: str) -> bool:
        """Forget a group nobody consumes any more (a reader's non-durable subscription), here
        and in the back end, so the topic's messages are no longer kept for it. False when it
        still has consumers or there was nothing to forget."""
        ...

    def group_state(self, topic: str, group: str) -> GroupState | None:
        """The engine's subscription of `group` to `topic`, or None when it runs none (also
        in `EngineQueries`)."""
        ...

    async def backlog(self, topic: str, group: str) -> int:
        """Messages of `group` on `topic` waiting for a consumer: visible and not delivered,
        being fetched or given back, or handed to a push consumer that has not taken them yet
        (`Backend.outstanding`, less what consumers took: cheap, for frequent calls; delayed
        messages the back end has not looked at yet may count)."""
        ...

    async def last_id(self, topic: str) -> str | None:
        """The message id of the newest message `topic` holds, or None when it holds none or
        the back end cannot tell (`Backend.last_id`: back ends without `positions` may not)."""
        ...

    async def properties_after(
        self, topic: str, message_id: str, limit: int
    ) -> list[tuple[str, Mapping[str, str]]] | None:
        """(message id, properties) of up to `limit` messages of `topic` after `message_id`
        (from the oldest kept when "" or no longer kept), read without touching any group;
        None where the back end cannot (`Backend.properties_after`)."""
        ...

    async def seek(
        self, topic: str, group: str, *, message_id: str = "", publish_ms: int = -1
    ) -> None:
        """Move the group's position to the message `message_id` (it and later ones are
        delivered again), or to the first message published at or after `publish_ms`. The
        group's unsettled deliveries become stale. `NotFound` for a message the topic does not
        hold; `Unimplemented` where the back end cannot move groups."""
        ...


@value
class Unsettled:
    """One delivery the engine waits on, as a snapshot."""

    receipt: str
    message_id: str
    consumer_id: str
    """The push consumer it went to ("" for a pull delivery)."""
    held: bool
    """An ordered retry the engine holds until its interval passes (not with a consumer)."""
    attempt: int = 0
    """Deliveries the message had (a held retry waits for delivery number attempt + 1)."""
    retries: int = 0
    """Failures counted so far."""
    position: int = -1
    """Its lease's position (where the back end numbers messages)."""
    due_ms: int = 0
    """A held retry: the clock time it is delivered again (0 for others)."""


@value
class GroupState:
    """A subscription the engine runs, as a snapshot."""

    topic: str
    group: str
    policy: RetryPolicy
    consumers: int
    """Push consumers open on it."""
    consumer_ids: tuple[str, ...] = ()
    """Their ids."""


class AdminPort(Protocol):
    """Admin verbs over a group (`gateway.engine.admin.GroupAdmin`)."""

    async def topics(self) -> list[str]:
        """Every topic the back end holds."""
        ...

    async def groups(self, known: Sequence[tuple[str, str]] = ()) -> list[tuple[str, str]]:
        """Every (topic, group) the engine runs, those in `known`, those whose position the
        back end keeps (`Backend.groups`), and those whose retry or dead-letter topics the back
        end holds; sorted."""
        ...

    async def describe(self, topic: str, group: str, scans: Scans | None = None) -> GroupView:
        """Counts of the group's messages by state; its retry and dead-letter topics. Pass one
        `scans` dict ({}) to the describes of one request: a destination shared by a group's
        topics is then read once for all of them."""
        ...

    async def dead_letters(
        self, topic: str, group: str, limit: int, after: int,
        where: DeadLetterFilter | None = None,
    ) -> DeadLetterPage:
        """A page of dead letters (those matching `where`) after position `after`."""
        ...

    async def dead_letter(self, topic: str, group: str, message_id: str) -> DeadLetterView:
        """One dead letter by message id; `NotFound` when the group has none such."""
        ...

    async def resend(
        self, topic: str, group: str, message_ids: Sequence[str],
        where: DeadLetterFilter | None = None,
    ) -> int:
        """Publish dead letters back to their original topic as fresh messages; remove them.
        No ids: every dead letter (matching `where`)."""
        ...

    async def delete(
        self, topic: str, group: str, message_ids: Sequence[str],
        where: DeadLetterFilter | None = None,
    ) -> int:
        """Remove dead letters (by id, matching `where`; no ids: every one matching)."""
        ...

    async def waiting_retries(self, topic: str, group: str) -> WaitingRetries:
        """The group's waiting retries by attempt number."""
        ...

    async def purge(self, topic: str, group: str, *, in_flight: bool = False) -> int:
        """Remove the group's ready, delayed and waiting-retry messages (not those in flight,
        unless `in_flight`: a deleted queue's); return how many were removed."""
        ...

    async def rename(
        self, topic: str, group: str, from_naming: str, to_naming: str, dry_run: bool = False,
    ) -> RenameResult:
        """Move the group's waiting retries and dead letters to another scheme's names."""
        ...

    async def export(
        self, topic: str, group: str, part: str, after: int, limit: int, naming: str = "",
    ) -> ExportPage:
        """A page of one part of the group's messages (ready, retry, dead-letter), not taken."""
        ...

    async def remove_exported(
        self, topic: str, group: str, part: str, positions: Sequence[int], naming: str = "",
    ) -> int:
        """Remove exported messages by position."""
        ...

    async def import_copies(
        self, topic: str, group: str, ledger: str, naming: str, copies: Sequence[Copy],
        source_names: Sequence[str] = ("", ""), earlier: Sequence[str] = (),
    ) -> ImportResult:
        """Store copies from elsewhere, each once (a copy ledger keyed by source message; keys
        recorded under an `earlier` name of the ledger count as stored)."""
        ...


class EngineQueries(Protocol):
    """Read-only views for admin, metrics and tests, and the admin verbs."""

    @property
    def admin(self) -> AdminPort:
        """Admin verbs over a group."""
        ...

    @property
    def registry(self) -> Registry:
        """The policies, naming schemes and dialects the engine was given."""
        ...

    @property
    def accepting(self) -> bool:
        """False once the engine stops dispatching (drain or shutdown)."""
        ...

    def unsettled_count(self) -> int:
        """Deliveries the engine waits on (held ordered retries included)."""
        ...

    def pending_timers(self) -> int:
        """Deadlines in the engine's timer structure."""
        ...

    def unsettled(self, topic: str, group: str) -> list[Unsettled]:
        """The deliveries of a subscription the engine waits on."""
        ...

    def drop_held(self, topic: str, group: str,
                  positions: Collection[int] | None = None) -> list[Lease]:
        """Forget the group's ordered retries held in the engine (those at `positions` only,
        when given); return their leases."""
        ...

    def group_state(self, topic: str, group: str) -> GroupState | None:
        """The engine's subscription of `group` to `topic`, or None when it runs none."""
        ...

    def groups(self) -> list[GroupState]:
        """Every subscription the engine runs."""
        ...

    def known_topic(self, topic: str) -> bool:
        """Whether `topic` is known to exist without asking the back end: it held the topic
        when the engine started, or a message went to it through this engine since."""
        ...

    def naming_schemes(self) -> list[NamingScheme]:
        """Every naming scheme the registry knows."""
        ...


class EngineControl(EngineQueries, Protocol):
    """The composition root's part: lifecycle and drain."""

    async def start(self) -> None:
        """Open the back end and start the timers."""
        ...

    async def stop_dispatch(self) -> None:
        """No new deliveries from now on; settles are still accepted."""
        ...

    async def close(self) -> None:
        """Stop everything and close the back end."""
        ...

    async def run_due_timers(self) -> None:
        """Carry out every deadline the clock has reached now, and wait until that is done
        (tests on a manual clock)."""
        ...
