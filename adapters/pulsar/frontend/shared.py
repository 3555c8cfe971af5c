"""What all connections of one Pulsar front end share (the engine, id and dedup registries, the
subscriptions and reader groups, the read budget) and the per-connection limits they hold to."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field

from adapters.pulsar.frontend.access import ProducerAccess
from adapters.pulsar.frontend.budget import READ_BUDGET_BYTES, ReadBudget
from adapters.pulsar.frontend.consumers import MAX_UNACKED
from adapters.pulsar.frontend.framing import PARTIAL_FACTOR, PartialFrames
from adapters.pulsar.frontend.ids import DedupRegistry, IdAllocator
from adapters.pulsar.frontend.names import NameLocks
from adapters.pulsar.frontend.namespaces import TopicListing
from adapters.pulsar.frontend.ports import AuthorizerPort
from adapters.pulsar.frontend.readers import ReaderGroups
from adapters.pulsar.frontend.schemas import SchemaRegistry
from adapters.pulsar.frontend.subscriptions import SubscriptionRegistry
from adapters.pulsar.wire.frames import MAX_MESSAGE_SIZE
from gateway.engine.port import EnginePort

HANDSHAKE_TIMEOUT_S = 10.0
MAX_PRODUCERS = 1000
"""Producers per connection."""
MAX_CONSUMERS = 1000
"""Consumers per connection."""


@dataclass(frozen=True, slots=True)
class Shared:
    """What all connections of one front end share."""

    engine: EnginePort
    service_url: str
    ids: IdAllocator
    dedup: DedupRegistry
    subscriptions: SubscriptionRegistry
    keepalive_s: float
    max_message_size: int = MAX_MESSAGE_SIZE
    """Announced in CONNECTED; the client refuses larger messages itself."""
    authorizer: AuthorizerPort | None = None
    """When set, CONNECT must carry a valid token and topics are checked per principal."""
    connection_ids: Iterator[int] = field(default_factory=lambda: itertools.count(1))
    handshake_timeout_s: float = HANDSHAKE_TIMEOUT_S
    max_producers: int = MAX_PRODUCERS
    max_consumers: int = MAX_CONSUMERS
    max_unacked: int = MAX_UNACKED
    budget: ReadBudget = field(default_factory=ReadBudget)
    partial: PartialFrames = field(
        default_factory=lambda: PartialFrames(PARTIAL_FACTOR * READ_BUDGET_BYTES))
    """Bytes of incomplete frames held across the listener (`framing`)."""
    readers: ReaderGroups = field(default_factory=ReaderGroups)
    """The readers' (non-durable) subscriptions the front end made (and only it drops)."""
    names: NameLocks = field(default_factory=NameLocks)
    """Serializes the commands that change one (topic, subscription)."""
    access: ProducerAccess = field(default_factory=ProducerAccess)
    """Shared and Exclusive producers per topic."""
    schemas: SchemaRegistry = field(default_factory=SchemaRegistry)
    """The topics' schema versions (`adapters.pulsar.frontend.schemas`)."""
    listing: TopicListing = field(default_factory=lambda: TopicListing(None))
    """The topics pattern subscriptions list (`adapters.pulsar.frontend.namespaces`)."""
