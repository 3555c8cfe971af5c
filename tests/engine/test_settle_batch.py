"""One settle batch is one `Backend.carry_out` call: a retry or dead-letter copy goes to the back
end together with the ack of the delivery it replaces, so a back end can commit them together
(README "Several gateways on one broker"); the in-memory back end carries them out as before."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gateway.backend.base import Lease, OutMessage, Release
from gateway.backend.memory import InMemoryBackend
from gateway.engine.api import SettleAction, Settlement
from gateway.engine.config import EngineConfig
from gateway.engine.engine import Engine

from .harness import GROUP, Harness


class Recording(InMemoryBackend):
    """The in-memory back end, writing down each settle call."""

    calls: list[tuple[dict[str, list[str]], list[str], int]]

    async def carry_out(
        self,
        copies: Mapping[str, Sequence[OutMessage]],
        acks: Sequence[Lease],
        releases: Sequence[Release],
    ) -> None:
        self.calls.append((
            {topic: [m.message_id for m in msgs] for topic, msgs in copies.items()},
            [lease.topic for lease in acks], len(releases),
        ))
        await super().carry_out(copies, acks, releases)


def recording() -> tuple[Harness, Recording]:
    h = Harness()
    backend = Recording(h.clock)
    backend.calls = []
    h.backend = backend
    h.engine = Engine(backend, h.registry, h.clock, EngineConfig(backend_name="memory"))
    return h, backend


async def test_a_retry_copy_and_the_ack_it_replaces_are_one_call() -> None:
    h, backend = recording()
    await h.engine.start()
    try:
        spec = h.spec("rocketmq")
        ids = await h.publish(b"a", b"b", b"c")
        got = await h.receive(spec, 3)
        results = await h.engine.settle([
            Settlement(got[0].receipt, SettleAction.FAIL),
            Settlement(got[1].receipt, SettleAction.DEAD_LETTER, reason="bad"),
            Settlement(got[2].receipt, SettleAction.ACK),
        ])
        assert all(r.ok for r in results)
        assert backend.calls == [(
            {f"%RETRY%{GROUP}": [ids[0]], f"%DLQ%{GROUP}": [ids[1]]},
            ["orders", "orders", "orders"], 0,
        )]
        # Carried out as before: the retry waits 10 s, the dead letter is there, nothing else.
        (dead,) = await h.stored(f"%DLQ%{GROUP}")
        assert dead.message_id == ids[1]
        await h.advance(10_000)
        (again,) = await h.receive(spec, 3)
        assert (again.message_id, again.attempt, again.retries) == (ids[0], 2, 1)
    finally:
        await h.engine.close()


async def test_an_in_place_retry_is_a_release_in_the_same_call() -> None:
    h, backend = recording()
    await h.engine.start()
    try:
        spec = h.spec("rabbitmq", {"x_retry_interval_s": "10"})
        (mid,) = await h.publish(b"x")
        d = await h.one(spec)
        assert (await h.settle(d.receipt, SettleAction.FAIL)).ok
        assert backend.calls == [({}, [], 1)]
        await h.advance(10_000)
        again = await h.one(spec)
        assert (again.message_id, again.retries) == (mid, 1)
    finally:
        await h.engine.close()
