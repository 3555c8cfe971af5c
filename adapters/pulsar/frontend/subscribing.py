"""A SUBSCRIBE turned into an engine consumer attached to its subscription, or refused having
changed nothing.

The order is what keeps a refused command harmless: the start message id is checked, then the
consumer joins the subscription (`SubscriptionRegistry.join`, which refuses a conflicting
subscription type), then a reader's group is claimed (`ReaderGroups.claim`: never a durable
subscription's) and, only while it has no other consumer, moved to the reader's start message;
then the engine consumer opens. A reader's `start_message_rollback_duration_sec` moves it, as
its start message id does, to the messages published in that many seconds before now. A
refusal at any step undoes the earlier ones (the consumer leaves, a reader group made for it is
dropped). A durable SUBSCRIBE to the name of a live reader group is refused before anything.
"""

from __future__ import annotations

from adapters.pulsar.frontend import starts
from adapters.pulsar.frontend.consumers import SUB_TYPES
from adapters.pulsar.frontend.shared import Shared
from adapters.pulsar.frontend.subscriptions import Kick
from adapters.pulsar.wire import wire_pb2 as pb
from gateway.engine.api import InitialPosition, SubscriptionSpec
from gateway.engine.port import ConsumerPort
from gateway.errors import AlreadyExists

POLICY = "pulsar-nack"
POLICY_OPTIONS = {"nack_delay_ms": "0"}
"""The client waits its own negative-ack delay before it asks for a redelivery, and tracks its
own ack timeout; so the engine redelivers at once and sets no deadline of its own."""


async def attach(
    shared: Shared, request: pb.CommandSubscribe, topic: str, member: str, kick: Kick,
    consumer_id: str, owner: str = "",
) -> ConsumerPort:
    """The engine consumer `consumer_id` of the SUBSCRIBE `request` on `topic`, attached to
    the subscription as `member`, for principal `owner` ("": anonymous; a group it makes
    counts against its `max_groups_per_principal`); raises (having changed nothing) when it is
    refused."""
    name = request.subscription
    kind = SUB_TYPES[request.subType]
    registry, readers, engine = shared.subscriptions, shared.readers, shared.engine
    if request.durable and (topic, name) in readers:
        raise AlreadyExists(f"subscription {name!r} on {topic!r} is a reader's (non-durable) "
                            "subscription")
    start = starts.start_id(request)
    position = starts.position(request)
    registry.join(topic, name, kind, member, kick)
    made = False
    try:
        if not request.durable:
            at_end = position is InitialPosition.LATEST
            made = await readers.claim(engine, topic, name, at_end=at_end, owner=owner)
            if start and registry.count(topic, name) == 1:
                await starts.place(engine, request, topic, start)
            elif request.start_message_rollback_duration_sec and registry.count(topic, name) == 1:
                await engine.seek(topic, name, publish_ms=starts.rollback_ms(request,
                                                                             engine.now_ms()))
        spec = SubscriptionSpec(
            topic=topic,
            group=name,
            policy=POLICY,
            options=POLICY_OPTIONS,
            consumer_type=kind,
            consumer_id=consumer_id,
            initial_position=position,
            owner=owner,
        )
        return await engine.open_consumer(spec)
    except BaseException:
        registry.leave(topic, name, member)
        if made and not registry.count(topic, name):
            await readers.release(engine, topic, name)
        raise
