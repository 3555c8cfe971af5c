"""The AMQP front end's expiry sweeper: a queue whose look fails (a bug) waits `RECHECK_MS`
and the queues after it are still looked at in the same tick; before, the error left the tick
and that queue, still due, came first again every tick, stopping expiry for the rest."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from adapters.amqp.frontend import expiry

NOW = 1_000_000


def _queue(name: str) -> Any:
    return SimpleNamespace(name=name, settings=SimpleNamespace(message_ttl_ms=100))


async def test_a_failing_queue_waits_and_the_others_are_swept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ctx: Any = SimpleNamespace(engine=SimpleNamespace(now_ms=lambda: NOW, quiet_reads=True),
                               topology=SimpleNamespace(queues={"a": _queue("a"),
                                                                "b": _queue("b")}))
    sweeper = expiry.Sweeper(ctx)
    sweeper.touch("a", 0)  # not started: touches are ignored
    assert sweeper._due == {}
    sweeper._due.update({"a": 0, "b": 0})
    seen: list[str] = []

    async def look(queue: Any, now: int) -> int | None:
        if queue.name == "a":
            raise ValueError("boom")
        seen.append(queue.name)
        return now + 10

    monkeypatch.setattr(sweeper, "_look", look)
    await sweeper.sweep()
    assert seen == ["b"]
    assert sweeper._due == {"a": NOW + expiry.RECHECK_MS, "b": NOW + 10}
