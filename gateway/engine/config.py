"""Engine settings, parsed once into a frozen value."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.errors import InvalidArgument

MAX_BROADCAST_IDLE_MS = 30 * 86_400_000
"""Thirty days."""


@dataclass(frozen=True, slots=True)
class EngineConfig:
    max_message_bytes: int = 4 * 1024 * 1024
    """Largest accepted message: body, key, tag and property keys and values, in bytes (see
    `gateway.limits.message_size`)."""
    time_scale: float = 1.0
    """Multiplies every wait the policies produce (retry intervals, timeouts): real ms per policy
    ms, converted in one place (`gateway.engine.clock.TimeBase`). 1.0 in production;
    tests and demos shorten real time with e.g. 0.001 while the policies keep their numbers."""
    dispatch_batch: int = 256
    max_unacked: int = 50_000
    """Most deliveries one push consumer holds unsettled (a common broker's per-consumer default);
    credit beyond it waits until the consumer settles."""
    max_unacked_bytes: int = 64 << 20
    """Most bytes of bodies one push consumer holds unsettled (at least one delivery)."""
    max_held_bytes: int = 256 << 20
    """Most bytes of bodies one principal's deliveries hold unsettled, every consumer and pull
    of it together (`gateway.engine.holdings`): at it, its consumers get nothing more and its
    receives wait, until some are settled or time out."""
    max_publish_bytes: int = 128 << 20
    """Most bytes of messages (`gateway.limits.message_size`) of publishes the back end stores
    at once, every front end together; a publish that does not fit waits (one larger than all
    of it goes alone). Bounds the gateway's memory under many large publishes at once."""
    max_groups: int = 20_000
    """Most (topic, group) subscriptions the engine runs at once, broadcast consumers' own
    groups included: each costs about 8 KB, so names a client makes up cannot grow memory
    without bound; a new one beyond it is refused (RESOURCE_EXHAUSTED)."""
    max_groups_per_principal: int = 0
    """Most of those one principal (`SubscriptionSpec.owner`, the caller that made the group)
    runs at once, so that one client cannot take every group there is; 0 means `max_groups`
    (no share of its own). A principal at it is refused a new group (RESOURCE_EXHAUSTED)
    after its own idle groups are forgotten; other principals go on."""
    max_topics: int = 100_000
    """Most topics the back end holds (retry and dead-letter destinations included) for a new
    one to be created on first use: topic names a client makes up (a publish, a receive, a
    subscribe on any name its permissions allow) each made a topic kept for good."""
    max_stored_groups: int = 100_000
    """Most (topic, group) pairs the back end keeps (their positions, about 1 KB each in the
    embedded store) for a new group to be made on first use: group names a client makes up
    each made one kept for good. Back ends that list no groups (brokers) are not bounded."""
    max_topics_per_principal: int = 0
    """Most new topics one principal (the publisher or consumer naming it) makes since the
    engine started, so that one client cannot take every topic there is; 0 means `max_topics`
    (no share of its own). The gateway's own (owner None) count against `max_topics` only."""
    max_stored_groups_per_principal: int = 0
    """The same share of `max_stored_groups`, for new groups; 0 means `max_stored_groups`."""
    auto_create: bool = True
    """Create topics and groups on first use; when False only `topics` and existing ones work."""
    topics: tuple[str, ...] = ()
    gateway_id: str = "gateway"
    backend_name: str = "embedded"
    broadcast_idle_ms: int = 3_600_000
    """How long a broadcast consumer's own group (`group#consumer`) outlives the consumer, so
    the same consumer id resumes where it stopped; then the group is dropped and holds no
    messages back. A consumer that gave no id cannot come back: its group goes at once."""

    @property
    def groups_per_principal(self) -> int:
        """`max_groups_per_principal`, 0 read as `max_groups`."""
        return self.max_groups_per_principal or self.max_groups

    def __post_init__(self) -> None:
        if not 1024 <= self.max_message_bytes <= 1024 * 1024 * 1024:
            raise InvalidArgument("max_message_bytes", self.max_message_bytes, "1024..1073741824")
        if not 0.0 < self.time_scale <= 1.0:
            raise InvalidArgument("time_scale", self.time_scale, "greater than 0, at most 1")
        if not 1 <= self.dispatch_batch <= 10_000:
            raise InvalidArgument("dispatch_batch", self.dispatch_batch, "1..10000")
        if not 1 <= self.max_unacked <= 1_000_000:
            raise InvalidArgument("max_unacked", self.max_unacked, "1..1000000")
        if not 1 << 20 <= self.max_unacked_bytes <= 1 << 36:
            raise InvalidArgument("max_unacked_bytes", self.max_unacked_bytes,
                                  "1 MiB..64 GiB")
        if not 1 << 20 <= self.max_held_bytes <= 1 << 36:
            raise InvalidArgument("max_held_bytes", self.max_held_bytes, "1 MiB..64 GiB")
        if not 1 << 20 <= self.max_publish_bytes <= 1 << 36:
            raise InvalidArgument("max_publish_bytes", self.max_publish_bytes,
                                  "1 MiB..64 GiB")
        if not 1 <= self.max_groups <= 10_000_000:
            raise InvalidArgument("max_groups", self.max_groups, "1..10000000")
        if not 1 <= self.max_topics <= 10_000_000:
            raise InvalidArgument("max_topics", self.max_topics, "1..10000000")
        if not 1 <= self.max_stored_groups <= 10_000_000:
            raise InvalidArgument("max_stored_groups", self.max_stored_groups, "1..10000000")
        if not 0 <= self.max_groups_per_principal <= self.max_groups:
            raise InvalidArgument("max_groups_per_principal", self.max_groups_per_principal,
                                  f"0..max_groups ({self.max_groups}); 0: max_groups")
        if not 0 <= self.max_topics_per_principal <= self.max_topics:
            raise InvalidArgument("max_topics_per_principal", self.max_topics_per_principal,
                                  f"0..max_topics ({self.max_topics}); 0: max_topics")
        if not 0 <= self.max_stored_groups_per_principal <= self.max_stored_groups:
            raise InvalidArgument("max_stored_groups_per_principal",
                                  self.max_stored_groups_per_principal,
                                  f"0..max_stored_groups ({self.max_stored_groups}); 0: "
                                  "max_stored_groups")
        if not 0 <= self.broadcast_idle_ms <= MAX_BROADCAST_IDLE_MS:
            raise InvalidArgument("broadcast_idle_ms", self.broadcast_idle_ms,
                                  f"0..{MAX_BROADCAST_IDLE_MS} ms")
