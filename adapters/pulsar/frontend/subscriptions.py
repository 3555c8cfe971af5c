"""Who is attached to which subscription, to enforce Pulsar's subscription types and to reach
every consumer of a subscription (a seek that succeeds closes them all; an ack of a message
another consumer of the subscription holds settles it there).

An Exclusive subscription takes one consumer; every subscription keeps the type its first consumer
chose while it has consumers. A conflicting subscribe is refused with ConsumerBusy.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

import structlog

from adapters.pulsar.frontend.ids import MessageKey, publish_ms
from gateway.engine.api import ConsumerType
from gateway.engine.port import EnginePort
from gateway.errors import AlreadyExists, GatewayError, InvalidArgument, NotFound

log = structlog.get_logger(__name__)

Kick = Callable[[], Awaitable[None]]
"""Closes one consumer from the server's side (the client subscribes again)."""


class Holder(Protocol):
    """A consumer that holds deliveries by message id (`ConsumerSession`)."""

    def take(self, keys: Sequence[MessageKey]) -> list[str]:
        """Stop holding the deliveries of `keys` it holds; their receipts, to settle."""
        ...


async def _nothing() -> None:
    return None


class SubscriptionRegistry:
    """Consumers attached per (topic, subscription), across all connections of a front end."""

    def __init__(self) -> None:
        self._members: dict[tuple[str, str], tuple[ConsumerType, dict[str, Kick]]] = {}
        self._holders: dict[tuple[str, str], dict[str, Holder]] = {}

    def join(
        self, topic: str, subscription: str, kind: ConsumerType, member: str, kick: Kick = _nothing
    ) -> None:
        """Attach `member`; raises AlreadyExists when the subscription's type forbids it."""
        current = self._members.get((topic, subscription))
        if current is None or not current[1]:
            self._members[(topic, subscription)] = (kind, {member: kick})
            return
        held_kind, members = current
        if held_kind is not kind:
            raise AlreadyExists(
                f"subscription {subscription!r} on {topic!r} is {held_kind.value}, not {kind.value}"
            )
        if kind is ConsumerType.EXCLUSIVE:
            raise AlreadyExists(f"exclusive subscription {subscription!r} on {topic!r} is in use")
        members[member] = kick

    def hold(self, topic: str, subscription: str, member: str, holder: Holder) -> None:
        """`member`, attached, holds its deliveries in `holder` (until it leaves)."""
        if member in self._members.get((topic, subscription), (None, {}))[1]:
            self._holders.setdefault((topic, subscription), {})[member] = holder

    def holders(self, topic: str, subscription: str) -> list[Holder]:
        """The holders of the subscription's attached consumers."""
        return list(self._holders.get((topic, subscription), {}).values())

    def leave(self, topic: str, subscription: str, member: str) -> None:
        """Detach `member` (no-op when it is not attached)."""
        holders = self._holders.get((topic, subscription))
        if holders is not None:
            holders.pop(member, None)
            if not holders:
                del self._holders[(topic, subscription)]
        current = self._members.get((topic, subscription))
        if current is None:
            return
        current[1].pop(member, None)
        if not current[1]:
            del self._members[(topic, subscription)]

    async def kick_others(self, topic: str, subscription: str, member: str) -> None:
        """Close every consumer of the subscription but `member` from the server's side."""
        current = self._members.get((topic, subscription))
        if current is not None:
            for other, kick in list(current[1].items()):
                if other != member:
                    await kick()

    def count(self, topic: str, subscription: str) -> int:
        """Consumers attached to the subscription."""
        current = self._members.get((topic, subscription))
        return 0 if current is None else len(current[1])

    async def seek(
        self, engine: EnginePort, topic: str, subscription: str, target: dict[str, Any]
    ) -> None:
        """Move the subscription (`EnginePort.seek`), then close every consumer of it from the
        server's side, as a broker does (to a message the topic no longer holds: to its publish
        time, which its id begins with): the clients subscribe again at the new position with
        fresh permits. A refused seek (NotFound: no such message) changes nothing and closes no
        one. The move voids every delivery made before it, so the closed consumers give none
        back; one made between the move and a close (given back counted, as a lost consumer's)
        is forgotten by moving once more, with no consumer left. NotFound for a subscription
        with no consumer attached."""
        current = self._members.get((topic, subscription))
        if current is None:
            raise NotFound("unknown consumer: it has no subscription on this connection")
        try:
            await engine.seek(topic, subscription, **target)
        except NotFound:
            if "message_id" not in target:
                raise
            # A message no longer held (trimmed): its publish time, as a reader's start does.
            at = publish_ms(target["message_id"])
            if at > engine.now_ms():  # no message the front end gave: a made-up id
                raise InvalidArgument("seek.message_id", target["message_id"],
                                      "the id of a message of this topic") from None
            target = {"publish_ms": at}
            await engine.seek(topic, subscription, **target)
        for kick in list(current[1].values()):
            await kick()
        try:
            await engine.seek(topic, subscription, **target)
        except GatewayError as exc:  # moved all the same: only the counts of those may stay
            log.warning("pulsar seek not repeated", topic=topic, subscription=subscription,
                        error=exc.message)
