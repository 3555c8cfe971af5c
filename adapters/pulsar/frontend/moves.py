"""UNSUBSCRIBE and SEEK: the commands that delete or move a subscription, each under its name's
lock (`names`), so that what they check still holds when they change something. A refused one
has changed nothing."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from adapters.pulsar.frontend.shared import Shared
from gateway.errors import AlreadyExists


def attached(shared: Shared, topic: str, subscription: str) -> int:
    """Consumers of the subscription, of this front end or any other."""
    state = shared.engine.group_state(topic, subscription)
    engine_count = state.consumers if state is not None else 0
    return max(shared.subscriptions.count(topic, subscription), engine_count)


async def unsubscribe(
    shared: Shared, topic: str, subscription: str, durable: bool,
    close: Callable[[], Awaitable[None]], closed: Callable[[], None],
    *, force: bool = False, member: str = "",
) -> None:
    """Close the one consumer (`close`, called with the name's lock held) and delete its
    subscription, as a broker does; AlreadyExists, before anything is closed, while the
    subscription has other consumers (of any front end). With `force` the other consumers of
    this front end are closed first (their clients are told, as a broker tells them), the
    consumer being `member`; consumers of other front ends cannot be closed from here, so
    while there are some it is refused all the same, before anything is closed.

    Pulsar's own commands wait for the name's lock; a consumer of another front end does not.
    `close` takes the consumer out of the engine's subscription with no await after the check,
    so none can attach in between; one that attaches while the close completes makes the
    engine refuse the delete: then `closed` tells the client its consumer closed (as a broker
    whose subscription delete fails tells its fenced consumers), so that it subscribes again,
    and AlreadyExists."""
    busy = f"subscription {subscription!r} on {topic!r} has other consumers: not deleted"
    async with shared.names.hold(topic, subscription):
        registry = shared.subscriptions
        if force and attached(shared, topic, subscription) <= registry.count(topic, subscription):
            await registry.kick_others(topic, subscription, member)
        if attached(shared, topic, subscription) > 1:
            raise AlreadyExists(busy)
        await close()  # a reader's subscription goes with it
        if durable:
            dropped = await shared.engine.drop_group(topic, subscription)
            if not dropped and attached(shared, topic, subscription):  # another front end's
                closed()
                raise AlreadyExists(busy)


async def seek(shared: Shared, topic: str, subscription: str, target: dict[str, Any]) -> None:
    """`SubscriptionRegistry.seek` under the name's lock; a reader group stays (moved) while
    its consumers are closed, for them to subscribe again (`ReaderGroups.pinned`)."""
    readers, registry = shared.readers, shared.subscriptions
    async with shared.names.hold(topic, subscription):
        with readers.pinned(topic, subscription):
            await registry.seek(shared.engine, topic, subscription, target)
    readers.linger(shared.engine, topic, subscription,
                   lambda: not registry.count(topic, subscription),
                   guard=lambda: shared.names.hold(topic, subscription))
