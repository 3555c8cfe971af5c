"""What every connection of the AMQP front end shares: the engine, the authorizer, the topology
and its journal, the consumers of each queue, the limits."""

from __future__ import annotations

import asyncio
import itertools
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

from adapters.amqp.frontend import footprint
from adapters.amqp.frontend.admission import PublishRoom
from adapters.amqp.frontend.edge import QueueSettings
from adapters.amqp.frontend.journal import Journal
from adapters.amqp.frontend.ports import ConsumerPort, RouterPort, SweeperPort
from adapters.amqp.frontend.topology import Change, Queue, Topology
from gateway.engine.api import ConsumerType, SubscriptionSpec
from gateway.engine.port import EnginePort, EngineQueries

POLICY = "rabbitmq"
"""Every AMQP queue consumes under document 001's policy."""
NAMING = "amqp"
"""The naming scheme of AMQP queues: dead letters go to a topic the queue's dead-letter router
takes them from (`adapters.amqp.naming.AMQP_FRONT_END`)."""
DEFAULT_EXCHANGE_OPTION = "amq.default"
"""The policy option value that stands for the default exchange ("" as a dead-letter exchange
is the default exchange, but an empty option would mean none)."""
NEGATIVE_CACHE_S = 1.0
"""How long a name is known not to be a topic before the back end is asked again. Topics this
gateway's engine knows (published through any front end) are seen at once; this delay only
holds for a topic another gateway on the same broker created."""


class AuthorizerPort(Protocol):
    """Token authentication and permissions (`gateway.server.auth.Authorizer`)."""

    def authenticate(self, token: str | None) -> Any: ...

    def principal(self, name: str) -> Any: ...

    def check_publish(self, principal: Any, topic: str) -> None: ...

    def check_consume(self, principal: Any, topic: str, group: str) -> None: ...

    def settle_guard(self, principal: Any) -> Any: ...


@dataclass(frozen=True, slots=True)
class Limits:
    """The AMQP listener's limits (README, "Limits and guarantees")."""

    frame_max: int = 131_072
    """Largest frame the server proposes and accepts (RabbitMQ's default)."""
    channel_max: int = 2047
    heartbeat_s: int = 60
    """The heartbeat the server proposes; a client may choose another, or 0 for none."""
    handshake_timeout_s: float = 10.0
    max_connections: int = 1000
    max_consumers_per_channel: int = 1000
    max_consumers_per_connection: int = 10_000
    pending_publish_bytes: int = 64 << 20
    """Published bytes of one connection not yet stored; beyond it the connection is not read
    from until they are (flow control)."""
    total_pending_publish_bytes: int = 256 << 20
    """The same over every connection together: a message that does not fit waits, its
    connection not read from, until stored ones make room (`admission`)."""
    max_message_bytes: int = 4 << 20
    write_backlog_bytes: int = 8 << 20
    """Bytes waiting to be sent to a client beyond which the connection is not read from until
    the client has read them (a client that publishes but does not read its returns, confirms
    or get-oks)."""
    partial_messages: int = 16
    """Messages' worth (`max_message_bytes` each) of content still arriving on one connection,
    over all its channels, beyond which it is closed with RESOURCE_ERROR (never more than
    `pending_publish_bytes`)."""
    total_partial_bytes: int = 256 << 20
    """Content still arriving over every connection together (bodies, and properties as held
    in memory): a frame that would pass it without completing its message closes its
    connection with RESOURCE_ERROR. Frames that complete a message are never refused by it."""
    close_timeout_s: float = 5.0
    """How long a connection the server closed waits for the client's close-ok."""
    max_topology_bytes: int = footprint.MAX_TOPOLOGY_MB * footprint.MIB
    """What every declared queue, exchange and binding may hold in memory together, with
    their arguments (`footprint`); past it a declaration is refused (406)."""
    max_connection_topology_bytes: int = footprint.MAX_CONNECTION_TOPOLOGY_MB * footprint.MIB
    """The same for the entities one connection declared, while it is open."""
    max_principal_topology_bytes: int = 0
    """The same for the entities one principal declared (with authentication only; 0: half of
    `max_topology_bytes`). With authentication each principal may also declare at most half
    of the queues, exchanges and bindings the listener takes (`topology.MAX_QUEUES`, ...)."""


    @property
    def max_partial_bytes(self) -> int:
        return min(self.partial_messages * self.max_message_bytes, self.pending_publish_bytes)


def queue_spec(queue: Queue, owner: str = "") -> SubscriptionSpec:
    """The engine subscription an AMQP queue consumes through, for principal `owner` ("":
    anonymous; a group it makes counts against its `max_groups_per_principal`)."""
    return spec_for(queue.name, queue.settings, owner)


def spec_for(name: str, settings: QueueSettings, owner: str = "") -> SubscriptionSpec:
    options: dict[str, str] = {}
    if settings.retry_interval_s is not None:
        options["x_retry_interval_s"] = str(settings.retry_interval_s)
    if settings.dead_letter_exchange is not None:
        options["x_dead_letter_exchange"] = settings.dead_letter_exchange or \
            DEFAULT_EXCHANGE_OPTION
    if settings.delivery_limit is not None:
        options["x_delivery_limit"] = str(settings.delivery_limit)
    return SubscriptionSpec(
        topic=name, group=settings.group, policy=POLICY, options=options, naming=NAMING,
        consumer_type=ConsumerType.FAILOVER if settings.single_active else ConsumerType.SHARED,
        owner=owner,
    )


@dataclass
class Context:
    engine: EnginePort
    queries: EngineQueries
    authorizer: AuthorizerPort | None
    topology: Topology
    journal: Journal
    limits: Limits
    consumers: dict[str, set[ConsumerPort]] = field(default_factory=dict)
    """The AMQP consumers of each queue, on every connection."""
    prioritised: bool = False
    """A consumer with an `x-priority` other than 0 has come (never reset): until then every
    consumer has the same priority and none can outrank another (no priority work per ack)."""
    router: RouterPort | None = None
    sweeper: SweeperPort | None = None
    """Expires messages at the head of queues without consumers (`expiry.Sweeper`)."""
    connection_ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    declaring: dict[str, asyncio.Future[None]] = field(default_factory=dict)
    """New queues whose declaration waits for the back end (their groups made), by name:
    resolved once it is kept or undone. Other methods on the name wait for it (`settled`)."""
    replies: dict[str, Any] = field(default_factory=dict)
    """Direct reply-to consumers by their reply names (`replyto.ReplyConsumer`)."""
    partial_bytes: int = 0
    """Content still arriving on every connection (`Limits.total_partial_bytes`)."""
    room: PublishRoom = field(init=False)
    """Published bytes not yet stored, over every connection (`admission`)."""
    last_used: dict[str, int] = field(default_factory=dict)
    """When each queue with an `x-expires` was last used, engine time (`leases`)."""
    _topics: set[str] = field(default_factory=set)
    _topics_at: float = 0.0

    def __post_init__(self) -> None:
        self.room = PublishRoom(self.limits.total_pending_publish_bytes)

    async def settled(self, name: str) -> None:
        """Wait until no declaration of queue `name` is under way (not cancelling it)."""
        while (pending := self.declaring.get(name)) is not None:
            await asyncio.wait([pending])

    async def record(self, changes: Change | list[Change] | None) -> None:
        """Keep topology changes durably (the journal), before they are answered."""
        if changes is None:
            return
        await self.journal.append(changes if isinstance(changes, list) else [changes])

    async def is_topic(self, name: str) -> bool:
        """Whether `name` is a queue to AMQP clients: a declared queue, or a gateway topic (it
        holds messages or has a subscription) that was not deleted over AMQP. Through the
        default exchange, a message to a name that is neither is unroutable, as RabbitMQ's
        default exchange does with unknown queues."""
        if name in self.topology.queues:
            return True
        if name in self.topology.tombstones:
            return False
        if name in self._topics:
            return True
        if self.queries.known_topic(name) or any(g.topic == name for g in self.queries.groups()):
            self._topics.add(name)
            return True
        now = time.monotonic()
        if now - self._topics_at >= NEGATIVE_CACHE_S:
            self._topics_at = now
            self._topics.update(await self.queries.admin.topics())
        return name in self._topics

    def forget_topic(self, name: str) -> None:
        self._topics.discard(name)

    def consumer_count(self, queue: str) -> int:
        return len(self.consumers.get(queue, ()))

    def used(self, name: str) -> None:
        """A queue was declared, read or consumed, or its last consumer left: an `x-expires`
        queue's unused time starts again."""
        queue = self.topology.queues.get(name)
        if queue is not None and queue.settings.expires_ms is not None:
            self.last_used[name] = self.engine.now_ms()

    def implicit_queue(self, name: str) -> Queue:
        """A gateway topic no AMQP client declared, as a queue: consumed by the group of its
        name under the policy's defaults."""
        return Queue(name, True, False, {}, QueueSettings(group=name))
