"""What the parts of the AMQP front end need of each other, as protocols, so that the modules
depend downwards only: the connection (`ConnectionPort`), a consumer (`ConsumerPort`), the
dead-letter router (`RouterPort`)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Protocol

from adapters.amqp.frontend.topology import Queue


class ConnectionPort(Protocol):
    """What a channel uses of its connection."""

    id: int
    user: str
    """The user the client logged in as (the principal's name with a tokens file)."""
    principal: Any
    """The authenticated principal (None without authentication)."""
    settle_guard: Any
    cancel_notify: bool
    """The client announced `consumer_cancel_notify`: tell it when the server cancels."""
    frame_max: int
    writable: asyncio.Event
    """Set while the socket's send buffer has room."""
    pending_publish_bytes: int
    """Published bytes read and not yet stored (flow control)."""
    partial_content_bytes: int
    """Body bytes of messages still arriving, on every channel."""

    def send(self, channel: int, method: Any) -> None: ...

    def writelines(self, parts: list[bytes]) -> None: ...

    def write_backlog(self) -> int:
        """Bytes sent to the client and not yet taken by it."""
        ...

    def admit(self, size: int, then: Callable[[], None]) -> None:
        """`then` once a message of `size` bytes has room among those not yet stored."""
        ...

    def published(self, size: int) -> None: ...

    def fail(self, exc: Any) -> None: ...

    def channel_closed(self, number: int) -> None: ...

    def consumer_count(self) -> int:
        """Consumers on every channel of the connection."""
        ...


class ConsumerPort(Protocol):
    """A `basic.consume` as its channel and queue see it."""

    tag: str
    queue: Queue
    channel: Any
    """The channel it consumes on (`state.ChannelState`)."""
    priority: int
    """Its `x-priority` (0 without one)."""
    exclusive: bool
    no_ack: bool
    prefetch: int
    held: int
    """Deliveries sent and not yet acknowledged."""
    credit: int
    """Engine credit given and not yet used."""

    def want(self) -> int: ...

    def has_room(self) -> bool:
        """Whether it could take a delivery now (not cancelled, its channel open and not
        stopped by flow, its prefetch and the channel's not full)."""
        ...

    def grant(self, n: int) -> None: ...

    def withdraw(self) -> None:
        """Take back the engine credit not used yet."""
        ...

    async def cancel(self) -> None: ...

    async def server_cancel(self) -> None:
        """The queue was deleted: stop, and tell the client."""
        ...

    async def close(self) -> None: ...


class RouterPort(Protocol):
    """The dead-letter router (`deadletters.DeadLetterRouter`)."""

    def ensure(self, queue: Queue) -> None: ...

    def forget(self, name: str) -> None: ...

    async def close(self) -> None: ...


class SweeperPort(Protocol):
    """The expiry sweeper (`expiry.Sweeper`): told when a message that may expire was stored."""

    def touch(self, queue: str, at_ms: int) -> None: ...
