"""What one run of AMQP publishes costs before it is stored: the batches the front end stores at
once hold a bounded number of headers, and flow control counts headers as well as bodies, so a
flood of header-heavy messages neither holds the event loop for seconds nor fills memory."""

from __future__ import annotations

from collections import deque
from types import SimpleNamespace

from pamqp import commands

from adapters.amqp.frontend import framing
from adapters.amqp.frontend.channel import HEADER_COST, HEADER_FACTOR, Channel
from adapters.amqp.frontend.context import Limits
from adapters.amqp.frontend.publishing import BATCH_HEADERS, Publish, next_batch


def publish(headers: int) -> Publish:
    props = commands.Basic.Properties(headers={f"h{i}": None for i in range(headers)} or None)
    return Publish(commands.Basic.Publish(), props, b"", 0)


def test_a_batch_holds_at_most_so_many_headers_and_at_least_one_message() -> None:
    work: deque[object] = deque([publish(1000) for _ in range(25)])
    sizes = []
    while work:
        sizes.append(len(next_batch(work)))  # type: ignore[arg-type]
    assert sum(sizes) == 25
    assert all(size * 1000 <= BATCH_HEADERS for size in sizes)
    huge: deque[object] = deque([publish(BATCH_HEADERS + 1), publish(0)])
    assert len(next_batch(huge)) == 1  # type: ignore[arg-type]
    plain: deque[object] = deque([publish(0) for _ in range(50)])
    assert len(next_batch(plain)) == 50  # type: ignore[arg-type]


async def test_a_published_message_counts_its_headers_against_the_pending_bytes() -> None:
    """Flow control holds a connection back by what its waiting messages take: their headers
    too, not only their bodies (a flood of empty bodies with a thousand headers each was never
    held back)."""
    conn = SimpleNamespace(pending_publish_bytes=0, partial_content_bytes=0,
                           admit=lambda size, then: then())
    channel = Channel(conn, SimpleNamespace(limits=Limits(), partial_bytes=0), 1)  # type: ignore[arg-type]
    queued: list[Publish] = []
    channel._enqueue = queued.append  # type: ignore[method-assign]
    properties = commands.Basic.Properties(headers={f"h{i}": None for i in range(1000)})
    channel._method(commands.Basic.Publish(routing_key="q"))
    channel._content_part(framing.ContentHeader(1, 0, properties, 60, 5000))
    (message,) = queued
    assert message.cost == HEADER_FACTOR * 5000 + 1000 * HEADER_COST
    assert conn.pending_publish_bytes == message.cost
