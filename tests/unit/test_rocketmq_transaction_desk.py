"""The transaction checker's register of producer streams (who is asked about a topic's open
transactions): a stream's topics are replaced when it declares again and dropped when it ends,
looking at that stream's own topics only."""

from __future__ import annotations

import asyncio

from adapters.rocketmq.frontend.settings import CheckTimes
from adapters.rocketmq.frontend.transactions import TransactionDesk


def test_a_producer_streams_topics_are_dropped_without_looking_at_every_producers() -> None:
    desk = TransactionDesk(None, CheckTimes(), lambda: "")  # type: ignore[arg-type]
    streams: list[asyncio.Queue[object]] = [asyncio.Queue() for _ in range(3)]
    desk.add_producer(["a", "b"], streams[0])
    desk.add_producer(["b", "c"], streams[1])
    desk.add_producer(["c"], streams[0])  # declared again: "a" and "b" no longer
    assert {t: len(s) for t, s in desk._producers.items()} == {"b": 1, "c": 2}
    desk.drop_producer(streams[1])
    desk.drop_producer(streams[2])  # never declared anything
    assert {t: list(s.values()) for t, s in desk._producers.items()} == {"c": [streams[0]]}
    desk.drop_producer(streams[0])
    assert desk._producers == {} and desk._declared == {}
